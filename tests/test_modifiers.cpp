// Tests of module 12's harness (CPU only): the mask rules, the score modifiers, RoPE and the
// double reference of common/modifiers.h, each against something computed another way (the
// plain reference on a smaller problem, a formula evaluated here, a hand-derived value), and
// every validation message.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/modifiers.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/runner.h"
#include "tests/host_checks.h"

using namespace attn;
using testing::expect_error;
using testing::max_abs_difference;

namespace {

std::vector<double> modified(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi,
                             const Inputs& in) {
  return reference_attention(p, m, mi, in.q, in.k, in.v);
}

std::vector<double> plain(const Problem& p, const Inputs& in) {
  return reference_attention(p, in.q, in.k, in.v);
}

// Scores of order 10 (range 2, head_dim 16): the softmax is far from uniform, so a wrong
// score changes the output clearly.
Inputs strong_inputs(const Problem& p, uint64_t seed) { return random_inputs(p, seed, 2.0f); }

// Segment ids for every batch entry: `ids_q` for the queries, `ids_k` for the keys.
ModifierInputs segments(const Problem& p, const std::vector<int32_t>& ids_q,
                        const std::vector<int32_t>& ids_k) {
  REQUIRE(int(ids_q.size()) == p.seq_q);
  REQUIRE(int(ids_k.size()) == p.seq_k);
  ModifierInputs mi;
  for (int b = 0; b < p.batch; ++b) {
    mi.seg_q.insert(mi.seg_q.end(), ids_q.begin(), ids_q.end());
    mi.seg_k.insert(mi.seg_k.end(), ids_k.begin(), ids_k.end());
  }
  return mi;
}

ModifierSpec documents_spec() {
  ModifierSpec m;
  m.documents = true;
  return m;
}

// Rows [first, first + count) of head (b, h) of a BHSD tensor with `heads` heads and `seq`
// rows per head, as a tensor of its own (batch 1, one head).
std::vector<float> rows_of(const std::vector<float>& t, int heads, int seq, int d, int b, int h,
                           int first, int count) {
  const auto begin = t.begin() + ((int64_t(b) * heads + h) * seq + first) * d;
  return std::vector<float>(begin, begin + int64_t(count) * d);
}

}  // namespace

// ---- The reference with nothing on, and the masks ---------------------------------------------

TEST_CASE("no modifier: the modifier reference is the plain reference") {
  struct Case { Problem p; const char* what; };
  const Case cases[] = {
      {Problem::make(2, 3, 17, 17, 16), "square"},
      {Problem::make(1, 4, 5, 23, 8, true), "causal, seq_q < seq_k"},
      {Problem::make(2, 2, 19, 7, 8, true), "causal, seq_q > seq_k: masked rows"},
      {Problem::make(2, 6, 9, 14, 16, false, Layout::BSHD, 2), "BSHD, grouped K/V heads"},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": " << c.p.describe());
    const Inputs in = strong_inputs(c.p, 11);
    CHECK(max_abs_difference(modified(c.p, ModifierSpec{}, {}, in), plain(c.p, in)) < 1e-12);
  }
}

TEST_CASE("window >= seq_k is plain causal; window 1 sees only the key at the query's position") {
  for (const auto& [seq_q, seq_k] : {std::pair{13, 13}, std::pair{6, 20}, std::pair{20, 6}}) {
    const Problem p = Problem::make(2, 2, seq_q, seq_k, 8, true);
    INFO(p.describe());
    const Inputs in = strong_inputs(p, 5);
    ModifierSpec m;
    for (const int window : {seq_k, seq_k + 5}) {
      m.window = window;
      CHECK(max_abs_difference(modified(p, m, {}, in), plain(p, in)) < 1e-12);
    }
    // A window of one key: softmax over one score is 1, so O row i is V row i' (0 if i' < 0).
    m.window = 1;
    const std::vector<double> o = modified(p, m, {}, in);
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < seq_q; ++i) {
          const int pos = i + seq_k - seq_q;
          for (int c = 0; c < p.head_dim; ++c) {
            const double got = o[size_t(Problem::offset(p.o, b, h, i) + c)];
            const double want = pos < 0 ? 0.0 : in.v[size_t(Problem::offset(p.v, b, h, pos) + c)];
            REQUIRE(got == doctest::Approx(want).epsilon(1e-12));
          }
        }
  }
}

TEST_CASE("a sliding window is the plain causal reference over the window's keys alone") {
  // Query i' of a window W sees keys [i' - W + 1, i']: the same as a causal problem whose keys
  // are exactly those (one query, W keys, the query last).
  const int seq = 24, window = 5, d = 8;
  const Problem p = Problem::make(1, 1, seq, seq, d, true);
  const Inputs in = strong_inputs(p, 8);
  ModifierSpec m;
  m.window = window;
  const std::vector<double> o = modified(p, m, {}, in);
  for (int i = 0; i < seq; ++i) {
    const int first = std::max(0, i - window + 1), count = i - first + 1;
    const Problem one = Problem::make(1, 1, 1, count, d, true);
    const std::vector<double> want =
        reference_attention(one, rows_of(in.q, 1, seq, d, 0, 0, i, 1),
                            rows_of(in.k, 1, seq, d, 0, 0, first, count),
                            rows_of(in.v, 1, seq, d, 0, 0, first, count));
    for (int c = 0; c < d; ++c) REQUIRE(o[size_t(i) * d + c] == doctest::Approx(want[c]).epsilon(1e-12));
  }
}

