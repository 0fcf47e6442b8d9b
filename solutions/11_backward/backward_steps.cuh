// Module 11 solution: the math of the backward pass (BackwardSteps), called by the given
// kernels of modules/11_backward (rows_kernels.cuh, backward_kernel.cuh). In a header so that
// two programs instantiate it: solution.cu's entry points and the benchmark (bench/11_backward).
#pragma once

#include <cmath>

#include "common/device/math.cuh"
#include "modules/11_backward/rows_kernels.cuh"

namespace attn::m11::ATTN_IMPL {

struct BackwardSteps {
  // The forward's last step: log sum_j e^(s_j) from the running max m of the scores in base-2
  // units (m = max_j s_j log2(e)) and the sum l = sum_j 2^(s_j log2(e) - m):
  //   sum_j e^(s_j) = 2^m l,  so  lse = (m + log2 l) ln 2.
  // A row that saw no key has l = 0: lse = +inf, which makes every P of the row 0 later.
  static __device__ float log_sum_exp(float m_log2, float row_sum) {
    if (row_sum == 0.0f) return INFINITY;
    return (m_log2 + log2f(row_sum)) * 0.6931471805599453f;
  }

  // P recomputed from the score and the row's log-sum-exp, both in base-2 units:
  // P = e^(s - lse) = 2^(s log2(e) - lse log2(e)). Never above 1 (lse >= every s); a masked
  // score (-inf) or a row that sees no key (lse2 = +inf) gives 2^-inf = 0.
  static __device__ float probability(float score_log2, float lse_log2) {
    return device::fast_exp2(score_log2 - lse_log2);
  }

  // dS = P (dP - D): the softmax's Jacobian applied to dP. D = sum_j P_j dP_j = dO . O is the
  // part every score of the row shares (README, section 1).
  static __device__ float score_gradient(float p, float dp, float delta) { return p * (dp - delta); }

  // One thread, key j of K/V head g: dV[j] = sum_i P[i][j] dO[i] and
  // dK[j] = scale sum_i dS[i][j] Q[i], over every query row i of every query head of the group
  // that sees key j.
  template <class T, int D>
  static __device__ void dkdv_for_key(const RowsArgs<T>& a, int b, int g, int j) {
    const Problem& p = a.p;
    float k[D], v[D], dk[D], dv[D];
    load_row<D>(k, a.k + Problem::offset(p.k, b, g, j), p.head_dim);
    load_row<D>(v, a.v + Problem::offset(p.v, b, g, j), p.head_dim);
#pragma unroll
    for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0.0f;
    const int group = p.heads / p.kv_heads;
    for (int h = g * group; h < (g + 1) * group; ++h)
      for (int i = first_query(p, j); i < p.seq_q; ++i) {
        const T* q = a.q + Problem::offset(p.q, b, h, i);
        const T* dout = a.dout + Problem::offset(p.o, b, h, i);
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d)
          if (d < p.head_dim) s += to_float(q[d]) * k[d], dp += to_float(dout[d]) * v[d];
        const float pr = probability(s * a.scale_log2, a.lse2[a.row(b, h, i)]);
        const float ds = score_gradient(pr, dp, a.delta[a.row(b, h, i)]);
#pragma unroll
        for (int d = 0; d < D; ++d)
          if (d < p.head_dim) dv[d] += pr * to_float(dout[d]), dk[d] += ds * to_float(q[d]);
      }
    store_row<D>(a.dk + Problem::offset(p.k, b, g, j), dk, p.head_dim, a.scale);
    store_row<D>(a.dv + Problem::offset(p.v, b, g, j), dv, p.head_dim);
  }

  // One thread, query i of head h: dQ[i] = scale sum_j dS[i][j] K[j] over the keys it sees.
  template <class T, int D>
  static __device__ void dq_for_query(const RowsArgs<T>& a, int b, int h, int i) {
    const Problem& p = a.p;
    float q[D], dout[D], dq[D];
    load_row<D>(q, a.q + Problem::offset(p.q, b, h, i), p.head_dim);
    load_row<D>(dout, a.dout + Problem::offset(p.o, b, h, i), p.head_dim);
#pragma unroll
    for (int d = 0; d < D; ++d) dq[d] = 0.0f;
    const float lse2 = a.lse2[a.row(b, h, i)], delta = a.delta[a.row(b, h, i)];
    const int g = p.kv_head(h), end = visible_end(p, i);
    for (int j = 0; j < end; ++j) {
      const T* k = a.k + Problem::offset(p.k, b, g, j);
      const T* v = a.v + Problem::offset(p.v, b, g, j);
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (d < p.head_dim) s += q[d] * to_float(k[d]), dp += dout[d] * to_float(v[d]);
      const float ds = score_gradient(probability(s * a.scale_log2, lse2), dp, delta);
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (d < p.head_dim) dq[d] += ds * to_float(k[d]);
    }
    store_row<D>(a.dq + Problem::offset(p.q, b, h, i), dq, p.head_dim, a.scale);
  }
};

}  // namespace attn::m11::ATTN_IMPL
