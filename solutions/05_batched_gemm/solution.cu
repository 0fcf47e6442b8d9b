// Module 05 solution: the seven functions of the exercise, filled in. The pipeline around them
// (grid, per-head operands, kernels, launches, forward()) is given in
// modules/05_batched_gemm/batched_gemm_kernels.cuh, which also draws the GEMM's tiling.
#include <cstdint>

#include "modules/05_batched_gemm/batched_gemm_kernels.cuh"

namespace attn::m05::ATTN_IMPL {

// ---- The GEMM (README, section 3) -----------------------------------------------------------

// p[0 .. 4) with the entries at index >= count replaced by `fill`. One 16-byte load when the
// caller knows p is 16-byte aligned (vec4) and all 4 are in range, else up to 4 scalar loads.
// Nothing at index >= count is read.
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4, float fill) {
  if (vec4 && count >= 4) return *reinterpret_cast<const float4*>(p);
  return make_float4(count > 0 ? p[0] : fill, count > 1 ? p[1] : fill, count > 2 ? p[2] : fill,
                     count > 3 ? p[3] : fill);
}

// tile[k][r] = src[(r0 + r) · ld + c0 + k] for the kRows x kTileK block starting at row r0,
// column c0 of a rows x cols row-major matrix; zeros outside it. Used for A (rows = m) and for
// B stored N x K (Q K^T: rows = n): the k's are the contiguous columns of src, and the tile
// turns them into its rows (k-major), so that the inner loop reads 4 consecutive m (or n)
// with one 16-byte load. Warp w stages the 4 columns c0 + 4w .. +3 (one 16-byte chunk per row),
// lane l the rows l, l + 32, ...: each of its 4 stores per chunk writes 32 consecutive words of
// one tile row (32 banks, no conflict). The global reads are 16 bytes from each of 32 rows;
// the 4 warps together read 64 contiguous bytes per row, the other half of each 32-byte sector
// comes from L1.
template <int kRows>
__device__ __forceinline__ void load_tile_transposed(float (*tile)[kRows], const float* src,
                                                     int64_t ld, int rows, int cols, int r0,
                                                     int c0, bool vec4) {
  const int k = 4 * (int(threadIdx.x) / 32);  // this warp's first column of the tile
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int i = 0; i < kRows / 32; ++i) {
    const int r = lane + 32 * i;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < rows) v = load_chunk(src + int64_t(r0 + r) * ld + c0 + k, cols - (c0 + k), vec4);
    tile[k + 0][r] = v.x;
    tile[k + 1][r] = v.y;
    tile[k + 2][r] = v.z;
    tile[k + 3][r] = v.w;
  }
}

// Per k0: stage both tiles, barrier, 16 rank-1 updates of the 8 x 8 accumulators, barrier.
template <bool kBTransposed>
__device__ __forceinline__ void gemm_k_loop(float (*a_tile)[kTileM], float (*b_tile)[kTileN],
                                            const GemmTile& t, float alpha) {
  float acc[kThreadM][kThreadN];  // this thread's micro-tile of C, in 64 registers
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) acc[i][j] = 0.0f;

  const HeadOperands& op = t.op;
  for (int k0 = 0; k0 < t.K; k0 += kTileK) {
    load_tile_transposed<kTileM>(a_tile, op.a, op.lda, t.M, t.K, t.m0, k0, t.a_vec4);
    if constexpr (kBTransposed)
      load_tile_transposed<kTileN>(b_tile, op.b, op.ldb, t.N, t.K, t.n0, k0, t.b_vec4);
    else
      load_tile_direct(b_tile, op.b, op.ldb, t.K, t.N, k0, t.n0, t.b_vec4);
    __syncthreads();  // both tiles are complete before anyone reads them

#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      // 8 values of A's column k and 8 of B's row k (4 loads of 16 bytes), then their outer
      // product: 64 independent FMAs.
      const float4 a_lo = *reinterpret_cast<const float4*>(&a_tile[k][t.ty * 4]);
      const float4 a_hi = *reinterpret_cast<const float4*>(&a_tile[k][kTileM / 2 + t.ty * 4]);
      const float4 b_lo = *reinterpret_cast<const float4*>(&b_tile[k][t.tx * 4]);
      const float4 b_hi = *reinterpret_cast<const float4*>(&b_tile[k][kTileN / 2 + t.tx * 4]);
      const float a_frag[kThreadM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w,
                                      a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float b_frag[kThreadN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w,
                                      b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // everyone is done with the tiles before the next loads overwrite them
  }
  store_c_tile(acc, t, alpha);
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
