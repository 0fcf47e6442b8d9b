// Tests of the inference harness of module 10 (CPU only): the paged and varlen problems, their
// validation messages, block tables, sequence lengths, and the double references, which must
// agree with the dense reference (common/reference.h) on the same numbers laid out densely.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/registry.h"
#include "common/runner.h"
#include "modules/10_decoding/decoding.h"
#include "tests/host_checks.h"

using namespace attn;
using testing::expect_error;
using testing::max_abs_difference;

namespace {

// Per sequence b: dense K and V [1, len_b, kv_heads, d] (BSHD), Q [1, seq_q, heads, d].
struct DenseSequences {
  std::vector<std::vector<float>> q, k, v;
};

DenseSequences random_dense(const PagedProblem& p, uint64_t seed) {
  DenseSequences s;
  for (int b = 0; b < p.batch; ++b) {
    std::vector<float> q(size_t(p.seq_q) * p.heads * p.head_dim);
    std::vector<float> k(size_t(p.seqlens_k[b]) * p.kv_heads * p.head_dim), v(k.size());
    fill_uniform(q, seed + 10 * b + 1);
    if (!k.empty()) fill_uniform(k, seed + 10 * b + 2), fill_uniform(v, seed + 10 * b + 3);
    s.q.push_back(q), s.k.push_back(k), s.v.push_back(v);
  }
  return s;
}

// The paged inputs holding the same numbers: Q packed [batch, seq_q, heads, d], token t of
// sequence b written to row t % page_size of page table[b][t / page_size]. Every other row of
// the pool holds 1000: a reference that reads a row it should not is far off.
PagedInputs scatter(const PagedProblem& p, const DenseSequences& s, bool shuffle, uint64_t seed) {
  PagedInputs in;
  in.block_table = make_block_table(p, shuffle, seed);
  in.k_cache.assign(size_t(p.cache_elements()), 1000.0f);
  in.v_cache.assign(size_t(p.cache_elements()), 1000.0f);
  const int64_t row = int64_t(p.kv_heads) * p.head_dim;  // one token of the cache
  for (int b = 0; b < p.batch; ++b) {
    in.q.insert(in.q.end(), s.q[b].begin(), s.q[b].end());
    for (int t = 0; t < p.seqlens_k[b]; ++t) {
      const int page = in.block_table[size_t(b) * p.pages_per_seq + t / p.page_size];
      const int64_t at = (int64_t(page) * p.page_size + t % p.page_size) * row;
      std::copy_n(s.k[b].begin() + t * row, row, in.k_cache.begin() + at);
      std::copy_n(s.v[b].begin() + t * row, row, in.v_cache.begin() + at);
    }
  }
  return in;
}

// The dense reference of sequence b: module 04's bottom-right causal mask with seq_q queries
// and len_b keys, BSHD. A sequence without keys has no dense problem: its output is 0.
std::vector<double> dense_sequence(const PagedProblem& p, const DenseSequences& s, int b) {
  if (p.seqlens_k[b] == 0) return std::vector<double>(s.q[b].size(), 0.0);
  Problem d = Problem::make(1, p.heads, p.seq_q, p.seqlens_k[b], p.head_dim, p.causal,
                            Layout::BSHD, p.kv_heads);
  REQUIRE(validate(d).is_ok());
  return reference_attention(d, s.q[b], s.k[b], s.v[b]);
}

// A registered inference module (as module 10 is) for the dtype and entry-point checks; its
// entry points are never called here (no GPU).
Status fake_supports_paged(const PagedProblem& p) {
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("fake decoding supports head_dim 64 or 128");
  return Status::ok();
}
Status fake_decode(const PagedProblem&, const PagedDevicePtrs&, cudaStream_t) {
  return Status::error("fake decode ran");
}
const InferenceEntry kFakeEntry{fake_supports_paged, nullptr, nullptr, fake_decode, nullptr,
                                nullptr};
const Kernel kFakeInference{96, "fake_inference", "test only", Backend::gpu, Impl::solution,
                            refuse_dense_problem, nullptr, nullptr, &kFakeEntry};

// A dense 16-bit module (as module 07 is).
Status any_problem(const Problem&) { return Status::ok(); }
Status fake_forward16(const Problem&, const void*, const void*, const void*, void*, cudaStream_t) {
  return Status::error("fake forward ran");
}
const Kernel kFakeDense{95, "fake_dense", "test only", Backend::gpu, Impl::solution, any_problem,
                        nullptr, fake_forward16};

}  // namespace

