// Module 11 exercise: the backward pass of attention. The kernels that call your functions
// are given: rows_kernels.cuh (the readable fp32 rung, and the row preparation every rung
// shares) and backward_kernel.cuh (the FlashAttention-2 backward on the tensor cores, for f16
// and bf16). Read modules/11_backward/README.md first; common/backward.h states the math.
// Run: ./course run 11 --backward --verify     Grade: ./course grade 11
//
// Units: a score in base-2 units is s log2(e) = q . k * scale * log2(e) (a.scale_log2), and
// lse2 = lse log2(e), so that P = e^(s - lse) is one exp2 (module 03, section 2).
#include <cmath>

#include "common/device/math.cuh"
#include "modules/11_backward/backward_attention.h"
#include "modules/11_backward/entry_points.cuh"
#include "modules/11_backward/rows_kernels.cuh"

namespace attn::m11::ATTN_IMPL {

struct BackwardSteps {
  // TODO 1 (README, section 1): what the forward saves for the backward. The forward kept the
  // running max m of the row's scores in base-2 units and the sum l = sum_j 2^(s_j log2(e) -
  // m). Return lse = log sum_j e^(s_j), the natural log. A row that saw no key (l = 0) returns
  // +INFINITY, never NaN or -inf: its P must come out 0 in the backward.
  static __device__ float log_sum_exp(float m_log2, float row_sum) {
    (void)m_log2, (void)row_sum;
    return 0.0f;
  }

  // TODO 2 (README, section 1): P recomputed from a score and its row's lse, both in base-2
  // units (device::fast_exp2 is one instruction). Check: masked scores are -inf, rows with no
  // key have lse2 = +inf; both must give 0.
  static __device__ float probability(float score_log2, float lse_log2) {
    (void)score_log2, (void)lse_log2;
    return 0.0f;
  }

  // TODO 3 (README, section 1): the gradient of a score from P, dP = dO . v and the row's D.
  static __device__ float score_gradient(float p, float dp, float delta) {
    (void)p, (void)dp, (void)delta;
    return 0.0f;
  }

  // TODO 4 (README, section 2): one thread per key j of K/V head g of batch entry b. Write
  //   dV[j] = sum_i P[i][j] dO[i]   and   dK[j] = scale sum_i dS[i][j] Q[i]
  // over every query head h of the group (p.heads / p.kv_heads consecutive heads from
  // g * group) and every query i that sees key j (first_query(p, j) .. seq_q - 1).
  // Per (h, i): s = q . k, dp = dO . v (fp32), P from a.lse2[a.row(b, h, i)], dS with
  // a.delta[a.row(b, h, i)]. Keep k, v, dk, dv in float arrays of D (load_row, store_row:
  // rows_kernels.cuh); tensors are addressed with Problem::offset and p.q, p.o (dO has O's
  // strides), p.k, p.v (dK, dV have K's and V's).
  template <class T, int D>
  static __device__ void dkdv_for_key(const RowsArgs<T>& a, int b, int g, int j) {
    (void)a, (void)b, (void)g, (void)j;
  }

  // TODO 5 (README, section 2): one thread per query i of head h: dQ[i] = scale sum_j dS[i][j]
  // K[j] over the keys it sees (0 .. visible_end(p, i) - 1) of K/V head p.kv_head(h).
  template <class T, int D>
  static __device__ void dq_for_query(const RowsArgs<T>& a, int b, int h, int i) {
    (void)a, (void)b, (void)h, (void)i;
  }
};

ATTN_M11_DEFINE_ENTRY_POINTS(BackwardSteps)

}  // namespace attn::m11::ATTN_IMPL