TEST_CASE("prefix 0 is plain causal; a prefix of seq_k keys is no mask at all") {
  const Problem causal = Problem::make(2, 3, 11, 15, 8, true);
  Problem open = causal;
  open.causal = false;
  const Inputs in = strong_inputs(causal, 3);
  ModifierSpec m;
  m.prefix = 0;
  CHECK(max_abs_difference(modified(causal, m, {}, in), plain(causal, in)) < 1e-12);
  for (const int prefix : {15, 40}) {
    m.prefix = prefix;
    CHECK(max_abs_difference(modified(causal, m, {}, in), plain(open, in)) < 1e-12);
  }
  // In between: a prefix larger than the query's position opens the first keys to it.
  m.prefix = 9;
  const ModifierInputs none;
  CHECK(visible(causal, m, none, 0, 0, 8));        // position 4 sees prefix key 8
  CHECK_FALSE(visible(causal, m, none, 0, 0, 9));  // but not key 9, past both
  CHECK(visible(causal, m, none, 0, 10, 14));      // position 14: causal alone reaches 14
}

TEST_CASE("one document is no documents; two documents are two separate problems") {
  const Problem p = Problem::make(2, 2, 10, 10, 8);
  const Inputs in = strong_inputs(p, 21);
  const std::vector<int32_t> one(10, 7);
  CHECK(max_abs_difference(modified(p, documents_spec(), segments(p, one, one), in), plain(p, in)) <
        1e-12);

  // Ids 3,3,3,3,5,5,5,5,5,5: rows 0-3 attend within the first four tokens, rows 4-9 within the
  // last six, as two problems of their own would.
  const std::vector<int32_t> two = {3, 3, 3, 3, 5, 5, 5, 5, 5, 5};
  const std::vector<double> o = modified(p, documents_spec(), segments(p, two, two), in);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (const auto& [first, count] : {std::pair{0, 4}, std::pair{4, 6}}) {
        const Problem part = Problem::make(1, 1, count, count, 8);
        const std::vector<double> want = reference_attention(
            part, rows_of(in.q, 2, 10, 8, b, h, first, count),
            rows_of(in.k, 2, 10, 8, b, h, first, count), rows_of(in.v, 2, 10, 8, b, h, first, count));
        for (int i = 0; i < count; ++i)
          for (int c = 0; c < 8; ++c)
            REQUIRE(o[size_t(Problem::offset(p.o, b, h, first + i) + c)] ==
                    doctest::Approx(want[size_t(i) * 8 + c]).epsilon(1e-12));
      }
}

TEST_CASE("rows that see no key are exactly 0, never NaN") {
  SUBCASE("causal window, seq_q > seq_k: the first queries sit before the first key") {
    const Problem p = Problem::make(1, 2, 12, 5, 8, true);
    ModifierSpec m;
    m.window = 3;
    const std::vector<double> o = modified(p, m, {}, strong_inputs(p, 4));
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 12; ++i)
        for (int c = 0; c < 8; ++c) {
          const double x = o[size_t(Problem::offset(p.o, 0, h, i) + c)];
          REQUIRE(std::isfinite(x));
          if (i < 7) REQUIRE(x == 0.0);  // positions -7 .. -1
        }
  }
  SUBCASE("a query whose document has no key") {
    const Problem p = Problem::make(1, 1, 4, 6, 8);
    const ModifierInputs mi = segments(p, {0, 1, 1, 2}, {0, 0, 2, 2, 2, 2});
    const std::vector<double> o = modified(p, documents_spec(), mi, strong_inputs(p, 9));
    for (int c = 0; c < 8; ++c) {
      CHECK(o[size_t(1) * 8 + c] == 0.0);  // queries 1 and 2: document 1 has no key
      CHECK(o[size_t(2) * 8 + c] == 0.0);
      CHECK(o[size_t(0) * 8 + c] != 0.0);
    }
  }
}

TEST_CASE("visible_key_range is the set visible() defines; visible_pairs counts it") {
  const Problem shapes[] = {Problem::make(2, 1, 17, 17, 8, true), Problem::make(2, 1, 9, 30, 8, true),
                            Problem::make(2, 1, 30, 9, 8, true), Problem::make(2, 1, 13, 21, 8)};
  for (const Problem& p : shapes)
    for (int variant = 0; variant < 6; ++variant) {
      ModifierSpec m;
      if (p.causal && variant % 3 == 1) m.window = 4;
      if (p.causal && variant % 3 == 2) m.prefix = 6;
      m.documents = variant >= 3;
      const ModifierInputs mi = random_modifier_inputs(p, m, 40 + variant, 4);
      INFO(p.describe() << " " << m.describe());
      int64_t brute = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int i = 0; i < p.seq_q; ++i) {
          const KeyRange r = visible_key_range(p, m, mi, b, i);
          for (int j = 0; j < p.seq_k; ++j) {
            const bool in_range = j >= r.begin && j < r.end;
            REQUIRE(visible(p, m, mi, b, i, j) == in_range);
            brute += in_range;
          }
        }
      CHECK(visible_pairs(p, m, mi) == brute);
      CHECK(modifier_flops(p, m, mi) == doctest::Approx(4.0 * p.heads * p.head_dim * brute));
      if (!m.any()) CHECK(brute == p.visible_pairs() * p.batch);  // per head and batch entry there
    }
}

// ---- Score modifiers ------------------------------------------------------------------------

TEST_CASE("ALiBi slopes: 2^(-8(h+1)/heads), 1/2 .. 1/256 for 8 heads") {
  const double eight[] = {1 / 2.0, 1 / 4.0, 1 / 8.0, 1 / 16.0, 1 / 32.0, 1 / 64.0, 1 / 128.0, 1 / 256.0};
  for (int h = 0; h < 8; ++h) CHECK(alibi_slope(h, 8) == eight[h]);
  const double four[] = {1 / 4.0, 1 / 16.0, 1 / 64.0, 1 / 256.0};
  for (int h = 0; h < 4; ++h) CHECK(alibi_slope(h, 4) == four[h]);
}

