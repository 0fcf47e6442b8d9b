// Tests of module 11's harness (CPU only): the double reference of the backward pass
// (common/backward.h) against what it must equal, computed another way: central differences of
// the forward reference, D and lse from their definitions, grouped K/V heads as separate
// problems, BSHD as a permutation of BHSD; and the hints of common/backward_runner.h, each on
// gradients that a planted bug would give, built from the true ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/backward_runner.h"
#include "common/compare.h"
#include "common/half.h"
#include "common/random.h"
#include "common/reference.h"
#include "modules/11_backward/dq_layout.h"
#include "tests/host_checks.h"

using namespace attn;
using testing::max_abs_difference;

namespace {

BackwardReference backward(const Problem& p, const BackwardInputs& in,
                           BackwardBug bug = BackwardBug::none) {
  return reference_backward(p, in.in.q, in.in.k, in.in.v, in.dout, bug);
}

double max_abs(const std::vector<double>& t) {
  double m = 0.0;
  for (double x : t) m = std::max(m, std::fabs(x));
  return m;
}

bool all_finite(const std::vector<double>& t) {
  return std::all_of(t.begin(), t.end(), [](double x) { return std::isfinite(x); });
}

// L = sum over O of dO o O, whose gradients are dQ, dK, dV for this dO.
double loss(const Problem& p, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>& dout) {
  const std::vector<double> o = reference_attention(p, q, k, v);
  double l = 0.0;
  for (size_t e = 0; e < o.size(); ++e) l += double(dout[e]) * o[e];
  return l;
}

// Every element at an offset the tensor uses (padding left out), through strides s.
std::vector<int64_t> elements(const Problem& p, const Strides& s, int heads, int seq) {
  std::vector<int64_t> at;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < seq; ++i)
        for (int c = 0; c < p.head_dim; ++c) at.push_back(Problem::offset(s, b, h, i) + c);
  return at;
}

// Compares every element of `grad` with the central difference of L in that element of
// tensor `which` (0 Q, 1 K, 2 V). Inputs are multiples of 2^-12 and the step 2^-20, so x +- step
// are exact floats and the difference is of the function the reference computes, off by the
// third derivative times step^2 / 6 (about 1e-13 here).
void check_against_differences(const Problem& p, BackwardInputs in, int which,
                               const std::vector<double>& grad, const char* name) {
  INFO(name << ": " << p.describe());
  std::vector<float>& t = which == 0 ? in.in.q : which == 1 ? in.in.k : in.in.v;
  const std::vector<int64_t> at = which == 0 ? elements(p, p.q, p.heads, p.seq_q)
                                  : which == 1 ? elements(p, p.k, p.kv_heads, p.seq_k)
                                               : elements(p, p.v, p.kv_heads, p.seq_k);
  const double step = std::ldexp(1.0, -20);
  const double largest = max_abs(grad);
  CHECK(largest > 1e-3);  // a zero gradient would agree with anything flat
  double worst = 0.0;
  for (const int64_t e : at) {
    const float x = t[size_t(e)];
    t[size_t(e)] = float(x + step);
    const double up = loss(p, in.in.q, in.in.k, in.in.v, in.dout);
    t[size_t(e)] = float(x - step);
    const double down = loss(p, in.in.q, in.in.k, in.in.v, in.dout);
    t[size_t(e)] = x;
    worst = std::max(worst, std::fabs((up - down) / (2.0 * step) - grad[size_t(e)]));
  }
  CHECK(worst <= 1e-6 * largest);
}

std::vector<float> on_grid(std::vector<float> t) {
  for (float& x : t) x = std::round(x * 4096.0f) / 4096.0f;
  return t;
}

// Rows [0, seq) of head (b, h) of a tensor with strides s, as a dense tensor of one head.
std::vector<float> head_of(const std::vector<float>& t, const Strides& s, int b, int h, int seq,
                           int d) {
  std::vector<float> out;
  for (int i = 0; i < seq; ++i) {
    const auto row = t.begin() + Problem::offset(s, b, h, i);
    out.insert(out.end(), row, row + d);
  }
  return out;
}

