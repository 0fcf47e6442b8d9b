#include "common/backward.h"

#include <algorithm>
#include <cmath>

#include "common/parallel.h"

namespace attn {

namespace {

// How a backward kernel turns S and lse into P, and which scale it puts on dQ and dK: the
// right way, or as one of the classic bugs does.
struct Recipe {
  BackwardBug bug = BackwardBug::none;
  double grad_scale = 1.0;  // the factor on dQ = grad_scale dS K and dK = grad_scale dS^T Q

  Recipe(BackwardBug b, double scale) : bug(b) {
    grad_scale = b == BackwardBug::no_scale      ? 1.0
                 : b == BackwardBug::scale_twice ? scale * scale
                                                 : scale;
  }
  // The lse a kernel with this bug subtracts. +inf (a row with no key) stays +inf, except for
  // no_lse, which never looks at it.
  double lse_used(double lse) const {
    switch (bug) {
      case BackwardBug::no_lse: return 0.0;
      // exp2(S log2 e - lse) = exp(S - lse ln 2)
      case BackwardBug::lse_as_base2: return lse * std::log(2.0);
      case BackwardBug::lse_times_log2e: return lse / std::log(2.0);
      default: return lse;
    }
  }
  bool keeps_delta() const { return bug != BackwardBug::no_delta; }
};

double dot(const float* a, const float* b, int d) {
  double s = 0.0;
  for (int c = 0; c < d; ++c) s += double(a[c]) * b[c];
  return s;
}

// One query row (b, h, i): the forward (O, lse), D = dO . O and dQ. Everything a query needs
// is its own row of scores, so rows are independent.
void query_row(const Problem& p, const Recipe& recipe, const std::vector<float>& q,
               const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& dout, BackwardReference& r, std::vector<double>& delta,
               int b, int h, int i, std::vector<double>& s) {
  const int d = p.head_dim;
  const int visible = p.first_masked_key(i);
  const int g = p.kv_head(h);
  const int64_t row = (int64_t(b) * p.heads + h) * p.seq_q + i;
  const float* qi = q.data() + Problem::offset(p.q, b, h, i);
  const float* doi = dout.data() + Problem::offset(p.o, b, h, i);
  double* oi = r.o.data() + Problem::offset(p.o, b, h, i);
  double* dqi = r.grad.dq.data() + Problem::offset(p.q, b, h, i);
  std::fill(oi, oi + d, 0.0);
  std::fill(dqi, dqi + d, 0.0);
  if (visible == 0) {  // no key: lse = +inf, so that exp(S - lse) = 0; O, D and dQ are 0
    r.lse[size_t(row)] = INFINITY;
    delta[size_t(row)] = 0.0;
    return;
  }
  const double scale = p.softmax_scale();
  double row_max = -INFINITY;
  for (int j = 0; j < visible; ++j) {
    s[size_t(j)] = scale * dot(qi, k.data() + Problem::offset(p.k, b, g, j), d);
    row_max = std::max(row_max, s[size_t(j)]);
  }
  double sum = 0.0;
  for (int j = 0; j < visible; ++j) sum += std::exp(s[size_t(j)] - row_max);
  const double lse = row_max + std::log(sum);  // log sum exp S, without overflow
  r.lse[size_t(row)] = lse;
  for (int j = 0; j < visible; ++j) {
    const double pij = std::exp(s[size_t(j)] - lse);
    const float* vj = v.data() + Problem::offset(p.v, b, g, j);
    for (int c = 0; c < d; ++c) oi[c] += pij * vj[c];
  }
  double di = 0.0;
  for (int c = 0; c < d; ++c) di += double(doi[c]) * oi[c];
  delta[size_t(row)] = di;

  // dQ_i = scale sum_j dS_ij K_j with dS_ij = P_ij (dP_ij - D_i), P from S and lse as the
  // backward recomputes it.
  const double lse_used = recipe.lse_used(lse);
  const double d_used = recipe.keeps_delta() ? di : 0.0;
  for (int j = 0; j < visible; ++j) {
    const double pij = std::exp(s[size_t(j)] - lse_used);
    const double dpij = dot(doi, v.data() + Problem::offset(p.v, b, g, j), d);
    const double ds = pij * (dpij - d_used);
    const float* kj = k.data() + Problem::offset(p.k, b, g, j);
    for (int c = 0; c < d; ++c) dqi[c] += ds * kj[c];
  }
  for (int c = 0; c < d; ++c) dqi[c] *= recipe.grad_scale;
}

// One key row (b, g, j): dV_j = sum P_ij dO_i and dK_j = scale sum dS_ij Q_i over the queries
// i that see key j, in every query head h of K/V head g. Each key owns its rows of dK and dV,
// so keys are independent too (the FlashAttention-2 backward splits its work the same way).
void key_row(const Problem& p, const Recipe& recipe, const std::vector<float>& q,
             const std::vector<float>& k, const std::vector<float>& v,
             const std::vector<float>& dout, BackwardReference& r,
             const std::vector<double>& delta, int b, int g, int j) {
  const int d = p.head_dim;
  const int group = p.heads / p.kv_heads;
  const double scale = p.softmax_scale();
  const float* kj = k.data() + Problem::offset(p.k, b, g, j);
  const float* vj = v.data() + Problem::offset(p.v, b, g, j);
  double* dkj = r.grad.dk.data() + Problem::offset(p.k, b, g, j);
  double* dvj = r.grad.dv.data() + Problem::offset(p.v, b, g, j);
  std::fill(dkj, dkj + d, 0.0);
  std::fill(dvj, dvj + d, 0.0);
  // Causal: query i sees key j iff j < first_masked_key(i), i.e. i >= j - (seq_k - seq_q).
  const int first_query = p.causal ? std::max(0, j - (p.seq_k - p.seq_q)) : 0;
  const int first_head = recipe.bug == BackwardBug::gqa_last_head ? group - 1 : 0;
  for (int hg = first_head; hg < group; ++hg) {
    const int h = g * group + hg;
    for (int i = first_query; i < p.seq_q; ++i) {
      const int64_t row = (int64_t(b) * p.heads + h) * p.seq_q + i;
      const float* qi = q.data() + Problem::offset(p.q, b, h, i);
      const float* doi = dout.data() + Problem::offset(p.o, b, h, i);
      const double sij = scale * dot(qi, kj, d);
      const double pij = std::exp(sij - recipe.lse_used(r.lse[size_t(row)]));
      const double dpij = dot(doi, vj, d);
      const double ds = pij * (dpij - (recipe.keeps_delta() ? delta[size_t(row)] : 0.0));
      for (int c = 0; c < d; ++c) {
        dvj[c] += pij * doi[c];
        dkj[c] += ds * qi[c];
      }
    }
  }
  for (int c = 0; c < d; ++c) dkj[c] *= recipe.grad_scale;
}

}  // namespace

const char* backward_bug_name(BackwardBug bug) {
  switch (bug) {
    case BackwardBug::no_delta: return "no_delta";
    case BackwardBug::no_scale: return "no_scale";
    case BackwardBug::scale_twice: return "scale_twice";
    case BackwardBug::no_lse: return "no_lse";
    case BackwardBug::lse_as_base2: return "lse_as_base2";
    case BackwardBug::lse_times_log2e: return "lse_times_log2e";
    case BackwardBug::gqa_last_head: return "gqa_last_head";
    case BackwardBug::none: break;
  }
  return "none";
}

BackwardReference reference_backward(const Problem& p, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     const std::vector<float>& dout, BackwardBug bug) {
  const Recipe recipe(bug, p.softmax_scale());
  BackwardReference r;
  r.o.assign(size_t(p.o_elements()), 0.0);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  r.lse.assign(size_t(rows), 0.0);
  r.grad.dq.assign(size_t(p.q_elements()), 0.0);
  r.grad.dk.assign(size_t(p.kv_elements()), 0.0);
  r.grad.dv.assign(size_t(p.kv_elements()), 0.0);
  std::vector<double> delta(size_t(rows), 0.0);

  // Pass 1, one query row at a time: O, lse, D and dQ.
  parallel_rows(rows, 4 * int64_t(p.seq_k) * p.head_dim, [&](int64_t first, int64_t stride) {
    std::vector<double> scores(size_t(p.seq_k));
    for (int64_t row = first; row < rows; row += stride) {
      const int i = int(row % p.seq_q);
      const int h = int((row / p.seq_q) % p.heads);
      const int b = int(row / (int64_t(p.seq_q) * p.heads));
      query_row(p, recipe, q, k, v, dout, r, delta, b, h, i, scores);
    }
  });
  // Pass 2, one key row at a time, with the lse and D of pass 1: dK and dV.
  const int64_t keys = int64_t(p.batch) * p.kv_heads * p.seq_k;
  const int64_t work = 4 * int64_t(p.heads / p.kv_heads) * p.seq_q * p.head_dim;
  parallel_rows(keys, work, [&](int64_t first, int64_t stride) {
    for (int64_t key = first; key < keys; key += stride) {
      const int j = int(key % p.seq_k);
      const int g = int((key / p.seq_k) % p.kv_heads);
      const int b = int(key / (int64_t(p.seq_k) * p.kv_heads));
      key_row(p, recipe, q, k, v, dout, r, delta, b, g, j);
    }
  });
  return r;
}

BackwardReference reference_backward(const Problem& p, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     const std::vector<float>& dout) {
  return reference_backward(p, q, k, v, dout, BackwardBug::none);
}

std::vector<double> reference_delta(const Problem& p, const std::vector<double>& o,
                                    const std::vector<float>& dout) {
  std::vector<double> delta(size_t(p.batch) * p.heads * p.seq_q, 0.0);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int64_t at = Problem::offset(p.o, b, h, i);
        double sum = 0.0;
        for (int c = 0; c < p.head_dim; ++c) sum += double(dout[size_t(at + c)]) * o[size_t(at + c)];
        delta[(size_t(b) * p.heads + h) * p.seq_q + i] = sum;
      }
  return delta;
}

}  // namespace attn