TEST_CASE("ALiBi: with q = 0 the weights are exp(-slope * distance), normalized") {
  // Zero queries make every q.k 0: the scores are the ALiBi penalties alone.
  const int seq_q = 3, seq_k = 7, heads = 2, d = 4;
  const Problem p = Problem::make(1, heads, seq_q, seq_k, d, true);
  Inputs in = strong_inputs(p, 2);
  std::fill(in.q.begin(), in.q.end(), 0.0f);
  ModifierSpec m;
  m.score = ScoreMod::alibi;
  const std::vector<double> o = modified(p, m, {}, in);
  const double slopes[] = {1 / 16.0, 1 / 256.0};  // 2^(-4), 2^(-8) for 2 heads
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < seq_q; ++i) {
      const int pos = i + seq_k - seq_q;
      std::vector<double> want(d, 0.0);
      double sum = 0.0;
      for (int j = 0; j <= pos; ++j) sum += std::exp(-slopes[h] * (pos - j));
      for (int j = 0; j <= pos; ++j)
        for (int c = 0; c < d; ++c)
          want[c] += std::exp(-slopes[h] * (pos - j)) / sum *
                     in.v[size_t(Problem::offset(p.v, 0, h, j) + c)];
      for (int c = 0; c < d; ++c)
        CHECK(o[size_t(Problem::offset(p.o, 0, h, i) + c)] == doctest::Approx(want[c]).epsilon(1e-12));
    }
}

TEST_CASE("softcap: a huge cap changes nothing; a small one is cap * tanh(score / cap)") {
  const Problem p = Problem::make(1, 2, 9, 12, 16);
  const Inputs in = strong_inputs(p, 6);
  ModifierSpec m;
  m.score = ScoreMod::softcap;
  m.softcap = 1e7f;
  CHECK(max_abs_difference(modified(p, m, {}, in), plain(p, in)) < 1e-9);

  // One query, two keys, head_dim 1, scale 1: scores 3 * 2 = 6 and 3 * -1 = -3.
  Problem tiny = Problem::make(1, 1, 1, 2, 1);
  tiny.scale = 1.0f;
  Inputs t;
  t.q = {3.0f};
  t.k = {2.0f, -1.0f};
  t.v = {10.0f, -4.0f};
  m.softcap = 2.0f;
  const double x0 = 2.0 * std::tanh(6.0 / 2.0), x1 = 2.0 * std::tanh(-3.0 / 2.0);
  const double w0 = std::exp(x0) / (std::exp(x0) + std::exp(x1));
  CHECK(modified(tiny, m, {}, t)[0] == doctest::Approx(w0 * 10.0 + (1 - w0) * -4.0).epsilon(1e-12));
}

TEST_CASE("bias: a constant per query row changes nothing (softmax shift invariance)") {
  Problem p = Problem::make(2, 3, 7, 11, 8, true);
  p.dtype = DType::bf16;
  const Inputs in = strong_inputs(p, 12);
  ModifierSpec m;
  m.score = ScoreMod::bias;
  m.bias_per_batch = m.bias_per_head = true;
  ModifierInputs mi;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 11; ++j) mi.bias.push_back(float(b - 2 * h + 3 * i));  // exact in bf16
  CHECK(max_abs_difference(modified(p, m, mi, in), plain(p, in)) < 1e-12);
}

TEST_CASE("bias: a large negative bias on a key removes it, as deleting the key does") {
  const int seq_q = 5, seq_k = 9, d = 8, hidden = 4;
  Problem p = Problem::make(1, 1, seq_q, seq_k, d);
  p.dtype = DType::bf16;
  const Inputs in = strong_inputs(p, 13);
  ModifierSpec m;
  m.score = ScoreMod::bias;
  ModifierInputs mi;
  mi.bias.assign(size_t(seq_q) * seq_k, 0.0f);
  for (int i = 0; i < seq_q; ++i) mi.bias[size_t(i) * seq_k + hidden] = -10000.0f;
  // The same problem with key 4 deleted from K and V.
  Problem fewer = Problem::make(1, 1, seq_q, seq_k - 1, d);
  Inputs cut = in;
  cut.k.erase(cut.k.begin() + hidden * d, cut.k.begin() + (hidden + 1) * d);
  cut.v.erase(cut.v.begin() + hidden * d, cut.v.begin() + (hidden + 1) * d);
  CHECK(max_abs_difference(modified(p, m, mi, in), plain(fewer, cut)) < 1e-12);
}

TEST_CASE("bias broadcast: a [1, 1] bias equals the same values copied to [batch, heads]") {
  Problem p = Problem::make(2, 3, 6, 10, 8);
  p.dtype = DType::f16;
  const Inputs in = strong_inputs(p, 14);
  ModifierSpec shared, full;
  shared.score = full.score = ScoreMod::bias;
  shared.bias_per_batch = shared.bias_per_head = false;
  full.bias_per_batch = full.bias_per_head = true;
  const ModifierInputs one = random_modifier_inputs(p, shared, 3);
  REQUIRE(one.bias.size() == size_t(6 * 10));
  ModifierInputs copies;
  for (int n = 0; n < 2 * 3; ++n) copies.bias.insert(copies.bias.end(), one.bias.begin(), one.bias.end());
  const std::vector<double> o = modified(p, shared, one, in);
  CHECK(max_abs_difference(o, modified(p, full, copies, in)) < 1e-12);
  CHECK(max_abs_difference(o, plain(p, in)) > 1e-3);  // the bias did something
  // Per head, not per batch: head h's values differ, batch entries share them.
  ModifierSpec per_head = shared;
  per_head.bias_per_head = true;
  const ModifierInputs heads = random_modifier_inputs(p, per_head, 4);
  ModifierInputs heads_copied = heads;
  heads_copied.bias.insert(heads_copied.bias.end(), heads.bias.begin(), heads.bias.end());
  CHECK(max_abs_difference(modified(p, per_head, heads, in), modified(p, full, heads_copied, in)) < 1e-12);
}