// The same values in another layout: element (b, h, i, c) of `from` (strides a) moved to
// strides b_, in a tensor of `size` elements (0 where the layout pads).
std::vector<float> relayout(const std::vector<float>& from, const Strides& a, const Strides& b_,
                            int batch, int heads, int seq, int d, int64_t size) {
  std::vector<float> to(size_t(size), 0.0f);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < seq; ++i)
        for (int c = 0; c < d; ++c)
          to[size_t(Problem::offset(b_, b, h, i) + c)] = from[size_t(Problem::offset(a, b, h, i) + c)];
  return to;
}

// The host outputs O and lse as the reference has them and the given gradients, compared as
// check_backward compares a kernel's (defined with the hints' tests below).
BackwardCheck check_of(const Problem& p, const BackwardInputs& in, const Gradients& g);

}  // namespace

// ---- The reference is the gradient of the forward reference --------------------------------

TEST_CASE("reference_backward: every gradient equals central differences of sum(dO o O)") {
  struct Case { Problem p; const char* what; };
  Problem scaled = Problem::make(2, 4, 4, 6, 3, false, Layout::BSHD, 2);
  scaled.scale = 0.7f;
  const Case cases[] = {
      {Problem::make(1, 2, 3, 5, 4, false, Layout::BHSD, 1), "GQA, not causal"},
      {Problem::make(1, 2, 3, 5, 4, true, Layout::BHSD, 1), "GQA, causal, seq_q < seq_k"},
      {Problem::make(1, 2, 7, 3, 4, true, Layout::BHSD, 1), "causal, seq_q > seq_k: 4 rows see no key"},
      {scaled, "BSHD, two groups, odd head_dim, scale 0.7"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Problem& p = c.p;
    BackwardInputs in = random_backward_inputs(p, 21, 1.5f);
    in.in.q = on_grid(in.in.q);
    in.in.k = on_grid(in.in.k);
    in.in.v = on_grid(in.in.v);
    in.dout = on_grid(in.dout);
    const BackwardReference r = backward(p, in);
    check_against_differences(p, in, 0, r.grad.dq, "dQ");
    check_against_differences(p, in, 1, r.grad.dk, "dK");
    check_against_differences(p, in, 2, r.grad.dv, "dV");
    // Its O is the forward reference's.
    CHECK(max_abs_difference(r.o, reference_attention(p, in.in.q, in.in.k, in.in.v)) < 1e-13);
  }
}

TEST_CASE("check_against_differences has teeth: a gradient off by 1e-5 in one element fails") {
  // The same comparison as above on a gradient with one wrong element must report it; run in
  // a subcase so the expected failure is counted as this test's own.
  const Problem p = Problem::make(1, 1, 2, 3, 2);
  BackwardInputs in = random_backward_inputs(p, 4);
  in.in.q = on_grid(in.in.q);
  in.in.k = on_grid(in.in.k);
  in.in.v = on_grid(in.in.v);
  in.dout = on_grid(in.dout);
  const BackwardReference r = backward(p, in);
  const double step = std::ldexp(1.0, -20);
  std::vector<float> q = in.in.q;
  q[1] = float(in.in.q[1] + step);
  const double up = loss(p, q, in.in.k, in.in.v, in.dout);
  q[1] = float(in.in.q[1] - step);
  const double down = loss(p, q, in.in.k, in.in.v, in.dout);
  const double difference = (up - down) / (2.0 * step);
  CHECK(std::fabs(difference - r.grad.dq[1]) <= 1e-6 * max_abs(r.grad.dq));
  CHECK(std::fabs(difference - (r.grad.dq[1] + 1e-5)) > 1e-6 * max_abs(r.grad.dq));
}

// ---- D and lse from their definitions ---------------------------------------------------------

TEST_CASE("D = rowsum(P o dP) and lse = log sum exp S, computed directly") {
  Problem p = Problem::make(2, 4, 9, 6, 8, true, Layout::BSHD, 2);
  const BackwardInputs in = random_backward_inputs(p, 7, 1.0f);
  const BackwardReference r = backward(p, in);
  const std::vector<double> delta = reference_delta(p, r.o, in.dout);
  const double scale = p.softmax_scale();
  int checked = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const size_t row = (size_t(b) * p.heads + h) * p.seq_q + i;
        const int visible = p.first_masked_key(i);
        const int g = p.kv_head(h);
        // Scores of order 1: exp without the max subtracted is exact enough here.
        std::vector<double> e(static_cast<size_t>(visible));
        double sum = 0.0;
        for (int j = 0; j < visible; ++j) {
          double s = 0.0;
          for (int c = 0; c < p.head_dim; ++c)
            s += double(in.in.q[size_t(Problem::offset(p.q, b, h, i) + c)]) *
                 in.in.k[size_t(Problem::offset(p.k, b, g, j) + c)];
          e[size_t(j)] = std::exp(scale * s);
          sum += e[size_t(j)];
        }
        if (visible == 0) {
          CHECK(r.lse[row] == INFINITY);
          CHECK(delta[row] == 0.0);
          continue;
        }
        double d = 0.0;
        for (int j = 0; j < visible; ++j) {
          double dp = 0.0;
          for (int c = 0; c < p.head_dim; ++c)
            dp += double(in.dout[size_t(Problem::offset(p.o, b, h, i) + c)]) *
                  in.in.v[size_t(Problem::offset(p.v, b, g, j) + c)];
          d += e[size_t(j)] / sum * dp;
        }
        REQUIRE(delta[row] == doctest::Approx(d).epsilon(1e-12));
        REQUIRE(r.lse[row] == doctest::Approx(std::log(sum)).epsilon(1e-12));
        ++checked;
      }
  CHECK(checked == 2 * 4 * 6);  // 3 of the 9 queries of each head see no key
}