TEST_CASE("paged reference = dense reference, through in-order and shuffled tables") {
  for (const int page_size : {1, 16, 64})
    for (const bool shuffle : {false, true})
      for (const auto& [causal, seq_q] : {std::pair{false, 1}, std::pair{true, 3}})
        for (const auto& [heads, kv_heads] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{6, 1}}) {
          const PagedProblem p = PagedProblem::make(heads, kv_heads, 8, seq_q, {0, 1, 17, 1000},
                                                    page_size, causal, DType::f32);
          REQUIRE(validate(p).is_ok());
          INFO(p.describe() << (shuffle ? " shuffled" : " in order"));
          const DenseSequences dense = random_dense(p, 100 + page_size);
          const PagedInputs in = scatter(p, dense, shuffle, 7);
          REQUIRE(validate_inputs(p, in).is_ok());
          const std::vector<double> paged = paged_reference(p, in);
          const size_t per_sequence = size_t(p.seq_q) * p.heads * p.head_dim;
          for (int b = 0; b < p.batch; ++b) {
            INFO("sequence " << b << " of length " << p.seqlens_k[b]);
            const std::vector<double> got(paged.begin() + b * per_sequence,
                                          paged.begin() + (b + 1) * per_sequence);
            CHECK(max_abs_difference(got, dense_sequence(p, dense, b)) < 1e-12);
          }
        }
}

TEST_CASE("paged reference: empty sequences and queries before the first key give 0") {
  // Causal, 3 queries, 1 key: queries 0 and 1 sit before the key (module 04's seq_q > seq_k).
  const PagedProblem p = PagedProblem::make(2, 1, 4, 3, {1, 0}, 16, true, DType::f32);
  CHECK(p.visible_keys(0, 0) == 0);
  CHECK(p.visible_keys(0, 1) == 0);
  CHECK(p.visible_keys(0, 2) == 1);
  CHECK(p.visible_keys(1, 2) == 0);
  const PagedInputs in = random_paged_inputs(p, 5, false);
  const std::vector<double> o = paged_reference(p, in);
  const int row = p.heads * p.head_dim;  // one query token of O
  for (int i = 0; i < 2 * row; ++i) CHECK(o[i] == 0.0);
  // Query 2 sees its one key: O is that key's V row (softmax over one key is 1).
  const int page = in.block_table[0];
  for (int h = 0; h < p.heads; ++h)
    for (int c = 0; c < p.head_dim; ++c)
      CHECK(o[2 * row + h * p.head_dim + c] ==
            double(in.v_cache[size_t(page) * p.page_size * p.head_dim + c]));
  for (int i = 3 * row; i < 6 * row; ++i) CHECK(o[i] == 0.0);  // sequence 1 has no keys
}