TEST_CASE("bias [batch, heads]: head (b, h) adds its own plane, as a one-head problem does") {
  const int batch = 2, heads = 3, seq_q = 6, seq_k = 10, d = 8;
  Problem p = Problem::make(batch, heads, seq_q, seq_k, d, true);
  p.dtype = DType::bf16;
  const Inputs in = strong_inputs(p, 22);
  ModifierSpec m;
  m.score = ScoreMod::bias;
  m.bias_per_batch = m.bias_per_head = true;
  const ModifierInputs mi = random_modifier_inputs(p, m, 23);
  const std::vector<double> o = modified(p, m, mi, in);
  const int64_t plane = int64_t(seq_q) * seq_k;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h) {
      Problem one = Problem::make(1, 1, seq_q, seq_k, d, true);
      one.dtype = DType::bf16;
      Inputs alone;
      alone.q = rows_of(in.q, heads, seq_q, d, b, h, 0, seq_q);
      alone.k = rows_of(in.k, heads, seq_k, d, b, h, 0, seq_k);
      alone.v = rows_of(in.v, heads, seq_k, d, b, h, 0, seq_k);
      ModifierInputs its_plane;
      const auto first = mi.bias.begin() + (int64_t(b) * heads + h) * plane;
      its_plane.bias.assign(first, first + plane);
      ModifierSpec one_head = m;
      one_head.bias_per_batch = false;
      const std::vector<double> want = modified(one, one_head, its_plane, alone);
      for (int i = 0; i < seq_q; ++i)
        for (int c = 0; c < d; ++c)
          REQUIRE(o[size_t(Problem::offset(p.o, b, h, i) + c)] ==
                  doctest::Approx(want[size_t(i) * d + c]).epsilon(1e-12));
    }
}

TEST_CASE("T5 buckets: hand-derived values") {
  // Bidirectional, 32 buckets, max distance 128: 16 per direction, 8 exact. A key n positions
  // before the query (rel = -n): bucket n below 8, else 8 + floor(log(n/8) / log(16) * 8):
  //   n = 16: log 2 / log 16 * 8 = 2 -> 10;  n = 20: 0.9163 / 2.7726 * 8 = 2.64 -> 10;
  //   n = 32: 4 -> 12;  n = 64: 6 -> 14;  n = 100: 2.5257 / 2.7726 * 8 = 7.29 -> 15;
  //   n = 128: 8 -> 16, capped at 15. Keys after the query (rel > 0) add 16.
  const int bidirectional[][2] = {{0, 0},     {-1, 1},    {-3, 3},    {-7, 7},    {-8, 8},
                                  {-15, 9},   {-16, 10},  {-20, 10},  {-32, 12},  {-64, 14},
                                  {-100, 15}, {-128, 15}, {-5000, 15}, {1, 17},   {3, 19},
                                  {20, 26},   {127, 31},  {5000, 31}};
  for (const auto& [rel, bucket] : bidirectional) {
    INFO("rel " << rel);
    CHECK(t5_bucket(rel, true, 32, 128) == bucket);
  }
  // Unidirectional (a decoder), 32 buckets, max 128: 16 exact, keys after the query in bucket
  // 0, else 16 + floor(log(n/16) / log(8) * 16): n = 20: 0.2231 / 2.0794 * 16 = 1.72 -> 17;
  // n = 64: 2/3 * 16 = 10.67 -> 26; n = 127: 2.0716 / 2.0794 * 16 = 15.94 -> 31; n = 128: 31.
  const int unidirectional[][2] = {{5, 0},   {0, 0},    {-5, 5},   {-15, 15}, {-16, 16},
                                   {-20, 17}, {-64, 26}, {-127, 31}, {-128, 31}, {-9999, 31}};
  for (const auto& [rel, bucket] : unidirectional) {
    INFO("rel " << rel);
    CHECK(t5_bucket(rel, false, 32, 128) == bucket);
  }
  // 8 buckets both ways, max 20: 4 per direction, 2 exact; n = 5: 2 + floor(log 2.5 / log 10 *
  // 2) = 2 + floor(0.796) = 2; n = 7: 2 + floor(1.09) = 3.
  CHECK(t5_bucket(-5, true, 8, 20) == 2);
  CHECK(t5_bucket(-7, true, 8, 20) == 3);
  CHECK(t5_bucket(7, true, 8, 20) == 7);
  // A boundary where the exact value is whole: 20 buckets both ways, max 160 (10 per
  // direction, 5 exact), n = 20: 5 + floor(log 4 / log 32 * 5) = 5 + floor(2 ln 2 / (5 ln 2)
  // * 5) = 5 + 2 = 7. In double the quotient is 1.9999999999999998; the bucket is still 7.
  CHECK(t5_bucket(-20, true, 20, 160) == 7);
  CHECK(t5_bucket(-19, true, 20, 160) == 6);
}

