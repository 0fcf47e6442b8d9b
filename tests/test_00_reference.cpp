// Grader for module 00 (CPU): the stable softmax, the online-softmax update, and attention
// in one pass with the online recurrence. Built twice: grade_00 (exercise), check_00 (solution).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/random.h"
#include "modules/00_reference/reference.h"
#include "tests/support.h"

using namespace attn;
using attn::m00::OnlineSoftmax;
namespace impl = attn::m00::ATTN_IMPL;

namespace {

std::vector<double> softmax_double(const std::vector<float>& x) {
  double m = -INFINITY, sum = 0.0;
  for (float v : x) m = std::max(m, double(v));
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); ++j) sum += (y[j] = std::exp(double(x[j]) - m));
  for (double& v : y) v /= sum;
  return y;
}

// Largest |got - want| / max(|want|, 1e-30) with NaN counted as infinitely wrong.
double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t j = 0; j < got.size(); ++j) {
    if (!std::isfinite(got[j])) return INFINITY;
    worst = std::max(worst, std::fabs(got[j] - want[j]) / std::max(std::fabs(want[j]), 1e-30));
  }
  return worst;
}

// The softmax sum by two passes in double: sum_j exp(x_j - max x).
double two_pass_sum(const std::vector<float>& x) {
  double m = -INFINITY, sum = 0.0;
  for (float v : x) m = std::max(m, double(v));
  for (float v : x) sum += std::exp(double(v) - m);
  return sum;
}

// The classic mistake: update the max first, then rescale the sum with the NEW max, so the
// factor is exp(m_new - m_new) = 1 and old terms are never shrunk.
double classic_mistake_sum(const std::vector<float>& x) {
  double m = -INFINITY, sum = 0.0;
  for (float v : x) {
    m = std::max(m, double(v));
    sum = sum * std::exp(m - m) + std::exp(double(v) - m);
  }
  return sum;
}

const std::string kSoftmaxLesson = "modules/00_reference/README.md, section 2 (the stable softmax)";
const std::string kOnlineLesson = "modules/00_reference/README.md, section 3 (the online softmax)";
const std::string kForwardLesson = "modules/00_reference/README.md, section 4 (attention in one pass)";

}  // namespace