// ---- Rows that see no key, large logits -------------------------------------------------------

TEST_CASE("rows that see no key: lse +inf, zero dQ, nothing added to dK and dV, never NaN") {
  const Problem p = Problem::make(2, 2, 10, 4, 8, true, Layout::BHSD, 1);
  BackwardInputs in = random_backward_inputs(p, 9, 2.0f);
  const BackwardReference r = backward(p, in);
  CHECK(all_finite(r.o));
  CHECK(all_finite(r.grad.dq));
  CHECK(all_finite(r.grad.dk));
  CHECK(all_finite(r.grad.dv));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const bool none = p.first_masked_key(i) == 0;
        CHECK(none == (i < 6));
        const size_t row = (size_t(b) * p.heads + h) * p.seq_q + i;
        CHECK((r.lse[row] == INFINITY) == none);
        const auto dq = r.grad.dq.begin() + Problem::offset(p.q, b, h, i);
        const bool zero = std::all_of(dq, dq + p.head_dim, [](double x) { return x == 0.0; });
        // A row with one key has P = 1 whatever its score: dS = dP - D = 0, dQ = 0 as well.
        if (p.first_masked_key(i) != 1) CHECK(zero == none);
      }
  // Those rows' dO cannot matter: the gradients stay exactly the same when it changes.
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < 6; ++i)
        std::fill_n(in.dout.begin() + Problem::offset(p.o, b, h, i), p.head_dim, 1000.0f);
  const BackwardReference changed = backward(p, in);
  CHECK(changed.grad.dq == r.grad.dq);
  CHECK(changed.grad.dk == r.grad.dk);
  CHECK(changed.grad.dv == r.grad.dv);
  // ... while a visible row's dO does.
  in.dout[size_t(Problem::offset(p.o, 0, 0, 7))] += 1.0f;
  CHECK(backward(p, in).grad.dv != r.grad.dv);
}

TEST_CASE("large logits: the gradients stay finite and D still equals dO . O") {
  const Problem p = Problem::make(1, 2, 33, 40, 16, true);
  const BackwardInputs in = random_backward_inputs(p, 13, 12.0f);  // scores of order 100
  const BackwardReference r = backward(p, in);
  CHECK(all_finite(r.grad.dq));
  CHECK(all_finite(r.grad.dk));
  CHECK(all_finite(r.grad.dv));
  CHECK(all_finite(r.lse));
  CHECK(max_abs(r.lse) > 50.0);
  // Sum over every row of D_i equals sum over j of (dV_j . V_j): both are sum_ij P_ij dP_ij.
  const std::vector<double> delta = reference_delta(p, r.o, in.dout);
  double total = 0.0, through_dv = 0.0;
  for (double d : delta) total += d;
  for (size_t e = 0; e < r.grad.dv.size(); ++e) through_dv += r.grad.dv[e] * in.in.v[e];
  CHECK(through_dv == doctest::Approx(total).epsilon(1e-10));
}

// ---- Grouped K/V heads, layouts ----------------------------------------------------------------