TEST_CASE("relative: the distance table holds the T5 table entry of each distance") {
  const Problem p = Problem::make(1, 2, 5, 9, 8);
  ModifierSpec m;
  m.score = ScoreMod::relative;
  m.rel_buckets = 8;
  m.rel_max_distance = 20;
  const ModifierInputs mi = random_modifier_inputs(p, m, 5);
  REQUIRE(mi.rel_table.size() == size_t(2 * 8));
  const std::vector<float> by_distance = relative_bias_by_distance(p, m, mi.rel_table);
  REQUIRE(by_distance.size() == size_t(2 * (5 + 9 - 1)));
  // Entry (j - i') + seq_k - 1: index 0 is rel -8 (bucket 3 below), index 8 is rel 0, 12 is
  // rel 4 (4 + bucket 2 of the upper half = 6).
  for (int h = 0; h < 2; ++h) {
    CHECK(by_distance[size_t(h) * 13 + 0] == mi.rel_table[size_t(h) * 8 + 3]);
    CHECK(by_distance[size_t(h) * 13 + 7] == mi.rel_table[size_t(h) * 8 + 1]);
    CHECK(by_distance[size_t(h) * 13 + 8] == mi.rel_table[size_t(h) * 8 + 0]);
    CHECK(by_distance[size_t(h) * 13 + 12] == mi.rel_table[size_t(h) * 8 + 6]);
  }
  CHECK(relative_bias_by_distance(p, ModifierSpec{}, mi.rel_table).empty());
}

TEST_CASE("relative: q = 0 leaves the table entries as the scores") {
  const Problem p = Problem::make(1, 1, 2, 6, 2);
  Inputs in = strong_inputs(p, 15);
  std::fill(in.q.begin(), in.q.end(), 0.0f);
  ModifierSpec m;
  m.score = ScoreMod::relative;
  m.rel_buckets = 4;  // 2 per direction, 1 exact: rel 0 -> 0, before -> 1, after -> 2 or 3
  m.rel_max_distance = 3;
  ModifierInputs mi;
  mi.rel_table = {0.5f, -1.0f, 2.0f, 0.25f};
  const std::vector<double> o = modified(p, m, mi, in);
  // Query 0 sits at position 4: keys 0-3 are before it (n = 4..1: not below the 1 exact
  // bucket, 1 + floor(log n / log 3 * 1) capped at 1: bucket 1), key 4 is it (bucket 0), key 5
  // is one after (the upper half, 2, plus 1 + floor(log 1 / log 3) = 1: bucket 3).
  const double scores[] = {-1.0, -1.0, -1.0, -1.0, 0.5, 0.25};
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s);
  for (int c = 0; c < 2; ++c) {
    double want = 0.0;
    for (int j = 0; j < 6; ++j) want += std::exp(scores[j]) / sum * in.v[size_t(j) * 2 + c];
    CHECK(o[size_t(c)] == doctest::Approx(want).epsilon(1e-12));
  }
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST_CASE("RoPE: a hand-computed rotation, and position 0 turns nothing") {
  // Interleaved, head_dim 4, base 10000: pair 0 turns by pos, pair 1 by pos / 100.
  Problem p = Problem::make(1, 1, 1, 3, 4);  // the query sits at position 2
  std::vector<float> q = {1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> k = {1.0f, 2.0f, 3.0f, 4.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  ModifierSpec m;
  m.rope = RopeStyle::interleaved;
  apply_rope(p, m, q, k);
  CHECK(q[0] == doctest::Approx(std::cos(2.0)));
  CHECK(q[1] == doctest::Approx(std::sin(2.0)));
  CHECK(q[2] == doctest::Approx(-std::sin(0.02)));
  CHECK(q[3] == doctest::Approx(std::cos(0.02)));
  CHECK(std::vector<float>(k.begin(), k.begin() + 4) == std::vector<float>{1, 2, 3, 4});
  CHECK(k[4] == doctest::Approx(std::cos(1.0)));  // key 1: position 1
  CHECK(k[5] == doctest::Approx(std::sin(1.0)));
  // Half: pair 0 is (0, 2), pair 1 is (1, 3).
  m.rope = RopeStyle::half;
  std::vector<float> q2 = {1.0f, 0.0f, 0.0f, 1.0f}, k2(12, 0.0f);
  apply_rope(p, m, q2, k2);
  CHECK(q2[0] == doctest::Approx(std::cos(2.0)));
  CHECK(q2[2] == doctest::Approx(std::sin(2.0)));
  CHECK(q2[1] == doctest::Approx(-std::sin(0.02)));
  CHECK(q2[3] == doctest::Approx(std::cos(0.02)));
}

TEST_CASE("RoPE preserves every row's norm") {
  const Problem p = Problem::make(2, 3, 9, 14, 16, false, Layout::BSHD);
  for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    Inputs in = strong_inputs(p, 16);
    const Inputs before = in;
    ModifierSpec m;
    m.rope = style;
    apply_rope(p, m, in.q, in.k);
    CHECK(max_abs_difference(std::vector<double>(in.q.begin(), in.q.end()),
                             std::vector<double>(before.q.begin(), before.q.end())) > 0.1);
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 3; ++h)
        for (int i = 0; i < 14; ++i) {
          const auto norm = [&](const std::vector<float>& t, const Strides& s) {
            double n = 0.0;
            for (int c = 0; c < 16; ++c) n += double(t[size_t(Problem::offset(s, b, h, i) + c)]) *
                                               t[size_t(Problem::offset(s, b, h, i) + c)];
            return std::sqrt(n);
          };
          if (i < 9) REQUIRE(norm(in.q, p.q) == doctest::Approx(norm(before.q, p.q)).epsilon(1e-6));
          REQUIRE(norm(in.k, p.k) == doctest::Approx(norm(before.k, p.k)).epsilon(1e-6));
        }
  }
}

