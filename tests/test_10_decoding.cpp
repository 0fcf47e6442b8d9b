// Grader for module 10 (GPU): decoding over a paged KV cache with split-KV and the LSE
// combine, GQA rows packed into one tile, append_kv, and packed variable-length prefill.
// Built twice: grade_10 (exercise), check_10 (solution). Without a GPU it exits 77 (skipped).
//
// The reference is the double-precision attention of common/paged.h on the same 16-bit inputs,
// read through the block table; the tolerance is module 07's (default_tolerance: 2e-3 for
// f16, 1e-2 for bf16, relative L2). The shapes aim at what is new here: lengths 0 and 1 next
// to 65537 in one batch (so most splits of the short sequences are empty and their partials
// carry lse = -inf), pages shuffled through the pool, page sizes from 1 to 256, group sizes
// 1, 4 and 8, several query tokens with the causal mask (rows that see no key at all).
// When a check fails, the grader runs the same problem in variants (pages in order, one
// split, one head per group) to name the step that is wrong.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/half.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(10, testing::impl_under_test()); }

const char* kSplit = "modules/10_decoding/README.md, section 2 (split-KV and the combine)";
const char* kGqa = "modules/10_decoding/README.md, section 3 (GQA packing)";
const char* kPages = "modules/10_decoding/README.md, section 4 (the page table)";
const char* kAppend = "modules/10_decoding/README.md, section 5 (appending to the cache)";
const char* kPrefill = "modules/10_decoding/README.md, section 6 (packed prefill)";

bool all_zero(const std::vector<float>& x, int64_t n) {
  return std::all_of(x.begin(), x.begin() + n, [](float v) { return v == 0.0f; });
}

// Runs p on fresh inputs; on failure, names the likely step by re-running variants.
bool check_decode(const PagedProblem& p, bool shuffle, const char* lesson, float range = 1.0f) {
  if (testing::run_stopped()) return false;
  if (testing::sanitizer_light() && paged_flops(p) > testing::kSanitizerMaxFlops) {
    MESSAGE("skipped under the sanitizer (large): " << p.describe());
    return true;
  }
  const uint64_t seed = testing::next_seed();
  INFO(p.describe() << (shuffle ? ", pages shuffled" : ", pages in order") << ", seed " << seed);
  const PagedInputs in = random_paged_inputs(p, seed, shuffle, range);
  const InferenceCheck r = attn::check_decode(kernel(), p, in);
  if (r.passed()) return true;
  if (!r.status) {
    FAIL_CHECK("decode() failed: " << r.status.message());
    return false;
  }
  std::string hints;
  const Comparison& c = r.comparison;
  if (r.guard_writes > 0)
    hints += "\n  - " + std::to_string(r.guard_writes) +
             " values were written past the end of O: an output row index out of range "
             "(query_row must give token < seq_q and head_in_group < group)";
  if (c.unwritten > 0)
    hints += "\n  - " + std::to_string(c.unwritten) +
             " outputs were never written: query_row maps two rows to the same (token, head), "
             "so some (token, head) gets no row (" + kGqa + ")";
  if (c.nan_count > c.unwritten)
    hints += "\n  - NaN in the output: a split that saw no key left lse = -inf; "
             "combine_weights must give it weight 0, and all weights 0 when every split is "
             "empty, instead of computing 2^(-inf - -inf) (" + std::string(kSplit) + ")";
  if (all_zero(r.output, c.elements) && p.total_keys() > 0)
    hints += "\n  - every output is 0: split_keys gives every split an empty range, or "
             "combine_weights leaves every weight 0 (" + std::string(kSplit) + ")";
  if (shuffle && c.nan_count == 0) {
    PagedInputs ordered = in;
    ordered.block_table = make_block_table(p, false, seed);
    // The same cache contents, laid out in page order: what the shuffled table pointed at.
    ordered.k_cache = in.k_cache, ordered.v_cache = in.v_cache;
    const int64_t page_elems = int64_t(p.page_size) * p.kv_heads * p.head_dim;
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.pages_of(b); ++j) {
        const int64_t from = in.block_table[size_t(b) * p.pages_per_seq + j] * page_elems;
        const int64_t to = ordered.block_table[size_t(b) * p.pages_per_seq + j] * page_elems;
        std::copy_n(in.k_cache.begin() + from, page_elems, ordered.k_cache.begin() + to);
        std::copy_n(in.v_cache.begin() + from, page_elems, ordered.v_cache.begin() + to);
      }
    if (attn::check_decode(kernel(), p, ordered).passed())
      hints += "\n  - right with the pages in order, wrong with them shuffled: key_offset must "
               "find a key's page through the block table (pages[key / page_size]), not assume "
               "the sequence's pages follow each other (" + std::string(kPages) + ")";
  }
  if (p.group() > 1 && c.unwritten == 0 && c.nan_count == 0) {
    PagedProblem one = p;
    one.heads = p.kv_heads;  // one query head per K/V head: query_row's order cannot matter
    const PagedInputs in1 = random_paged_inputs(one, seed, shuffle, range);
    if (attn::check_decode(kernel(), one, in1).passed())
      hints += "\n  - right with one query head per K/V head, wrong with " +
               std::to_string(p.group()) + ": query_row's rows do not match the heads the "
               "output is written to (row = token * group + head_in_group, or the other way, "
               "but the same both ways) (" + kGqa + ")";
  }
  FAIL_CHECK(c.summary() << "\n  first bad element (b, h = head, i = token, d) = " << c.first_bad.str()
                         << "; read " << std::string(lesson) << hints);
  return false;
}