TEST_CASE("GQA: dK and dV of a K/V head are the sums over its query heads as separate problems") {
  const Problem p = Problem::make(2, 6, 5, 7, 8, true, Layout::BHSD, 2);
  const BackwardInputs in = random_backward_inputs(p, 17, 1.5f);
  const BackwardReference r = backward(p, in);
  const Problem one = Problem::make(1, 1, p.seq_q, p.seq_k, p.head_dim, true);
  const int d = p.head_dim;
  for (int b = 0; b < p.batch; ++b)
    for (int g = 0; g < p.kv_heads; ++g) {
      std::vector<double> dk(size_t(p.seq_k) * d, 0.0), dv(dk.size(), 0.0);
      for (int h = 0; h < p.heads; ++h) {
        if (p.kv_head(h) != g) continue;
        BackwardInputs single;
        single.in.q = head_of(in.in.q, p.q, b, h, p.seq_q, d);
        single.in.k = head_of(in.in.k, p.k, b, g, p.seq_k, d);
        single.in.v = head_of(in.in.v, p.v, b, g, p.seq_k, d);
        single.dout = head_of(in.dout, p.o, b, h, p.seq_q, d);
        const BackwardReference alone = backward(one, single);
        for (size_t e = 0; e < dk.size(); ++e) {
          dk[e] += alone.grad.dk[e];
          dv[e] += alone.grad.dv[e];
        }
        // dQ of a query head is its own problem's.
        for (int i = 0; i < p.seq_q; ++i)
          for (int c = 0; c < d; ++c)
            REQUIRE(r.grad.dq[size_t(Problem::offset(p.q, b, h, i) + c)] ==
                    doctest::Approx(alone.grad.dq[size_t(i) * d + c]).epsilon(1e-12));
      }
      for (int j = 0; j < p.seq_k; ++j)
        for (int c = 0; c < d; ++c) {
          REQUIRE(r.grad.dk[size_t(Problem::offset(p.k, b, g, j) + c)] ==
                  doctest::Approx(dk[size_t(j) * d + c]).epsilon(1e-12));
          REQUIRE(r.grad.dv[size_t(Problem::offset(p.v, b, g, j) + c)] ==
                  doctest::Approx(dv[size_t(j) * d + c]).epsilon(1e-12));
        }
    }
}

TEST_CASE("layouts: BSHD and padded strides give BHSD's gradients, moved; padding stays 0") {
  const int batch = 2, heads = 4, kv_heads = 2, seq_q = 6, seq_k = 9, d = 8;
  const Problem bhsd = Problem::make(batch, heads, seq_q, seq_k, d, true, Layout::BHSD, kv_heads);
  const BackwardInputs in = random_backward_inputs(bhsd, 23, 1.5f);
  const BackwardReference want = backward(bhsd, in);

  Problem padded = bhsd;  // rows of d + 3 elements, and a gap after every head
  padded.q = padded.o = {int64_t(heads) * (seq_q * (d + 3) + 5), seq_q * (d + 3) + 5, d + 3};
  padded.k = {int64_t(kv_heads) * seq_k * (d + 1), seq_k * (d + 1), d + 1};
  padded.v = {int64_t(kv_heads) * seq_k * (d + 2), seq_k * (d + 2), d + 2};
  for (const Problem& p : {Problem::make(batch, heads, seq_q, seq_k, d, true, Layout::BSHD,
                                         kv_heads),
                           padded}) {
    INFO("q strides " << p.q.batch << ", " << p.q.head << ", " << p.q.seq);
    REQUIRE(validate(p).is_ok());
    BackwardInputs moved;
    moved.in.q = relayout(in.in.q, bhsd.q, p.q, batch, heads, seq_q, d, p.q_elements());
    moved.in.k = relayout(in.in.k, bhsd.k, p.k, batch, kv_heads, seq_k, d, p.kv_elements());
    moved.in.v = relayout(in.in.v, bhsd.v, p.v, batch, kv_heads, seq_k, d, p.kv_elements());
    moved.dout = relayout(in.dout, bhsd.o, p.o, batch, heads, seq_q, d, p.o_elements());
    const BackwardReference got = backward(p, moved);
    const auto back = [&](const std::vector<double>& t, const Strides& s, int h, int seq) {
      std::vector<double> out;
      for (int b = 0; b < batch; ++b)
        for (int hh = 0; hh < h; ++hh)
          for (int i = 0; i < seq; ++i)
            for (int c = 0; c < d; ++c) out.push_back(t[size_t(Problem::offset(s, b, hh, i) + c)]);
      return out;
    };
    CHECK(max_abs_difference(back(got.grad.dq, p.q, heads, seq_q), want.grad.dq) < 1e-14);
    CHECK(max_abs_difference(back(got.grad.dk, p.k, kv_heads, seq_k), want.grad.dk) < 1e-14);
    CHECK(max_abs_difference(back(got.grad.dv, p.v, kv_heads, seq_k), want.grad.dv) < 1e-14);
    CHECK(max_abs_difference(back(got.o, p.o, heads, seq_q), want.o) < 1e-14);
    CHECK(got.lse == want.lse);  // lse is dense [b][h][i] in every layout
    // The runner compares each gradient through its own tensor's strides: the last element
    // of dK and of dV, wrong, is found where it is.
    CHECK(check_of(p, moved, got.grad).passed());
    for (const bool v : {false, true}) {
      Gradients wrong = got.grad;
      std::vector<double>& t = v ? wrong.dv : wrong.dk;
      t[size_t(Problem::offset(v ? p.v : p.k, batch - 1, kv_heads - 1, seq_k - 1) + d - 1)] += 10.0;
      const BackwardCheck c = check_of(p, moved, wrong);
      const Comparison& wrong_one = v ? c.dv : c.dk;
      CHECK_FALSE(wrong_one.passed());
      CHECK(wrong_one.first_bad.str() == "(b=1, h=1, i=8, d=7)");
      CHECK((v ? c.dk : c.dv).passed());
    }
    // What no stride reaches stays 0.
    double padding = 0.0;
    for (const double x : got.grad.dq) padding += std::fabs(x);
    for (const double x : back(got.grad.dq, p.q, heads, seq_q)) padding -= std::fabs(x);
    CHECK(std::fabs(padding) < 1e-9);
  }
}

