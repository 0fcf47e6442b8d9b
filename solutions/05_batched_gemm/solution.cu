// Module 05 solution: the seven functions of the exercise, filled in. The pipeline around them
// (grid, per-head operands, kernels, launches, forward()) is given in
// modules/05_batched_gemm/batched_gemm_kernels.cuh, which also draws the GEMM's tiling.
#include <cstdint>

#include "modules/05_batched_gemm/batched_gemm_kernels.cuh"

namespace attn::m05::ATTN_IMPL {

// ---- The dispatch (README, section 2) ------------------------------------------------------------

// Strided: head (b, h) sits at fixed distances from the base pointers. B's head is shared by
// b_head_group consecutive query heads (GQA).
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmStridedArgs& g, int b,
                                                      int h) {
  return {g.A + b * g.a_batch_stride + h * g.a_head_stride,
          g.B + b * g.b_batch_stride + (h / g.b_head_group) * g.b_head_stride,
          g.C + b * g.c_batch_stride + h * g.c_head_stride,
          g.a_row_stride, g.b_row_stride, g.c_row_stride};
}

// Pointer arrays: entry b · num_heads + h of each device array is head (b, h)'s base pointer.
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmPtrArgs& g, int b, int h) {
  const int64_t i = int64_t(b) * g.num_heads + h;
  return {g.A[i], g.B[i], g.C[i], g.lda, g.ldb, g.ldc};
}

// ---- The GEMM's loads and epilogue (README, section 3) ----------------------------------------

// p[0 .. 4) with the entries at index >= count replaced by `fill`. One 16-byte load when the
// caller knows p is 16-byte aligned (vec4) and all 4 are in range, else up to 4 scalar loads.
// Nothing at index >= count is read.
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4, float fill) {
  if (vec4 && count >= 4) return *reinterpret_cast<const float4*>(p);
  return make_float4(count > 0 ? p[0] : fill, count > 1 ? p[1] : fill, count > 2 ? p[2] : fill,
                     count > 3 ? p[3] : fill);
}

// The micro-tile to C, scaled by alpha: per row, two chunks of 4 columns. Rows >= M and
// columns >= N (the tails of the last tiles) are not written.
__device__ __forceinline__ void store_c_tile(const float (&acc)[kThreadM][kThreadN],
                                             const GemmTile& t, float alpha) {
#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int m = t.m0 + t.row_of(i);
    if (m >= t.M) continue;
    float* c_row = t.op.c + int64_t(m) * t.op.ldc;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = t.n0 + t.col_of(4 * half);
      const float4 out = make_float4(alpha * acc[i][4 * half + 0], alpha * acc[i][4 * half + 1],
                                     alpha * acc[i][4 * half + 2], alpha * acc[i][4 * half + 3]);
      store_chunk(c_row + n, out, t.N - n, t.c_vec4);
    }
  }
}

// ---- The row softmax (README, section 4) ------------------------------------------------------

// Bottom-right causal mask (Problem::first_masked_key): keys [0, visible) are seen.
__device__ __forceinline__ int visible_keys(const RowSoftmaxArgs& s, int query) {
  int visible = s.seq_k;
  if (s.causal) {
    const int64_t last = int64_t(query) + s.seq_k - s.seq_q;  // last visible key, may be < 0
    visible = int(last < 0 ? 0 : last + 1);                    // <= seq_k since query < seq_q
  }
  return visible;
}

// Every lane keeps a running max m and sum l of its chunks (the online softmax of module 00,
// one update per chunk of 4), then the 32 (m, l) pairs are merged with shuffles. Masked (and
// missing) entries load as -inf and add 2^-inf = 0. A lane that has seen nothing has
// m = -inf; m_ref = 0 then keeps (m - m_ref) from being -inf - -inf = NaN.
__device__ __forceinline__ RowStats row_max_and_sum(const float* x, int visible, bool vec4,
                                                    float scale_log2e, int lane) {
  float m = -INFINITY, l = 0.0f;
  for (int c = 4 * lane; c < visible; c += 4 * 32) {
    const float4 v = load_chunk(x + c, visible - c, vec4, -INFINITY);
    const float m_new = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    l = l * exp2f((m - m_ref) * scale_log2e) + exp2f((v.x - m_ref) * scale_log2e) +
        exp2f((v.y - m_ref) * scale_log2e) + exp2f((v.z - m_ref) * scale_log2e) +
        exp2f((v.w - m_ref) * scale_log2e);
    m = m_new;
  }
  // Merge the lanes' (m, l): after the butterfly every lane holds the row's max and sum.
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m_other = __shfl_xor_sync(0xffffffffu, m, offset);
    const float l_other = __shfl_xor_sync(0xffffffffu, l, offset);
    const float m_new = fmaxf(m, m_other);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    l = l * exp2f((m - m_ref) * scale_log2e) + l_other * exp2f((m_other - m_ref) * scale_log2e);
    m = m_new;
  }
  return {m, l};
}

// The whole row, zeros past the visible keys. l >= 1 when the row sees a key (its max
// contributes 2^0); l = 0 when it sees none, and then every p is 0 · 0: the row becomes
// zeros, never 0/0.
__device__ __forceinline__ void write_probabilities(float* x, int seq_k, int visible, bool vec4,
                                                    float scale_log2e, int lane, RowStats row) {
  const float inv_l = row.l > 0.0f ? 1.0f / row.l : 0.0f;
  const float m_ref = row.m == -INFINITY ? 0.0f : row.m;
  for (int c = 4 * lane; c < seq_k; c += 4 * 32) {
    const float4 v = load_chunk(x + c, visible - c, vec4, -INFINITY);
    const float4 p = make_float4(exp2f((v.x - m_ref) * scale_log2e) * inv_l,
                                 exp2f((v.y - m_ref) * scale_log2e) * inv_l,
                                 exp2f((v.z - m_ref) * scale_log2e) * inv_l,
                                 exp2f((v.w - m_ref) * scale_log2e) * inv_l);
    store_chunk(x + c, p, seq_k - c, vec4);
  }
}

}  // namespace attn::m05::ATTN_IMPL