TEST_CASE("varlen reference = dense reference per sequence, and sequences never mix") {
  for (const bool causal : {false, true})
    for (const auto& [heads, kv_heads] : {std::pair{4, 4}, std::pair{4, 2}}) {
      const VarlenProblem p = VarlenProblem::make(heads, kv_heads, 8, {3, 0, 17, 5, 9},
                                                  {3, 4, 17, 40, 0}, causal, DType::f32);
      REQUIRE(validate(p).is_ok());
      INFO(p.describe());
      const VarlenInputs in = random_varlen_inputs(p, 11);
      const std::vector<double> o = varlen_reference(p, in);
      const std::vector<int32_t> cu_q = p.cu_seqlens_q(), cu_k = p.cu_seqlens_k();
      CHECK(cu_q == std::vector<int32_t>{0, 3, 3, 20, 25, 34});
      CHECK(cu_k == std::vector<int32_t>{0, 3, 7, 24, 64, 64});
      const int64_t q_row = int64_t(heads) * p.head_dim, k_row = int64_t(kv_heads) * p.head_dim;
      for (int b = 0; b < p.batch(); ++b) {
        if (p.seqlens_q[b] == 0) continue;
        INFO("sequence " << b);
        const std::vector<double> got(o.begin() + cu_q[b] * q_row, o.begin() + cu_q[b + 1] * q_row);
        if (p.seqlens_k[b] == 0) {
          CHECK(std::all_of(got.begin(), got.end(), [](double x) { return x == 0.0; }));
          continue;
        }
        const Problem d = p.sequence(b);
        CHECK(d.q.seq == q_row);  // packed rows: heads interleaved per token
        CHECK(d.k.seq == k_row);
        const auto slice = [](const std::vector<float>& x, int64_t from, int64_t to) {
          return std::vector<float>(x.begin() + from, x.begin() + to);
        };
        const std::vector<double> want = reference_attention(
            d, slice(in.q, cu_q[b] * q_row, cu_q[b + 1] * q_row),
            slice(in.k, cu_k[b] * k_row, cu_k[b + 1] * k_row),
            slice(in.v, cu_k[b] * k_row, cu_k[b + 1] * k_row));
        CHECK(max_abs_difference(got, want) < 1e-12);
      }
      // Changing sequence 3's keys leaves every other sequence's output as it was. (Negated,
      // not shifted: adding one constant to every key can leave a softmax unchanged.)
      VarlenInputs changed = in;
      for (int64_t e = cu_k[3] * k_row; e < cu_k[4] * k_row; ++e) changed.k[e] = -changed.k[e];
      const std::vector<double> o2 = varlen_reference(p, changed);
      for (int64_t e = 0; e < int64_t(o.size()); ++e) {
        const bool in_sequence_3 = e >= cu_q[3] * q_row && e < cu_q[4] * q_row;
        if (!in_sequence_3) REQUIRE(o2[e] == o[e]);
      }
      CHECK(max_abs_difference(o, o2) > 1e-3);
    }
}

TEST_CASE("paged problem: sizes, visible keys, flops and bytes, describe") {
  const PagedProblem p = PagedProblem::make(32, 8, 128, 1, {1, 17, 4096}, 16);
  CHECK(p.batch == 3);
  CHECK(p.group() == 4);
  CHECK(p.kv_head(7) == 1);
  CHECK(p.pages_of(0) == 1);
  CHECK(p.pages_of(1) == 2);
  CHECK(p.pages_of(2) == 256);
  CHECK(p.pages_per_seq == 256);
  CHECK(p.num_pages == 259);
  CHECK(p.max_seqlen_k() == 4096);
  CHECK(p.total_keys() == 4114);
  CHECK(p.q_elements() == 3 * 32 * 128);
  CHECK(p.cache_elements() == int64_t(259) * 16 * 8 * 128);
  CHECK(p.table_elements() == 3 * 256);
  CHECK(p.softmax_scale() == doctest::Approx(1.0 / std::sqrt(128.0)));
  CHECK(p.describe() == "decode B=3 H=32 KVH=8 D=128 Sq=1 Sk=[1,17,4096] page=16 bf16");
  CHECK(paged_flops(p) == 4.0 * 32 * 128 * 4114);
  CHECK(paged_bytes(p) == 2.0 * 128 * (2.0 * 3 * 32 + 2.0 * 4114 * 8));

  const PagedProblem causal = PagedProblem::make(4, 4, 64, 4, {2, 10}, 16, true, DType::f16);
  // Queries of sequence 1 sit at positions 6..9 and see keys up to them.
  CHECK(causal.visible_keys(1, 0) == 7);
  CHECK(causal.visible_keys(1, 3) == 10);
  CHECK(causal.visible_keys(0, 1) == 0);  // position -1: before the first key
  CHECK(causal.visible_keys(0, 3) == 2);
  CHECK(paged_flops(causal) == 4.0 * 4 * 64 * (0 + 0 + 1 + 2 + 7 + 8 + 9 + 10));
  CHECK(causal.describe() == "decode B=2 H=4 D=64 Sq=4 Sk=[2,10] page=16 causal f16");
  const PagedProblem many = PagedProblem::make(8, 8, 64, 1, {1, 2, 3, 4, 5, 6, 7, 8, 90}, 16);
  CHECK(many.describe() == "decode B=9 H=8 D=64 Sq=1 Sk=[min 1 mean 14 max 90] page=16 bf16");
}