// ---- Tolerances and the hints of planted bugs --------------------------------------------------

namespace {

std::vector<float> as_float(const std::vector<double>& t) { return {t.begin(), t.end()}; }

// A check of outputs computed on the host: O and lse right, the given gradients.
BackwardCheck check_of(const Problem& p, const BackwardInputs& in, const Gradients& g) {
  const BackwardReference r = backward(p, in);
  BackwardCheck c;
  c.out_o = as_float(r.o);
  c.out_lse = as_float(r.lse);
  c.out_dq = as_float(g.dq);
  c.out_dk = as_float(g.dk);
  c.out_dv = as_float(g.dv);
  compare_backward(p, in, c);
  return c;
}

bool has(const std::vector<std::string>& hints, const std::string& text) {
  return std::any_of(hints.begin(), hints.end(),
                     [&](const std::string& h) { return h.find(text) != std::string::npos; });
}

// The phrase of each model's hint: a planted bug must produce its own and no other.
const char* const kModelPhrases[] = {
    "without the D term", "without the scale", "scale applied twice", "recomputed as exp(S)",
    "P = exp2(S log2(e) - lse)", "P = exp(S - lse log2(e))", "last query head of each group",
    "race on dQ's accumulation"};

void expect_only(const std::vector<std::string>& hints, const std::string& phrase,
                 const std::string& gradients) {
  std::string all;
  for (const std::string& h : hints) all += h + "\n";
  INFO("hints:\n" << all);
  for (const char* other : kModelPhrases)
    CHECK(has(hints, other) == (phrase == other));
  if (!gradients.empty()) CHECK(has(hints, gradients + " match"));
}

// dO with row i scaled by factor(lse_i): a kernel whose P is exp(S - lse) times a per-row
// factor c_i gives exactly the gradients of dO scaled by c_i (dP, D and dV are linear in dO).
BackwardInputs dout_scaled_by_row(const Problem& p, const BackwardInputs& in,
                                  const std::vector<double>& lse, double (*factor)(double)) {
  BackwardInputs out = in;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const double c = factor(lse[(size_t(b) * p.heads + h) * p.seq_q + i]);
        float* row = out.dout.data() + Problem::offset(p.o, b, h, i);
        for (int e = 0; e < p.head_dim; ++e) row[e] = float(row[e] * c);
      }
  return out;
}

}  // namespace