TEST_CASE("RoPE: q.k depends only on the distance between the positions") {
  // apply_rope: one query (at the last position) and equal key rows; a longer sequence moves
  // the query and every key by the same amount.
  for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    ModifierSpec m;
    m.rope = style;
    const int d = 16, len = 6, shift = 37;
    std::vector<float> q0(d), k0(d);
    fill_uniform(q0, 1);
    fill_uniform(k0, 2);
    const auto dots = [&](int seq_k) {
      const Problem p = Problem::make(1, 1, 1, seq_k, d);
      std::vector<float> q = q0, k;
      for (int j = 0; j < seq_k; ++j) k.insert(k.end(), k0.begin(), k0.end());
      apply_rope(p, m, q, k);
      std::vector<double> out;  // by distance from the query: 0, 1, ..., len - 1
      for (int dist = 0; dist < len; ++dist) {
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot += double(q[c]) * k[size_t(seq_k - 1 - dist) * d + c];
        out.push_back(dot);
      }
      return out;
    };
    const std::vector<double> near = dots(len), far = dots(len + shift);
    for (int dist = 0; dist < len; ++dist) CHECK(far[dist] == doctest::Approx(near[dist]).epsilon(1e-5));
    CHECK(std::fabs(near[1] - near[3]) > 1e-3);  // but it does depend on the distance
  }

  // The fused reference: keys 0 .. shift-1 of a longer problem hidden by documents, the query
  // moved by shift, the visible keys the same as in the short problem: the same output.
  for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    ModifierSpec m;
    m.rope = style;
    const int d = 16, len = 7, shift = 20;
    const Problem short_p = Problem::make(1, 1, 1, len, d);
    const Problem long_p = Problem::make(1, 1, 1, len + shift, d);
    const Inputs in = strong_inputs(short_p, 17);
    Inputs padded = in;
    std::vector<float> filler(size_t(shift) * d);
    fill_uniform(filler, 3);
    padded.k.insert(padded.k.begin(), filler.begin(), filler.end());
    padded.v.insert(padded.v.begin(), filler.begin(), filler.end());
    std::vector<int32_t> key_ids(size_t(len + shift), 1);
    std::fill(key_ids.begin(), key_ids.begin() + shift, 0);
    ModifierSpec with_docs = m;
    with_docs.documents = true;
    const std::vector<double> want = modified(short_p, m, {}, in);
    CHECK(max_abs_difference(modified(long_p, with_docs, segments(long_p, {1}, key_ids), padded),
                             want) < 1e-12);
    CHECK(max_abs_difference(want, plain(short_p, in)) > 1e-3);  // RoPE did something
  }
}

TEST_CASE("RoPE half and interleaved differ by a permutation of the features") {
  // Interleaved feature 2m goes to half's m, 2m + 1 to m + d/2: the same pairs turn by the
  // same angles, and permuting q and k alike leaves every q.k unchanged.
  const int d = 16;
  const Problem p = Problem::make(2, 2, 9, 12, d, true);
  const Inputs in = strong_inputs(p, 18);
  Inputs permuted = in;
  for (size_t row = 0; row < in.q.size() / d; ++row)
    for (int f = 0; f < d / 2; ++f) {
      permuted.q[row * d + f] = in.q[row * d + 2 * f];
      permuted.q[row * d + f + d / 2] = in.q[row * d + 2 * f + 1];
    }
  for (size_t row = 0; row < in.k.size() / d; ++row)
    for (int f = 0; f < d / 2; ++f) {
      permuted.k[row * d + f] = in.k[row * d + 2 * f];
      permuted.k[row * d + f + d / 2] = in.k[row * d + 2 * f + 1];
    }
  ModifierSpec interleaved, half;
  interleaved.rope = RopeStyle::interleaved;
  half.rope = RopeStyle::half;
  const std::vector<double> o = modified(p, interleaved, {}, in);
  CHECK(max_abs_difference(o, modified(p, half, {}, permuted)) < 1e-12);
  CHECK(max_abs_difference(o, modified(p, half, {}, in)) > 1e-3);  // the pairing matters
}

TEST_CASE("RoPE applied beforehand (rounded to bf16) agrees with the fused reference") {
  Problem p = Problem::make(1, 4, 33, 40, 64, true, Layout::BHSD, 2);
  p.dtype = DType::bf16;
  const Inputs in = random_inputs(p, 19);
  ModifierSpec m;
  m.rope = RopeStyle::half;
  m.rope_base = 500000.0;
  Inputs turned = in;
  apply_rope(p, m, turned.q, turned.k);
  for (float x : turned.q) REQUIRE(x == round_to_dtype(x, DType::bf16));
  const std::vector<double> fused = modified(p, m, {}, in), unfused = plain(p, turned);
  CHECK(max_abs_difference(fused, unfused) < 2e-2);     // bf16 rounding of q and k only
  CHECK(max_abs_difference(fused, plain(p, in)) > 2e-2);  // and RoPE itself is much more
}

// ---- Inputs --------------------------------------------------------------------------------