TEST_CASE("paged problem: every validation message fires on its bad input") {
  CHECK(validate(PagedProblem::make(32, 8, 128, 1, {0, 1, 17, 4096}, 16)).is_ok());
  CHECK(validate(PagedProblem::make(1, 1, 1, 1, {0}, 1)).is_ok());  // an empty sequence is valid
  CHECK(validate(PagedProblem::make(1, 1, kMaxHeadDim, 1, {5}, 1024)).is_ok());

  for (const int page : {48, 0, -16, 2048, 3})
    expect_error(validate(PagedProblem::make(4, 4, 64, 1, {5}, page)),
                 "page size " + std::to_string(page) +
                     " is not supported: use a power of two from 1 to 1024");
  expect_error(validate(PagedProblem::make(4, 4, 64, 1, {5, -5}, 16)),
               "sequence 1 has a negative key length (-5)");
  expect_error(validate(PagedProblem::make(8, 3, 64, 1, {5}, 16)),
               "kv_heads must divide heads (got heads=8, kv_heads=3)");
  expect_error(validate(PagedProblem::make(0, 0, 64, 1, {5}, 16)), "heads must be >= 1 (got 0)");
  expect_error(validate(PagedProblem::make(4, 4, 0, 1, {5}, 16)), "head_dim must be >= 1");
  expect_error(validate(PagedProblem::make(4, 4, 300, 1, {5}, 16)),
               "head_dim 300 is out of range: use 1 to 256");
  expect_error(validate(PagedProblem::make(4, 4, 64, 0, {5}, 16)), "seq_q (new query tokens");
  expect_error(validate(PagedProblem::make(4, 4, 64, 1, {}, 16)), "at least one sequence");
  PagedProblem p = PagedProblem::make(4, 4, 64, 1, {5, 6}, 16);
  p.batch = 3;
  expect_error(validate(p), "seqlens_k has 2 lengths for batch 3");
  p = PagedProblem::make(4, 4, 64, 1, {5}, 16);
  p.scale = -1.0f;
  expect_error(validate(p), "scale must be a finite number");

  p = PagedProblem::make(4, 1, 64, 1, {17, 5000, 5000}, 16);
  p.pages_per_seq = 312;
  expect_error(validate(p), "sequence 1 has 5000 keys, more than its table row of 312 pages x 16 "
                            "tokens holds");
  p = PagedProblem::make(4, 1, 64, 1, {40, 16}, 16);
  p.num_pages = 2;
  expect_error(validate(p), "sequence 0 needs 3 pages of 16 tokens, more than the 2 pages of the "
                            "cache pool");
  p.num_pages = -1;
  expect_error(validate(p), "must be >= 0");
  // Sequences may share pages: a pool of the longest sequence's pages is enough.
  p.num_pages = 3;
  CHECK(validate(p).is_ok());

  // 32-bit element offsets: Q and the table. The cache is addressed with 64-bit offsets from
  // 32-bit page numbers, so a pool of 1e11 elements (200 GB in bf16) is a valid problem.
  expect_error(validate(PagedProblem::make(64, 64, 256, 1 << 18, {1}, 16)),
               "Q has 4.29e+09 elements (batch x seq_q x heads x head_dim), more than the 2^31-1");
  CHECK(validate(PagedProblem::make(8, 8, 128, 1, {100000000}, 1024)).is_ok());
  p = PagedProblem::make(1, 1, 8, 1, std::vector<int>(1 << 16, 1), 1);
  p.pages_per_seq = 1 << 16;
  expect_error(validate(p), "the block table has 4.29e+09 elements");
}