PagedProblem make(int heads, int kv_heads, int d, int seq_q, std::vector<int> lens, int page,
                  bool causal = false, DType t = DType::bf16) {
  return PagedProblem::make(heads, kv_heads, d, seq_q, std::move(lens), page, causal, t);
}

bool check_prefill(const VarlenProblem& p, const char* lesson = kPrefill) {
  if (testing::run_stopped()) return false;
  const uint64_t seed = testing::next_seed();
  INFO(p.describe() << ", seed " << seed);
  const VarlenInputs in = random_varlen_inputs(p, seed);
  const InferenceCheck r = attn::check_prefill(kernel(), p, in);
  if (r.passed()) return true;
  if (!r.status) {
    FAIL_CHECK("prefill() failed: " << r.status.message());
    return false;
  }
  std::string hints;
  if (r.comparison.unwritten > 0)
    hints += "\n  - outputs never written: sequence() gives some sequence too few query rows "
             "(q_len = cu_seqlens_q[b + 1] - cu_seqlens_q[b])";
  if (r.guard_writes > 0) hints += "\n  - writes past the end of O: a q_start or q_len too large";
  hints += "\n  - sequence b's rows start at cu_seqlens_q[b] (queries) and cu_seqlens_k[b] "
           "(keys); each sequence sees only its own keys";
  FAIL_CHECK(r.comparison.summary() << "; read " << std::string(lesson) << hints);
  return false;
}

}  // namespace

TEST_CASE("one sequence, one query head per K/V head, pages in order") {
  check_decode(make(8, 8, 128, 1, {1000}, 16), false, kSplit);
}

TEST_CASE("lengths 0, 1, 2, 15, 16, 17, 1000, 65537 in one batch, pages shuffled") {
  // Splits are planned for the longest sequence: the short ones leave most splits empty
  // (lse = -inf), the empty one leaves all of them empty (output 0, never NaN).
  for (DType t : {DType::bf16, DType::f16})
    check_decode(make(8, 2, 128, 1, {0, 1, 2, 15, 16, 17, 1000, 65537}, 16, false, t), true,
                 kSplit);
}

TEST_CASE("GQA group sizes 1, 4 and 8 at head dims 64 and 128, f16 and bf16") {
  for (int group : {1, 4, 8})
    for (int d : {64, 128})
      for (DType t : {DType::bf16, DType::f16})
        check_decode(make(8 * group, 8, d, 1, {300, 4097, 17}, 16, false, t), true, kGqa);
}

TEST_CASE("page sizes 1, 2, 16, 64, 256, pages shuffled") {
  for (int page : {1, 2, 16, 64, 256})
    check_decode(make(16, 4, 128, 1, {1, 63, 64, 65, 777, 2500}, page), true, kPages);
}

TEST_CASE("one long sequence: many splits, each a different slice of the pages") {
  check_decode(make(32, 8, 128, 1, {40000}, 64), true, kSplit);
  check_decode(make(4, 1, 64, 1, {12345}, 16), true, kSplit);
}

TEST_CASE("a batch of many short sequences: one split each") {
  std::vector<int> lens;
  for (int b = 0; b < 100; ++b) lens.push_back(1 + (b * 37) % 300);
  check_decode(make(8, 8, 64, 1, lens, 16), true, kSplit);
}