TEST_CASE("softmax: matches the double-precision softmax on random rows") {
  for (int n : {1, 2, 17, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    fill_uniform(x, testing::next_seed(), -5.0f, 5.0f);
    const std::vector<double> want = softmax_double(x);
    impl::softmax(x.data(), n);
    INFO("row of " << n << " scores; read " << kSoftmaxLesson);
    CHECK_MESSAGE(max_rel_error(x, want) < 1e-5,
                  "softmax(x) differs from exp(x - max) / sum: is every entry divided by the sum?");
  }
}

TEST_CASE("softmax: large logits stay finite") {
  std::vector<float> x = {1000.0f, 999.0f, 998.0f, -1000.0f};
  const std::vector<double> want = softmax_double(x);
  impl::softmax(x.data(), int(x.size()));
  INFO("read " << kSoftmaxLesson);
  CHECK_MESSAGE(max_rel_error(x, want) < 1e-5,
                "exp(1000) overflows float to inf and inf/inf is NaN: subtract the row max "
                "before exp, so every exponent is <= 0");
}

TEST_CASE("softmax: equal scores give the uniform distribution") {
  std::vector<float> x(8, 3.0f);
  impl::softmax(x.data(), 8);
  CHECK_MESSAGE(max_rel_error(x, std::vector<double>(8, 0.125)) < 1e-6,
                "8 equal scores must give 1/8 each");
}

TEST_CASE("online softmax: the first score") {
  OnlineSoftmax state;
  const float alpha = impl::online_push(state, 2.5f);
  INFO("from the empty state (max = -inf, sum = 0); read " << kOnlineLesson);
  CHECK_MESSAGE(state.max == 2.5f, "after one score the running max is that score");
  CHECK_MESSAGE(state.sum == doctest::Approx(1.0), "after one score the sum is exp(x - x) = 1");
  CHECK_MESSAGE(alpha == 0.0f, "alpha = exp(old max - new max) = exp(-inf) = 0 on the first score");
}

TEST_CASE("online softmax: rising scores (the max changes at every step)") {
  // Rising scores are where the classic mistake shows: every step moves the max.
  std::vector<float> x = {0.5f, 1.0f, 2.0f, 3.5f, 4.0f, 6.0f};
  OnlineSoftmax state;
  for (float v : x) impl::online_push(state, v);
  const double want = two_pass_sum(x);
  const bool classic = std::fabs(state.sum - classic_mistake_sum(x)) < 1e-4 * classic_mistake_sum(x);
  INFO("scores 0.5, 1, 2, 3.5, 4, 6: want sum " << want << ", got " << state.sum << "; read "
                                                 << kOnlineLesson);
  CHECK_MESSAGE(state.max == 6.0f, "the running max must be the largest score seen");
  CHECK_MESSAGE(std::fabs(state.sum - want) < 1e-5 * want,
                std::string(classic ? "this is the classic mistake: the sum was rescaled with the max AFTER "
                           "updating it (exp(m_new - m_new) = 1). Compute alpha = exp(m_old - "
                           "m_new) before you overwrite state.max"
                                    : "the running sum must equal sum_j exp(x_j - max)"));
}

TEST_CASE("online softmax: any order gives the two-pass result") {
  for (int n : {2, 17, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    fill_uniform(x, testing::next_seed(), -20.0f, 20.0f);
    OnlineSoftmax state;
    for (float v : x) impl::online_push(state, v);
    const double want = two_pass_sum(x);
    INFO(n << " random scores in [-20, 20); read " << kOnlineLesson);
    CHECK_MESSAGE(std::fabs(state.sum - want) < 1e-4 * want, "running sum != sum_j exp(x_j - max)");
  }
}

TEST_CASE("online softmax: alpha rescales an accumulator to the exact weighted sum") {
  // The accumulator trick of FlashAttention in one dimension: acc = sum_j exp(x_j - m) * y_j,
  // kept exact as m moves by multiplying by the returned alpha.
  std::vector<float> x(200), y(200);
  fill_uniform(x, testing::next_seed(), -30.0f, 30.0f);
  fill_uniform(y, testing::next_seed(), -1.0f, 1.0f);
  OnlineSoftmax state;
  float acc = 0.0f;
  for (size_t j = 0; j < x.size(); ++j) {
    const float alpha = impl::online_push(state, x[j]);
    acc = acc * alpha + std::exp(x[j] - state.max) * y[j];
  }
  const std::vector<double> p = softmax_double(x);
  double want = 0.0;
  for (size_t j = 0; j < x.size(); ++j) want += p[j] * y[j];
  INFO("read " << kOnlineLesson);
  CHECK_MESSAGE(std::fabs(acc / state.sum - want) < 1e-4,
                "acc / sum != sum_j softmax_j * y_j: return alpha = exp(m_old - m_new)");
}

TEST_CASE("forward: attention in one pass matches the reference") {
  const Kernel& kernel = testing::kernel_under_test(0, testing::impl_under_test());
  testing::CheckOptions o;
  o.lesson = kForwardLesson.c_str();
  SUBCASE("sequence lengths 1 .. 1000") {
    for (int n : {1, 2, 17, 63, 64, 65, 1000})
      testing::check_against_reference(kernel, Problem::make(1, 2, n, n, 64), o);
  }
  SUBCASE("seq_q != seq_k") {
    for (auto [sq, sk] : {std::pair{1, 300}, {300, 1}, {17, 65}, {65, 17}})
      testing::check_against_reference(kernel, Problem::make(2, 2, sq, sk, 32), o);
  }
  SUBCASE("head dims, powers of two and not") {
    for (int d : {1, 16, 59, 80, 128, 256})
      testing::check_against_reference(kernel, Problem::make(1, 2, 33, 47, d), o);
  }
  SUBCASE("large logits (scores in the hundreds)") {
    testing::CheckOptions big = o;
    big.range = 30.0f;
    testing::check_against_reference(kernel, Problem::make(1, 2, 64, 64, 64), big);
  }
  SUBCASE("BSHD layout and a custom scale") {
    Problem p = Problem::make(2, 3, 40, 50, 24, false, Layout::BSHD);
    testing::check_against_reference(kernel, p, o);
    p.scale = 0.5f;
    testing::check_against_reference(kernel, p, o);
  }
}

// Going further (lesson 00, section 8): `./course grade 00 --extra`. The learner's stubs are in
// modules/00_reference/further.cpp; a plain `./course grade 00` leaves this suite out, and the
// untouched stubs fail it.
namespace {

const std::string kFurtherLesson = "modules/00_reference/README.md, section 8 (going further)";

// The state of the scores x[begin, end), by two passes in double (empty: max -inf, sum 0).
OnlineSoftmax state_of(const std::vector<float>& x, size_t begin, size_t end) {
  OnlineSoftmax s;
  double m = -INFINITY, sum = 0.0;
  for (size_t j = begin; j < end; ++j) m = std::max(m, double(x[j]));
  for (size_t j = begin; j < end; ++j) sum += std::exp(double(x[j]) - m);
  if (begin < end) s.max = float(m), s.sum = float(sum);
  return s;
}

// sum_j exp(x_j - m) * y_j over [begin, end): an accumulator relative to the max m.
double weighted_sum(const std::vector<float>& x, const std::vector<float>& y, size_t begin,
                    size_t end, double m) {
  double acc = 0.0;
  for (size_t j = begin; j < end; ++j) acc += std::exp(double(x[j]) - m) * y[j];
  return acc;
}

// sum_j softmax(x)_j * y_j: what acc / sum must come to.
double softmax_weighted(const std::vector<float>& x, const std::vector<float>& y) {
  const std::vector<double> p = softmax_double(x);
  double want = 0.0;
  for (size_t j = 0; j < x.size(); ++j) want += p[j] * y[j];
  return want;
}

}  // namespace

TEST_SUITE("extra") {
  TEST_CASE("extra: merging two states gives the state of all the keys") {
    for (int n : {2, 17, 1000}) {
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      fill_uniform(x, testing::next_seed(), -20.0f, 20.0f);
      fill_uniform(y, testing::next_seed(), -1.0f, 1.0f);
      for (size_t split : {size_t(1), size_t(n / 2), size_t(n - 1)}) {
        OnlineSoftmax a = state_of(x, 0, split);
        const OnlineSoftmax b = state_of(x, split, x.size());
        const double acc_a = weighted_sum(x, y, 0, split, a.max);
        const double acc_b = weighted_sum(x, y, split, x.size(), b.max);
        const impl::MergeFactors f = impl::online_merge(a, b);
        const double want_sum = two_pass_sum(x);
        INFO(n << " scores in [-20, 20) split after " << split << ": want max "
               << *std::max_element(x.begin(), x.end()) << " sum " << want_sum << ", got max "
               << a.max << " sum " << a.sum << ", factors " << f.a << ", " << f.b << "; read "
               << kFurtherLesson);
        CHECK_MESSAGE(a.max == *std::max_element(x.begin(), x.end()),
                      "the merged max is the larger of the two maxima");
        CHECK_MESSAGE(std::fabs(a.sum - want_sum) < 1e-5 * want_sum,
                      "the merged sum is each side's sum moved onto the merged max, then added");
        CHECK_MESSAGE(std::fabs((acc_a * f.a + acc_b * f.b) / a.sum - softmax_weighted(x, y)) <
                          1e-5,
                      "acc_a * factor.a + acc_b * factor.b, divided by the merged sum, must be "
                      "the softmax-weighted sum: factor = exp(side's max - merged max)");
      }
    }
  }

  TEST_CASE("extra: merging with an empty state (split-KV: a split that saw no key)") {
    const std::vector<float> x = {0.5f, 3.0f, -2.0f};
    const OnlineSoftmax full = state_of(x, 0, x.size()), empty;
    INFO("an empty state is max = -inf, sum = 0; read " << kFurtherLesson);
    OnlineSoftmax a = empty;
    impl::MergeFactors f = impl::online_merge(a, full);
    CHECK_MESSAGE((a.max == full.max && a.sum == doctest::Approx(full.sum)),
                  "empty + X must give X");
    CHECK_MESSAGE((f.a == 0.0f && f.b == doctest::Approx(1.0)),
                  "empty + X: the factors are 0 for the empty side and 1 for X");
    a = full;
    f = impl::online_merge(a, empty);
    CHECK_MESSAGE((a.max == full.max && a.sum == doctest::Approx(full.sum)),
                  "X + empty must give X");
    CHECK_MESSAGE((f.a == doctest::Approx(1.0) && f.b == 0.0f),
                  "X + empty: the factors are 1 for X and 0 for the empty side");
    a = empty;
    f = impl::online_merge(a, empty);
    CHECK_MESSAGE((a.max == -INFINITY && a.sum == 0.0f),
                  "empty + empty must stay empty (max -inf, sum 0)");
    CHECK_MESSAGE((!std::isnan(f.a) && !std::isnan(f.b) && !std::isnan(a.sum)),
                  "empty + empty: exp(-inf - -inf) is NaN; measure from 0 when the max is -inf");
  }

  TEST_CASE("extra: one rescale per tile, partial last tiles and rising scores") {
    for (int tile : {1, 4, 16})
      for (int n : {1, 17, 65, 1000})
        for (bool rising : {false, true}) {
          std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
          fill_uniform(x, testing::next_seed(), -20.0f, 20.0f);
          fill_uniform(y, testing::next_seed(), -1.0f, 1.0f);
          if (rising) std::sort(x.begin(), x.end());  // the max moves at every tile
          OnlineSoftmax state;
          double acc = 0.0;
          for (int t0 = 0; t0 < n; t0 += tile) {
            const int count = std::min(tile, n - t0);
            const float alpha = impl::online_push_tile(state, x.data() + t0, count);
            acc = acc * alpha + weighted_sum(x, y, size_t(t0), size_t(t0 + count), state.max);
          }
          const double want_sum = two_pass_sum(x);
          INFO(n << (rising ? " rising" : " random") << " scores in tiles of " << tile
                 << ": want sum " << want_sum << ", got max " << state.max << " sum "
                 << state.sum << "; read " << kFurtherLesson);
          CHECK_MESSAGE(state.max == *std::max_element(x.begin(), x.end()),
                        "the running max must be the largest score of all tiles so far");
          CHECK_MESSAGE(std::fabs(state.sum - want_sum) < 1e-5 * want_sum,
                        "the sum: the old sum times alpha = exp(old max - new max), plus the "
                        "tile's terms against the NEW max (the tile's max comes first)");
          CHECK_MESSAGE(std::fabs(acc / state.sum - softmax_weighted(x, y)) < 1e-5,
                        "acc / sum != sum_j softmax_j * y_j: return alpha = exp(m_old - m_new)");
        }
  }
}