TEST_CASE("block table: validation names the entry and what is wrong") {
  // Sequence 0: 16 keys (1 page); sequence 1: 64 keys (4 pages). Pool of 5, table 2 x 4.
  const PagedProblem p = PagedProblem::make(2, 2, 8, 1, {16, 64}, 16);
  std::vector<int32_t> table = make_block_table(p, false, 0);
  CHECK(table == std::vector<int32_t>{0, -1, -1, -1, 1, 2, 3, 4});
  CHECK(validate_block_table(p, table).is_ok());
  table[1 * 4 + 3] = 5;
  expect_error(validate_block_table(p, table), "block_table[1][3] = 5 points past the cache (5 pages)");
  table[1 * 4 + 3] = -1;
  expect_error(validate_block_table(p, table), "block_table[1][3] = -1 is not a page");
  table = make_block_table(p, false, 0);
  table[1] = 900;  // past sequence 0's one page: unused, so any value is fine
  CHECK(validate_block_table(p, table).is_ok());
  table.pop_back();
  expect_error(validate_block_table(p, table),
               "the block table has 7 entries, expected batch x pages_per_seq = 2 x 4 = 8");

  PagedInputs in = random_paged_inputs(p, 3, true);
  CHECK(validate_inputs(p, in).is_ok());
  in.q.pop_back();
  expect_error(validate_inputs(p, in),
               "Q holds 31 values, expected batch x seq_q x heads x head_dim = 32");
  in = random_paged_inputs(p, 3, true);
  in.v_cache.resize(10);
  expect_error(validate_inputs(p, in), "the V cache holds 10 values");
  in = random_paged_inputs(p, 3, true);
  in.block_table[4] = 77;
  expect_error(validate_inputs(p, in), "block_table[1][0] = 77 points past the cache");
  // The reference refuses a bad table instead of reading outside the cache.
  CHECK_THROWS_AS(paged_reference(p, in), std::invalid_argument);
}

TEST_CASE("make_block_table: distinct in-range pages, in order or shuffled, -1 unused") {
  const PagedProblem p = PagedProblem::make(2, 2, 8, 1, {0, 1, 17, 1000, 33}, 16);
  for (const bool shuffle : {false, true}) {
    const std::vector<int32_t> table = make_block_table(p, shuffle, 42);
    REQUIRE(int64_t(table.size()) == p.table_elements());
    std::set<int32_t> used;
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.pages_per_seq; ++j) {
        const int32_t page = table[size_t(b) * p.pages_per_seq + j];
        if (j >= p.pages_of(b)) {
          CHECK(page == -1);
          continue;
        }
        CHECK(page >= 0);
        CHECK(page < p.num_pages);
        CHECK(used.insert(page).second);  // no page handed out twice
      }
    CHECK(int(used.size()) == p.num_pages);  // make() sizes the pool exactly
  }
  const std::vector<int32_t> in_order = make_block_table(p, false, 42);
  CHECK(in_order[size_t(3) * p.pages_per_seq] == 3);  // after 0 + 1 + 2 pages
  CHECK(make_block_table(p, true, 42) == make_block_table(p, true, 42));
  CHECK(make_block_table(p, true, 42) != make_block_table(p, true, 43));
  CHECK(make_block_table(p, true, 42) != in_order);

  // A pool smaller than all sequences' pages together: sequences share pages, but every entry
  // is in range and each sequence's own pages stay distinct.
  PagedProblem shared = PagedProblem::make(2, 2, 8, 1, {48, 48, 48}, 16);
  shared.num_pages = 4;
  REQUIRE(validate(shared).is_ok());
  const std::vector<int32_t> table = make_block_table(shared, true, 1);
  CHECK(validate_block_table(shared, table).is_ok());
  for (int b = 0; b < shared.batch; ++b) {
    const std::set<int32_t> own(table.begin() + b * 3, table.begin() + b * 3 + 3);
    CHECK(own.size() == 3);
  }
}

TEST_CASE("random_paged_inputs: rounded to the dtype, the whole pool filled") {
  PagedProblem p = PagedProblem::make(2, 1, 8, 2, {5, 20}, 16, false, DType::bf16);
  p.num_pages += 3;  // pages no sequence uses
  REQUIRE(validate(p).is_ok());
  const PagedInputs in = random_paged_inputs(p, 9, true);
  CHECK(validate_inputs(p, in).is_ok());
  CHECK(in.seed == 9);
  for (const std::vector<float>* t : {&in.q, &in.k_cache, &in.v_cache})
    for (float x : *t) REQUIRE(x == round_to_dtype(x, DType::bf16));
  // The last page of the pool is used by no sequence in order; shuffled, some 3 pages are not.
  std::set<int32_t> used(in.block_table.begin(), in.block_table.end());
  int unused_nonzero = 0;
  for (int page = 0; page < p.num_pages; ++page) {
    if (used.count(page)) continue;
    const auto first = in.k_cache.begin() + int64_t(page) * p.page_size * p.head_dim;
    unused_nonzero += std::any_of(first, first + p.page_size * p.head_dim,
                                  [](float x) { return x != 0.0f; });
  }
  CHECK(unused_nonzero == 3);
  const PagedInputs again = random_paged_inputs(p, 9, true);
  CHECK(again.k_cache == in.k_cache);
  CHECK(again.block_table == in.block_table);
  CHECK(random_paged_inputs(p, 10, true).q != in.q);
}