TEST_CASE("several query tokens per sequence (speculative decoding), causal and not") {
  // 4 tokens x group 8 = 32 rows: two row tiles per K/V head; causal rows see 1 key more
  // each; a sequence shorter than seq_q has rows that see no key (output 0).
  for (bool causal : {false, true}) {
    check_decode(make(32, 4, 128, 4, {4, 100, 3000, 2}, 16, causal), true, kGqa);
    check_decode(make(12, 4, 64, 3, {1, 5, 1025}, 32, causal), true, kGqa);
    check_decode(make(8, 8, 128, 7, {7, 6, 0, 70000}, 16, causal), true, kSplit);
  }
}

TEST_CASE("head dims that are not powers of two: 80, 96, 104") {
  for (int d : {80, 96, 104}) check_decode(make(8, 2, d, 1, {1, 999, 5000}, 16), true, kPages);
}

TEST_CASE("large logits: scores in the hundreds") {
  check_decode(make(8, 2, 128, 2, {3, 2000, 9000}, 16, true), true, kSplit, 6.0f);
}

TEST_CASE("supports f16/bf16, head_dim a multiple of 8 up to 128; refuses the rest in one line") {
  const InferenceEntry* e = kernel().inference;
  REQUIRE(e != nullptr);
  auto refused = [&](PagedProblem p, const char* what) {
    const Status s = e->supports_paged(p);
    CHECK_MESSAGE(!s.is_ok(), "supports() accepted " << p.describe());
    if (!s.is_ok()) {
      CHECK(s.message().find('\n') == std::string::npos);
      CHECK_MESSAGE(s.message().find(what) != std::string::npos, s.message());
    }
  };
  PagedProblem f32 = make(8, 2, 128, 1, {10}, 16);
  f32.dtype = DType::f32;
  refused(f32, "f16 or bf16");
  refused(make(8, 2, 59, 1, {10}, 16), "multiple of 8");
  refused(make(8, 2, 256, 1, {10}, 16), "at most 128");
  refused(make(8, 2, 128, 65, {100}, 16), "query tokens");
  CHECK(e->supports_paged(make(8, 2, 128, 1, {0, 10}, 16)).is_ok());
}

TEST_CASE("append_kv writes the new tokens' K and V to their pages, and nothing else") {
  if (testing::run_stopped()) return;
  const PagedProblem p = make(8, 4, 128, 3, {3, 17, 64, 1000}, 16, true);
  const uint64_t seed = testing::next_seed();
  INFO(p.describe() << ", seed " << seed);
  const PagedInputs in = random_paged_inputs(p, seed, true);
  const PagedInputs fresh = random_paged_inputs(p, seed + 1, true);
  const int64_t new_elems = int64_t(p.batch) * p.seq_q * p.kv_heads * p.head_dim;
  const std::vector<float> k_new(fresh.k_cache.begin(), fresh.k_cache.begin() + new_elems);
  const std::vector<float> v_new(fresh.v_cache.begin(), fresh.v_cache.begin() + new_elems);
  DeviceBuffer<uint16_t> kc(to_bits16(in.k_cache, p.dtype)), vc(to_bits16(in.v_cache, p.dtype));
  DeviceBuffer<uint16_t> kn(to_bits16(k_new, p.dtype)), vn(to_bits16(v_new, p.dtype));
  DeviceBuffer<int32_t> table(in.block_table), lens(std::vector<int32_t>(p.seqlens_k.begin(),
                                                                         p.seqlens_k.end()));
  const Status s = kernel().inference->append_kv(p, kn.get(), vn.get(), kc.get(), vc.get(),
                                                 table.get(), lens.get(), nullptr);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  // The expected caches: the old ones with the new rows written where the table says.
  std::vector<float> want_k = in.k_cache, want_v = in.v_cache;
  const int d = p.head_dim;
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.seq_q; ++t)
      for (int h = 0; h < p.kv_heads; ++h) {
        const int key = p.seqlens_k[b] - p.seq_q + t;
        const int64_t page = in.block_table[size_t(b) * p.pages_per_seq + key / p.page_size];
        const int64_t at = ((page * p.page_size + key % p.page_size) * p.kv_heads + h) * d;
        const int64_t from = ((int64_t(b) * p.seq_q + t) * p.kv_heads + h) * d;
        std::copy_n(k_new.begin() + from, d, want_k.begin() + at);
        std::copy_n(v_new.begin() + from, d, want_v.begin() + at);
      }
  const std::vector<float> got_k = from_bits16(kc.to_host(), p.dtype);
  const std::vector<float> got_v = from_bits16(vc.to_host(), p.dtype);
  int64_t wrong = 0;
  for (size_t i = 0; i < got_k.size(); ++i) wrong += got_k[i] != want_k[i] || got_v[i] != want_v[i];
  CHECK_MESSAGE(wrong == 0, wrong << " cache elements differ from the old cache with the new "
                                     "rows at positions seqlens_k[b] - seq_q + t: key_offset "
                                     "(append_kv writes through it) addresses the wrong row; read "
                                  << std::string(kAppend));
}