TEST_CASE("backward_tolerance: f32 1e-4, f16 1e-2, bf16 4e-2") {
  CHECK(backward_tolerance(DType::f32) == 1e-4);
  CHECK(backward_tolerance(DType::f16) == 1e-2);
  CHECK(backward_tolerance(DType::bf16) == 4e-2);
}

TEST_CASE("diagnose_backward: each planted bug, built from the true gradients, gets its hint") {
  // Two groups of two query heads, scores of order 4: every bug moves the gradients far.
  const Problem p = Problem::make(2, 4, 9, 12, 8, false, Layout::BHSD, 2);
  const BackwardInputs in = random_backward_inputs(p, 31, 1.5f);
  const BackwardReference r = backward(p, in);
  const double scale = p.softmax_scale();

  SUBCASE("the true gradients pass, with no hint") {
    const BackwardCheck c = check_of(p, in, r.grad);
    CHECK(c.passed());
    CHECK(diagnose_backward(p, in, c).empty());
  }
  SUBCASE("D term left out: dQ += scale D_i (P K)_i, dK_j += scale sum_i P_ij D_i Q_i") {
    const std::vector<double> delta = reference_delta(p, r.o, in.dout);
    const std::vector<double> pk = reference_attention(p, in.in.q, in.in.k, in.in.k);  // P K
    Gradients g = r.grad;
    BackwardInputs dq_rows = in;  // dO := D_i Q_i, whose dV is sum_i P_ij D_i Q_i
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < p.seq_q; ++i) {
          const double di = delta[(size_t(b) * p.heads + h) * p.seq_q + i];
          const int64_t at = Problem::offset(p.q, b, h, i);
          for (int c = 0; c < p.head_dim; ++c) {
            g.dq[size_t(at + c)] += scale * di * pk[size_t(Problem::offset(p.o, b, h, i) + c)];
            dq_rows.dout[size_t(Problem::offset(p.o, b, h, i) + c)] =
                float(di * in.in.q[size_t(at + c)]);
          }
        }
    const std::vector<double> extra = backward(p, dq_rows).grad.dv;
    for (size_t e = 0; e < g.dk.size(); ++e) g.dk[e] += scale * extra[e];
    // The bug model computes the same thing.
    CHECK(max_abs_difference(g.dq, backward(p, in, BackwardBug::no_delta).grad.dq) < 1e-6);
    const BackwardCheck c = check_of(p, in, g);
    CHECK_FALSE(c.dq.passed());
    CHECK_FALSE(c.dk.passed());
    CHECK(c.dv.passed());
    expect_only(diagnose_backward(p, in, c), "without the D term", "dQ and dK");
  }
  SUBCASE("scale left out of dQ and dK") {
    Gradients g = r.grad;
    for (double& x : g.dq) x /= scale;
    for (double& x : g.dk) x /= scale;
    expect_only(diagnose_backward(p, in, check_of(p, in, g)), "without the scale", "dQ and dK");
  }
  SUBCASE("scale applied twice, dK only") {
    Gradients g = r.grad;
    for (double& x : g.dk) x *= scale;
    const std::vector<std::string> hints = diagnose_backward(p, in, check_of(p, in, g));
    expect_only(hints, "scale applied twice", "dK");
    CHECK(has(hints, "dK is wrong"));
    CHECK_FALSE(has(hints, "dQ is wrong"));
  }
  SUBCASE("P = exp(S): every gradient as for dO_i scaled by exp(lse_i)") {
    const BackwardInputs scaled =
        dout_scaled_by_row(p, in, r.lse, [](double lse) { return std::exp(lse); });
    expect_only(diagnose_backward(p, in, check_of(p, in, backward(p, scaled).grad)),
                "recomputed as exp(S)", "dQ and dK and dV");
  }
  SUBCASE("P = exp2(S log2 e - lse): dO_i scaled by exp(lse_i (1 - ln 2))") {
    const BackwardInputs scaled = dout_scaled_by_row(
        p, in, r.lse, [](double lse) { return std::exp(lse * (1.0 - std::log(2.0))); });
    const Gradients g = backward(p, scaled).grad;
    CHECK(max_abs_difference(g.dk, backward(p, in, BackwardBug::lse_as_base2).grad.dk) < 1e-5);
    expect_only(diagnose_backward(p, in, check_of(p, in, g)), "P = exp2(S log2(e) - lse)",
                "dQ and dK and dV");
  }
  SUBCASE("P = exp(S - lse log2 e): dO_i scaled by exp(lse_i (1 - log2 e))") {
    const BackwardInputs scaled = dout_scaled_by_row(
        p, in, r.lse, [](double lse) { return std::exp(lse * (1.0 - 1.0 / std::log(2.0))); });
    expect_only(diagnose_backward(p, in, check_of(p, in, backward(p, scaled).grad)),
                "P = exp(S - lse log2(e))", "dQ and dK and dV");
  }
  SUBCASE("GQA: dK, dV of the last head of each group alone (dO of the others zeroed)") {
    BackwardInputs last = in;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        if (h % (p.heads / p.kv_heads) != p.heads / p.kv_heads - 1)
          for (int i = 0; i < p.seq_q; ++i)
            std::fill_n(last.dout.begin() + Problem::offset(p.o, b, h, i), p.head_dim, 0.0f);
    Gradients g = r.grad;
    const Gradients alone = backward(p, last).grad;
    g.dk = alone.dk;
    g.dv = alone.dv;
    CHECK(max_abs_difference(g.dv, backward(p, in, BackwardBug::gqa_last_head).grad.dv) < 1e-6);
    expect_only(diagnose_backward(p, in, check_of(p, in, g)), "last query head of each group",
                "dK and dV");
  }
  SUBCASE("dQ alone wrong (half of some rows' contributions lost): a race") {
    Gradients g = r.grad;
    for (size_t e = 0; e < g.dq.size(); e += 3) g.dq[e] *= 0.5;
    const std::vector<std::string> hints = diagnose_backward(p, in, check_of(p, in, g));
    expect_only(hints, "race on dQ's accumulation", "");
    CHECK(has(hints, "only dQ is wrong while dK and dV pass"));
  }
  SUBCASE("a wrong formula that is none of the models: only where it is wrong") {
    Gradients g = r.grad;
    for (size_t e = 0; e < g.dv.size(); ++e) g.dv[e] = -g.dv[e];
    const std::vector<std::string> hints = diagnose_backward(p, in, check_of(p, in, g));
    expect_only(hints, "none", "");
    CHECK(has(hints, "dV is wrong (rel err 2.00e+00, tolerance 1e-04): first wrong element at "
                     "key "));
    CHECK(has(hints, "(the sum over its query heads)"));
  }
  SUBCASE("unwritten dK rows, writes past the end of dV, lse in base 2") {
    BackwardCheck c = check_of(p, in, r.grad);
    for (int b = 0; b < p.batch; ++b)
      for (int g = 0; g < p.kv_heads; ++g)
        for (int j = 8; j < p.seq_k; ++j)
          std::fill_n(c.out_dk.begin() + Problem::offset(p.k, b, g, j), p.head_dim,
                      poison_value());
    for (float& x : c.out_lse) x = float(x / std::log(2.0));
    compare_backward(p, in, c);
    c.guard_dv = 2;
    c.guard_writes = 2;
    CHECK(c.dk.unwritten == 2 * 2 * 4 * 8);
    CHECK(c.lse_bad == int64_t(c.out_lse.size()));
    CHECK(c.lse_first_bad == 0);
    const std::vector<std::string> hints = diagnose_backward(p, in, c);
    CHECK(has(hints, "2 values were written past the end of dV"));
    CHECK(has(hints, "dK: 128 elements were never written (keys 8 to 11 hold wrong values)"));
    CHECK(has(hints, "every lse equals log2 of the row's sum"));
    CHECK(has(hints, "modules/11_backward/README.md, section 2"));
    CHECK_FALSE(has(hints, "past the end of dK"));
  }
}