TEST_CASE("random_modifier_inputs: sizes, rounding, documents bottom-right aligned") {
  Problem p = Problem::make(3, 4, 20, 50, 16, true);
  p.dtype = DType::f16;
  ModifierSpec m;
  m.score = ScoreMod::bias;
  m.bias_per_batch = true;
  m.documents = true;
  const ModifierInputs mi = random_modifier_inputs(p, m, 8, 5);
  CHECK(validate_inputs(p, m, mi).is_ok());
  CHECK(mi.bias.size() == size_t(3 * 4 * 20 * 50));
  CHECK(bias_elements(p, m) == 3 * 4 * 20 * 50);
  for (float x : mi.bias) {
    REQUIRE(x == round_to_dtype(x, DType::f16));
    REQUIRE((x >= -2.0f && x <= 2.0f));
  }
  CHECK(mi.rel_table.empty());
  for (int b = 0; b < 3; ++b) {
    const std::set<int32_t> ids(mi.seg_k.begin() + b * 50, mi.seg_k.begin() + (b + 1) * 50);
    CHECK(ids.size() == 5);
    for (int i = 0; i < 20; ++i)
      REQUIRE(mi.seg_q[size_t(b) * 20 + i] == mi.seg_k[size_t(b) * 50 + i + 30]);
  }
  CHECK(random_modifier_inputs(p, m, 8, 5).bias == mi.bias);
  CHECK(random_modifier_inputs(p, m, 9, 5).bias != mi.bias);
  CHECK(random_modifier_inputs(p, m, 9, 5).seg_k != mi.seg_k);
  // The bias is not Q's numbers: the streams differ.
  const Inputs in = random_inputs(p, 8);
  CHECK(std::vector<float>(mi.bias.begin(), mi.bias.begin() + 8) !=
        std::vector<float>(in.q.begin(), in.q.begin() + 8));
  // More documents than keys: one key each.
  const Problem small = Problem::make(1, 1, 4, 4, 8);
  const ModifierInputs many = random_modifier_inputs(small, documents_spec(), 1, 10);
  CHECK(many.seg_k == std::vector<int32_t>{0, 1, 2, 3});
}

TEST_CASE("validate_inputs: sizes, finite values, segment ids that never decrease") {
  Problem p = Problem::make(1, 8, 64, 64, 16);
  p.dtype = DType::bf16;
  ModifierSpec m;
  m.score = ScoreMod::bias;
  ModifierInputs mi;
  mi.bias.resize(10);
  expect_error(validate_inputs(p, m, mi), "the bias holds 10 values, expected 1 x 8 x 64 x 64 = 32768");
  mi.bias.assign(32768, 0.0f);
  CHECK(validate_inputs(p, m, mi).is_ok());
  mi.bias[17] = -INFINITY;
  expect_error(validate_inputs(p, m, mi), "bias element 17 is infinite: a bias must be finite");
  mi.bias[17] = NAN;
  expect_error(validate_inputs(p, m, mi), "bias element 17 is NaN");
  expect_error(validate_inputs(p, ModifierSpec{}, mi),
               "the bias holds 32768 values, expected none (the score modifier is none)");

  const Problem q = Problem::make(2, 1, 3, 5, 8);
  ModifierInputs docs = segments(q, {0, 0, 1}, {0, 0, 1, 1, 1});
  CHECK(validate_inputs(q, documents_spec(), docs).is_ok());
  docs.seg_k[5 + 3] = 0;  // batch entry 1: 0 0 1 0 1
  expect_error(validate_inputs(q, documents_spec(), docs),
               "seg_k[1][3] = 0 is smaller than the id before it (1)");
  docs.seg_k.pop_back();
  expect_error(validate_inputs(q, documents_spec(), docs),
               "the key segment ids hold 9 values, expected 2 x 5 = 10");
  expect_error(validate_inputs(q, documents_spec(), ModifierInputs{}),
               "the query segment ids hold 0 values, expected 2 x 3 = 6");

  ModifierSpec rel;
  rel.score = ScoreMod::relative;
  expect_error(validate_inputs(q, rel, ModifierInputs{}),
               "the relative position table holds 0 values, expected 1 x 32 = 32");
  CHECK_THROWS_AS(reference_attention(q, rel, ModifierInputs{}, {}, {}, {}), std::invalid_argument);
}

// ---- The rules, one message each --------------------------------------------------------------