TEST_CASE("a decoding loop: append a token, attend, for 20 steps, against the reference") {
  // Each step: every sequence grows by one token, appended through the block table, then
  // decoded. The pages were assigned up front (shuffled), as a serving engine reserves them.
  if (testing::run_stopped()) return;
  const std::vector<int> start = {0, 5, 30, 200};
  const int steps = 20;
  std::vector<int> final_lens;
  for (int s : start) final_lens.push_back(s + steps);
  const PagedProblem full = make(16, 4, 64, 1, final_lens, 16);
  const uint64_t seed = testing::next_seed();
  INFO(full.describe() << ", seed " << seed);
  PagedInputs in = random_paged_inputs(full, seed, true);
  DeviceBuffer<uint16_t> kc(to_bits16(in.k_cache, full.dtype)),
      vc(to_bits16(in.v_cache, full.dtype));
  DeviceBuffer<int32_t> table(in.block_table);
  for (int step = 0; step < steps && !testing::run_stopped(); ++step) {
    PagedProblem p = full;
    for (int b = 0; b < p.batch; ++b) p.seqlens_k[b] = start[b] + step + 1;
    const PagedInputs fresh = random_paged_inputs(p, seed + 1000 + step, false);
    const int64_t n = int64_t(p.batch) * p.kv_heads * p.head_dim;
    std::vector<float> k_new(fresh.k_cache.begin(), fresh.k_cache.begin() + n);
    std::vector<float> v_new(fresh.v_cache.begin(), fresh.v_cache.begin() + n);
    DeviceBuffer<uint16_t> kn(to_bits16(k_new, p.dtype)), vn(to_bits16(v_new, p.dtype));
    DeviceBuffer<int32_t> lens(std::vector<int32_t>(p.seqlens_k.begin(), p.seqlens_k.end()));
    const Status s = kernel().inference->append_kv(p, kn.get(), vn.get(), kc.get(), vc.get(),
                                                   table.get(), lens.get(), nullptr);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
    // The host copy of the cache follows the same appends.
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.kv_heads; ++h) {
        const int key = p.seqlens_k[b] - 1;
        const int64_t page = in.block_table[size_t(b) * p.pages_per_seq + key / p.page_size];
        const int64_t at = ((page * p.page_size + key % p.page_size) * p.kv_heads + h) *
                           p.head_dim;
        const int64_t from = (int64_t(b) * p.kv_heads + h) * p.head_dim;
        std::copy_n(k_new.begin() + from, p.head_dim, in.k_cache.begin() + at);
        std::copy_n(v_new.begin() + from, p.head_dim, in.v_cache.begin() + at);
      }
    in.k_cache = from_bits16(kc.to_host(), p.dtype);  // what the GPU holds now
    in.v_cache = from_bits16(vc.to_host(), p.dtype);
    in.q = fresh.q;
    const InferenceCheck r = attn::check_decode(kernel(), p, in);
    CHECK_MESSAGE(r.passed(), "step " << step << ": " << (r.status ? r.comparison.summary()
                                                                   : r.status.message())
                                      << "; read " << std::string(kAppend));
    if (!r.passed()) break;
  }
}

TEST_CASE("packed prefill: lengths 1, 17, 1000, 65, 0, 4097 in one batch, causal and not") {
  for (bool causal : {false, true})
    for (DType t : {DType::bf16, DType::f16}) {
      std::vector<int> lens = {1, 17, 1000, 65, 0, 4097};
      check_prefill(VarlenProblem::make(8, 2, 128, lens, lens, causal, t));
    }
}

TEST_CASE("packed prefill: seq_q != seq_k per sequence, head dims 64 and 80, GQA") {
  for (bool causal : {false, true}) {
    check_prefill(VarlenProblem::make(8, 8, 64, {5, 300, 1}, {20, 100, 1}, causal));
    check_prefill(VarlenProblem::make(12, 3, 80, {129, 64, 2}, {129, 700, 0}, causal));
  }
}