TEST_CASE("diagnose_backward: NaN in rows that see no key; 16-bit near misses") {
  Problem p = Problem::make(1, 2, 8, 5, 8, true);
  const BackwardInputs in = random_backward_inputs(p, 41);
  const BackwardReference r = backward(p, in);
  Gradients g = r.grad;
  for (int h = 0; h < p.heads; ++h)
    for (int i = 0; i < 3; ++i)  // queries 0-2 see no key
      std::fill_n(g.dq.begin() + Problem::offset(p.q, 0, h, i), p.head_dim, NAN);
  BackwardCheck c = check_of(p, in, g);
  CHECK(c.dq.nan_count == 2 * 3 * 8);
  std::vector<std::string> hints = diagnose_backward(p, in, c);
  CHECK(has(hints, "6 rows that see no key have NaN (or unwritten) O, dQ or lse, first query 0 "
                   "of (b=0, h=0): a row that sees no key has lse = +inf: exp(S - lse) must "
                   "give 0, not NaN"));
  CHECK(has(hints, "section 1"));
  CHECK_FALSE(has(hints, "race"));
  // The same rows with a finite wrong lse (not +inf): the lse check names the first.
  c = check_of(p, in, r.grad);
  c.out_lse[1] = 0.0f;
  compare_backward(p, in, c);
  CHECK(c.lse_bad == 1);
  CHECK(c.lse_first_bad == 1);
  CHECK(has(diagnose_backward(p, in, c), "1 lse values are wrong, first query 1 of (b=0, h=0)"));

  // bf16: 2.5x the tolerance of noise on dV reads as rounding, not a formula.
  p.dtype = DType::bf16;
  const BackwardInputs in16 = random_backward_inputs(p, 42);
  const BackwardReference r16 = backward(p, in16);
  g = r16.grad;
  std::vector<float> noise(g.dv.size());
  fill_uniform(noise, 3, -1.0f, 1.0f);
  double norm = 0.0, noise_norm = 0.0;
  for (size_t e = 0; e < g.dv.size(); ++e) {
    norm += g.dv[e] * g.dv[e];
    noise_norm += double(noise[e]) * noise[e];
  }
  const double amount = 2.5 * backward_tolerance(DType::bf16) * std::sqrt(norm / noise_norm);
  for (size_t e = 0; e < g.dv.size(); ++e) g.dv[e] += amount * noise[e];
  c = check_of(p, in16, g);
  CHECK_FALSE(c.dv.passed());
  CHECK(c.dv.rel_l2_error == doctest::Approx(0.1).epsilon(0.01));
  hints = diagnose_backward(p, in16, c);
  CHECK(has(hints, "dV misses the bf16 tolerance by less than 4x"));
  CHECK(has(hints, "section 4"));
}