TEST_CASE("parse_seqlens accepts comma lists and refuses everything else in one line") {
  std::vector<int> lengths;
  REQUIRE(parse_seqlens("1,17,4096", &lengths).is_ok());
  CHECK(lengths == std::vector<int>{1, 17, 4096});
  REQUIRE(parse_seqlens(" 0, 5 ,2147483647", &lengths).is_ok());
  CHECK(lengths == std::vector<int>{0, 5, 2147483647});
  REQUIRE(parse_seqlens("7", &lengths).is_ok());
  CHECK(lengths == std::vector<int>{7});

  lengths = {9};
  expect_error(parse_seqlens("", &lengths), "no sequence lengths given");
  expect_error(parse_seqlens("  ", &lengths), "no sequence lengths given");
  expect_error(parse_seqlens("1,x,3", &lengths), "'x' in '1,x,3' is not a sequence length");
  expect_error(parse_seqlens("1,,3", &lengths), "'' in '1,,3' is not a sequence length");
  expect_error(parse_seqlens("1.5", &lengths), "'1.5' in '1.5' is not a sequence length");
  expect_error(parse_seqlens("4,-3", &lengths), "sequence 1 has a negative length (-3)");
  expect_error(parse_seqlens("99999999999", &lengths), "sequence length 99999999999 is too large");
  expect_error(parse_seqlens("1,2,", &lengths), "ends with a comma");
  CHECK(lengths == std::vector<int>{9});  // untouched on failure
}