TEST_CASE("validate: every rule has its message, in the CLI's words") {
  Problem p = Problem::make(1, 8, 64, 64, 64);
  p.dtype = DType::bf16;
  Problem causal = p;
  causal.causal = true;
  const auto spec = [](auto set) {
    ModifierSpec m;
    set(m);
    return m;
  };

  CHECK(validate(p, ModifierSpec{}).is_ok());
  SUBCASE("window and prefix need --causal, and exclude each other") {
    expect_error(validate(p, spec([](ModifierSpec& m) { m.window = 1024; })),
                 "--window needs --causal: the window is the last 1024 keys up to the query's "
                 "position");
    expect_error(validate(p, spec([](ModifierSpec& m) { m.prefix = 16; })),
                 "--prefix needs --causal: every query sees the first 16 keys");
    expect_error(validate(causal, spec([](ModifierSpec& m) { m.window = 8, m.prefix = 4; })),
                 "--window and --prefix are two masks of the same kind: choose one");
    expect_error(validate(causal, spec([](ModifierSpec& m) { m.window = -2; })),
                 "--window must be >= 1 (got -2)");
    expect_error(validate(causal, spec([](ModifierSpec& m) { m.prefix = -1; })),
                 "--prefix must be >= 1 (got -1)");
    CHECK(validate(causal, spec([](ModifierSpec& m) { m.window = 8; })).is_ok());
    CHECK(validate(causal, spec([](ModifierSpec& m) { m.prefix = 8; })).is_ok());
  }
  SUBCASE("documents combine with the window and with no causal mask") {
    CHECK(validate(causal, spec([](ModifierSpec& m) { m.window = 8, m.documents = true; })).is_ok());
    CHECK(validate(p, spec([](ModifierSpec& m) { m.documents = true; })).is_ok());
  }
  SUBCASE("RoPE: even head_dim; half needs head_dim % 16; a base > 1") {
    Problem odd = p;
    odd.head_dim = 59;
    expect_error(validate(odd, spec([](ModifierSpec& m) { m.rope = RopeStyle::interleaved; })),
                 "--rope needs an even head_dim (pairs of features turn together), got 59");
    Problem forty = p;
    forty.head_dim = 40;
    CHECK(validate(forty, spec([](ModifierSpec& m) { m.rope = RopeStyle::interleaved; })).is_ok());
    expect_error(validate(forty, spec([](ModifierSpec& m) { m.rope = RopeStyle::half; })),
                 "--rope half needs head_dim % 16 == 0");
    expect_error(validate(forty, spec([](ModifierSpec& m) { m.rope = RopeStyle::half; })),
                 "got 40");
    expect_error(validate(p, spec([](ModifierSpec& m) {
                   m.rope = RopeStyle::half, m.rope_base = 1.0;
                 })),
                 "--rope-base must be a finite number > 1");
    expect_error(validate(p, spec([](ModifierSpec& m) {
                   m.rope = RopeStyle::half, m.rope_base = INFINITY;
                 })),
                 "--rope-base must be a finite number > 1");
  }
  SUBCASE("softcap: finite and > 0") {
    for (const float cap : {0.0f, -3.0f, NAN, INFINITY}) {
      INFO("cap " << cap);
      expect_error(validate(p, spec([cap](ModifierSpec& m) {
                     m.score = ScoreMod::softcap, m.softcap = cap;
                   })),
                   "--softcap must be a finite number > 0");
    }
    CHECK(validate(p, spec([](ModifierSpec& m) { m.score = ScoreMod::softcap, m.softcap = 30; })).is_ok());
  }
  SUBCASE("bias: a 16-bit problem") {
    Problem f32 = p;
    f32.dtype = DType::f32;
    expect_error(validate(f32, spec([](ModifierSpec& m) { m.score = ScoreMod::bias; })),
                 "--bias needs --dtype f16 or bf16");
    CHECK(validate(p, spec([](ModifierSpec& m) { m.score = ScoreMod::bias; })).is_ok());
    CHECK(validate(f32, spec([](ModifierSpec& m) { m.score = ScoreMod::alibi; })).is_ok());
  }
  SUBCASE("relative: buckets and max distance") {
    const auto rel = [](int buckets, int max_distance, bool bidirectional) {
      ModifierSpec m;
      m.score = ScoreMod::relative;
      m.rel_buckets = buckets;
      m.rel_max_distance = max_distance;
      m.rel_bidirectional = bidirectional;
      return m;
    };
    expect_error(validate(p, rel(7, 128, true)), "--rel-buckets must be even and >= 4");
    expect_error(validate(p, rel(2, 128, true)), "got 2");
    CHECK(validate(p, rel(4, 128, true)).is_ok());
    expect_error(validate(p, rel(1, 128, false)), "--rel-buckets must be >= 2");
    CHECK(validate(p, rel(3, 128, false)).is_ok());
    expect_error(validate(p, rel(32, 8, true)), "--rel-max-distance must be > 8");
    CHECK(validate(p, rel(32, 9, true)).is_ok());
    expect_error(validate(p, rel(32, 16, false)), "--rel-max-distance must be > 16");
  }
  SUBCASE("a bias of more than 2^31 values per head") {
    Problem huge = p;
    huge.seq_q = huge.seq_k = 50000;
    expect_error(validate(huge, spec([](ModifierSpec& m) { m.score = ScoreMod::bias; })),
                 "the bias of one head has seq_q x seq_k = 2500000000 values");
  }
}

TEST_CASE("describe names what is on") {
  ModifierSpec m;
  CHECK(m.describe() == "none");
  CHECK_FALSE(m.any());
  m.score = ScoreMod::alibi;
  m.window = 1024;
  m.rope = RopeStyle::half;
  CHECK(m.describe() == "alibi window=1024 rope=half");
  m = ModifierSpec{};
  m.score = ScoreMod::bias;
  CHECK(m.describe() == "bias[1,H]");
  m.bias_per_batch = true;
  m.bias_per_head = false;
  CHECK(m.describe() == "bias[B,1]");
  m = ModifierSpec{};
  m.score = ScoreMod::softcap;
  m.softcap = 30.0f;
  m.documents = true;
  m.prefix = 64;
  CHECK(m.describe() == "softcap=30 prefix=64 documents");
  m = ModifierSpec{};
  m.score = ScoreMod::relative;
  m.rel_bidirectional = false;
  m.rope = RopeStyle::interleaved;
  m.rope_base = 500000.0;
  CHECK(m.describe() == "relative=32/128/unidirectional rope=interleaved rope_base=500000");
  CHECK(std::string(score_mod_name(ScoreMod::softcap)) == "softcap");
  CHECK(std::string(rope_style_name(RopeStyle::half)) == "half");
}

TEST_CASE("modifier_bytes_fused adds what the modifiers read") {
  Problem p = Problem::make(2, 4, 16, 32, 64);
  p.dtype = DType::bf16;
  ModifierSpec m;
  CHECK(modifier_bytes_fused(p, m) == attention_bytes_fused(p));
  m.score = ScoreMod::bias;
  m.documents = true;
  CHECK(modifier_bytes_fused(p, m) ==
        attention_bytes_fused(p) + 2.0 * 4 * 16 * 32 + 4.0 * 2 * (16 + 32));
  m.score = ScoreMod::relative;
  m.documents = false;
  CHECK(modifier_bytes_fused(p, m) == attention_bytes_fused(p) + 4.0 * 4 * (16 + 32 - 1));
}