TEST_CASE("the wgmma kernel's blocked dQ sums: every element its own place, stores in 32 banks") {
  // Each (row, column) of a 64 x 64 block has a place of its own inside the block.
  std::vector<int> seen(m11::kDqBlockRows * m11::kDqBlockCols, 0);
  for (int r = 0; r < m11::kDqBlockRows; ++r)
    for (int c = 0; c < m11::kDqBlockCols; ++c) {
      const int at = m11::dq_block_offset(r, c);
      REQUIRE(at >= 0);
      REQUIRE(at < int(seen.size()));
      ++seen[at];
    }
  CHECK(std::count(seen.begin(), seen.end(), 1) == int(seen.size()));

  // The kernel stores its accumulators as float2 pairs: lane l of warp w holds rows
  // 16 w + l / 4 (+ 8) and columns 8 j + 2 (l % 4) (+ 1). A float2 store is served half a warp
  // at a time; each half's 32 words must land in 32 different banks (4-byte banks, 32 of them).
  for (int w = 0; w < 4; ++w)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 8; ++j)
        for (int half = 0; half < 2; ++half) {
          std::set<int> banks;
          for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
            const int at = m11::dq_block_offset(16 * w + lane / 4 + 8 * h, 8 * j + 2 * (lane % 4));
            banks.insert(at % 32);
            banks.insert((at + 1) % 32);
          }
          CHECK_MESSAGE(banks.size() == 32u,
                        "warp " << w << ", rows + " << 8 * h << ", chunk " << j);
        }

  // A query tile's D / 64 blocks fill exactly its 64 x D floats of the buffer, one each.
  for (int d_max : {64, 128}) {
    const int rows_pad = 192, tile = 1;
    const int64_t bh = 2, first = (bh * rows_pad + 64 * tile) * d_max;
    std::vector<int> hits(size_t(64) * d_max, 0);
    for (int i = 64 * tile; i < 64 * tile + 64; ++i)
      for (int d = 0; d < d_max; ++d) {
        const int64_t at = m11::dq_blocked_index(bh, rows_pad, d_max, i, d) - first;
        REQUIRE(at >= 0);
        REQUIRE(at < int64_t(hits.size()));
        ++hits[size_t(at)];
      }
    CHECK(std::count(hits.begin(), hits.end(), 1) == int(hits.size()));
  }
}