TEST_CASE("random_seqlens: in [0, max], reproducible from the seed") {
  const std::vector<int> a = random_seqlens(200, 50, 3);
  CHECK(a.size() == 200);
  CHECK(*std::min_element(a.begin(), a.end()) >= 0);
  CHECK(*std::max_element(a.begin(), a.end()) <= 50);
  CHECK(std::set<int>(a.begin(), a.end()).size() > 30);  // spread over the range
  CHECK(a == random_seqlens(200, 50, 3));
  CHECK(a != random_seqlens(200, 50, 4));
  CHECK(random_seqlens(4, 0, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK_THROWS_AS(random_seqlens(2, -1, 1), std::invalid_argument);
}

TEST_CASE("varlen problem: sizes, describe, validation") {
  const VarlenProblem p = VarlenProblem::make(8, 2, 64, {3, 0, 17}, {3, 4, 40}, true, DType::f16);
  CHECK(p.batch() == 3);
  CHECK(p.total_q() == 20);
  CHECK(p.total_k() == 47);
  CHECK(p.max_seqlen_q() == 17);
  CHECK(p.max_seqlen_k() == 40);
  CHECK(p.visible_keys(2, 0) == 24);  // query 0 of 17 against 40 keys: position 23
  CHECK(p.describe() == "prefill B=3 H=8 KVH=2 D=64 Sq=[3,0,17] Sk=[3,4,40] causal f16");
  double flops = 0.0;
  for (int b = 0; b < 3; ++b) flops += attention_flops(p.sequence(b));
  CHECK(varlen_flops(p) == flops);
  CHECK(varlen_flops(p) > 0.0);
  CHECK(varlen_bytes(p) == 2.0 * 64 * (2.0 * 20 * 8 + 2.0 * 47 * 2));
  const Problem s2 = p.sequence(2);
  CHECK(s2.seq_q == 17);
  CHECK(s2.seq_k == 40);
  CHECK(s2.kv_heads == 2);
  CHECK(s2.causal);
  CHECK(s2.dtype == DType::f16);
  CHECK(s2.q.seq == 8 * 64);
  CHECK(s2.k.seq == 2 * 64);
  CHECK(s2.q.head == 64);

  CHECK(validate(p).is_ok());
  expect_error(validate(VarlenProblem::make(8, 2, 64, {3, 4}, {3}, false)),
               "seqlens_q has 2 lengths and seqlens_k 1");
  expect_error(validate(VarlenProblem::make(8, 2, 64, {}, {}, false)), "at least one sequence");
  expect_error(validate(VarlenProblem::make(8, 2, 64, {0, 0}, {3, 4}, false)),
               "every sequence has 0 queries");
  expect_error(validate(VarlenProblem::make(8, 2, 64, {3, -1}, {3, 4}, false)),
               "sequence 1 has a negative query length (-1)");
  expect_error(validate(VarlenProblem::make(8, 2, 64, {3, 1}, {-3, 4}, false)),
               "sequence 0 has a negative key length (-3)");
  expect_error(validate(VarlenProblem::make(8, 3, 64, {3}, {3}, false)), "kv_heads must divide");
  expect_error(validate(VarlenProblem::make(8, 2, 512, {3}, {3}, false)), "head_dim 512");
  expect_error(validate(VarlenProblem::make(64, 8, 256, {1 << 20, 1 << 20}, {1, 1}, false)),
               "Q has 3.44e+10 elements (total_q x heads x head_dim)");
  expect_error(validate(VarlenProblem::make(8, 8, 256, {1}, {1 << 21}, false)), "K has 4.29e+09");

  VarlenInputs in = random_varlen_inputs(p, 1);
  CHECK(validate_inputs(p, in).is_ok());
  for (float x : in.q) REQUIRE(x == round_to_dtype(x, DType::f16));
  in.k.pop_back();
  expect_error(validate_inputs(p, in), "K holds 6015 values, expected total_k x kv_heads x head_dim");
  CHECK_THROWS_AS(varlen_reference(p, in), std::invalid_argument);
}

TEST_CASE("output_shape names (b, h, i) of O [batch, seq_q, heads, d]") {
  const PagedProblem p = PagedProblem::make(6, 2, 16, 3, {4, 9}, 16, false, DType::f16);
  const Problem o = output_shape(p);
  CHECK(o.o_elements() == p.q_elements());
  CHECK(o.dtype == DType::f16);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int h = 0; h < 6; ++h)
        CHECK(Problem::offset(o.o, b, h, i) == ((b * 3 + i) * 6 + h) * 16);
  const VarlenProblem v = VarlenProblem::make(4, 4, 8, {2, 5}, {2, 5});
  const Problem ov = output_shape(v);
  CHECK(ov.o_elements() == 7 * 4 * 8);
  CHECK(Problem::offset(ov.o, 0, 3, 6) == (6 * 4 + 3) * 8);
}

TEST_CASE("inference modules: 16-bit types, dense problems refused, entry points checked") {
  CHECK(kFakeInference.accepts(DType::bf16));
  CHECK(kFakeInference.accepts(DType::f16));
  CHECK_FALSE(kFakeInference.accepts(DType::f32));
  CHECK(kFakeInference.native_dtype() == DType::bf16);

  Problem dense = Problem::make(1, 8, 64, 64, 64);
  dense.dtype = DType::bf16;
  const Status s = check_problem(kFakeInference, dense);
  expect_error(s, "--seqlens-k");
  CHECK(s.message().find("--varlen") != std::string::npos);

  const PagedProblem p = PagedProblem::make(8, 8, 64, 1, {3, 70}, 16);
  CHECK(check_problem(kFakeInference, p).is_ok());
  PagedProblem f32 = p;
  f32.dtype = DType::f32;
  expect_error(check_problem(kFakeInference, f32), "takes f16 or bf16 tensors");
  PagedProblem d80 = PagedProblem::make(8, 8, 80, 1, {3, 70}, 16);
  expect_error(check_problem(kFakeInference, d80), "fake decoding supports head_dim 64 or 128");
  expect_error(check_problem(kFakeInference, PagedProblem::make(8, 8, 64, 1, {3}, 12)),
               "page size 12");
  // No prefill entry point: a varlen problem is refused by name.
  expect_error(check_problem(kFakeInference, VarlenProblem::make(8, 8, 64, {3}, {3})),
               "has no variable-length prefill entry point");

  // A dense module is not an inference module.
  expect_error(check_problem(kFakeDense, p), "module 95 runs dense attention; paged decoding runs on");
  expect_error(check_problem(kFakeDense, VarlenProblem::make(8, 8, 64, {3}, {3})),
               "module 95 runs dense attention; variable-length prefill runs on");
  const InferenceCheck dense_run = check_decode(kFakeDense, p, random_paged_inputs(p, 1, false));
  CHECK_FALSE(dense_run.passed());
  expect_error(dense_run.status, "runs dense attention");
  // check_decode refuses bad inputs before any device work.
  PagedInputs bad = random_paged_inputs(p, 1, false);
  bad.block_table[0] = -1;
  const InferenceCheck r = check_decode(kFakeInference, p, bad);
  expect_error(r.status, "block_table[0][0] = -1 is not a page");
  CHECK(r.output.empty());
}

namespace {

// Module 10's split plan (modules/10_decoding/decoding.h, README section 2), recomputed here
// from its definition: every (sequence, split) visited, a block counted when its split starts
// before the sequence's end; split counts tried from 1 up, stopping after the first that
// makes more than 4 waves of busy blocks when the lengths differ.
m10::SplitPlan plan_by_definition(const PagedProblem& p, int sms) {
  const int64_t slots = 2 * int64_t(sms), heads = int64_t(p.kv_heads) * m10::row_tiles(p);
  const bool uniform = std::set<int>(p.seqlens_k.begin(), p.seqlens_k.end()).size() == 1;
  const int most = std::min(m10::kMaxSplits, std::max(1, (p.max_seqlen_k() + 63) / 64));
  m10::SplitPlan best = m10::plan_with_splits(p, 1);
  double best_cost = -1;
  for (int s = 1; s <= most; ++s) {
    const m10::SplitPlan plan = m10::plan_with_splits(p, s);
    if (plan.splits != s) continue;
    int64_t busy = 0, empty = 0;
    for (int len : p.seqlens_k)
      for (int k = 0; k < s; ++k) (int64_t(k) * plan.keys_per_split < len ? busy : empty) += heads;
    const int64_t waves = std::max<int64_t>(1, (busy + slots - 1) / slots);
    const double cost = double(waves) * (plan.keys_per_split + m10::kBlockFixedKeys) +
                        double(empty) * m10::kEmptyBlockKeys / double(slots);
    if (best_cost < 0 || cost < best_cost) best = plan, best_cost = cost;
    if (!uniform && busy > 4 * slots) break;
  }
  return best;
}

}  // namespace

TEST_CASE("module 10's split plan counts the blocks that get keys, as its definition says") {
  for (int sms : {132, 16})
    for (int batch : {1, 4, 32, 128})
      for (int max_len : {0, 17, 1000, 4096, 32768, 131072})
        for (bool mixed : {false, true}) {
          std::vector<int> lens = mixed ? random_seqlens(batch, max_len, 7)
                                        : std::vector<int>(size_t(batch), max_len);
          const PagedProblem p = PagedProblem::make(32, 8, 128, 1, lens, 16);
          const m10::SplitPlan got = m10::choose_splits(p, sms);
          const m10::SplitPlan want = plan_by_definition(p, sms);
          INFO(p.describe() << " on " << sms << " SMs");
          CHECK(got.splits == want.splits);
          CHECK(got.keys_per_split == want.keys_per_split);
        }
  // A batch of mixed lengths gets more splits than one split per sequence: 32 random lengths
  // up to 32768 on 132 SMs (one split per sequence fills the GPU only if every block is full).
  const PagedProblem mixed =
      PagedProblem::make(32, 8, 128, 1, random_seqlens(32, 32768, 3), 16);
  CHECK(m10::choose_splits(mixed, 132).splits > 1);
  const PagedProblem equal =
      PagedProblem::make(32, 8, 128, 1, std::vector<int>(32, mixed.max_seqlen_k()), 16);
  CHECK(m10::choose_splits(equal, 132).splits == 1);
}
