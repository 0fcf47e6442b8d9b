// Module 05 exercise: attention unfused, as two batched GEMMs and a row softmax.
// Read modules/05_batched_gemm/README.md first. Run: ./course run 05   Grade: ./course grade 05
//
//   S = scale · Q K^T   gemm_strided (B transposed), S in a device workspace
//   P = softmax(S)      row_softmax, in place, causal mask bottom-right aligned
//   O = P V             gemm_strided
//
// Given (batched_gemm_kernels.cuh): the dispatch (grid, per-head pointers from strides or
// pointer arrays), the kernels and launches, forward(), the workspace, a 16-byte store helper
// (store_chunk) and one of the two tile loaders (load_tile_direct). Your part is the tiled
// GEMM and the softmax, the seven functions below:
//   TODO(1) load_chunk: 4 floats with one 16-byte load where allowed      (README, section 3)
//   TODO(2) load_tile_transposed: stage a tile k-major in shared memory    (section 3)
//   TODO(3) gemm_k_loop: tiles, barriers, the 8 x 8 outer products         (section 3)
//   TODO(4) store_c_tile: alpha · acc into C, nothing past M or N          (section 3)
//   TODO(5) visible_keys: the row softmax's visible keys (causal)          (section 4)
//   TODO(6) row_max_and_sum: the row's max and sum (online, then warp)     (section 4)
//   TODO(7) write_probabilities: P over S, zeros for masked keys           (section 4)
// The tiling (batched_gemm.h): a block of 128 threads computes a 128 x 64 tile of C, walking K
// in steps of 16; every thread accumulates an 8 x 8 micro-tile of C in registers. t (GemmTile)
// holds the block's operands t.op, the sizes t.M, t.N, t.K, the tile's corner t.m0, t.n0, the
// thread's place t.tx, t.ty, and whether rows allow 16-byte accesses (t.a_vec4, ...).
#include <cstdint>

#include "modules/05_batched_gemm/batched_gemm_kernels.cuh"

namespace attn::m05::ATTN_IMPL {

// TODO(1): p[0 .. 4) with the entries at index >= count replaced by `fill` (default 0). When
//   vec4 and count >= 4, one 16-byte load: return *reinterpret_cast<const float4*>(p);
//   else the entries 0..3 one by one: p[e] where e < count, `fill` where e >= count (never
//   read p[e] there: it may be past the end of the matrix). README, section 3.
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4, float fill) {
  (void)p, (void)count, (void)vec4;
  return make_float4(fill, fill, fill, fill);
}

// TODO(2): tile[k][r] = src[(r0 + r) · ld + c0 + k] for the kRows x kTileK block at row r0,
//   column c0 of a rows x cols matrix. Warp w stages the columns k = 4w .. 4w + 3; lane l the
//   rows r = l + 32 · i for i = 0 .. kRows / 32 - 1 (#pragma unroll):
//   v = the chunk src[(r0 + r) · ld + c0 + k .. + 3] via load_chunk (count: the columns left
//       in the matrix, cols - (c0 + k)), or zeros when r0 + r >= rows (do not read there);
//   tile[k + 0][r] = v.x, tile[k + 1][r] = v.y, tile[k + 2][r] = v.z, tile[k + 3][r] = v.w.
//   Compute the row offset in 64 bits: int64_t(r0 + r) * ld. load_tile_direct
//   (batched_gemm_kernels.cuh) is the same idea without the transpose. README, section 3.
template <int kRows>
__device__ __forceinline__ void load_tile_transposed(float (*tile)[kRows], const float* src,
                                                     int64_t ld, int rows, int cols, int r0,
                                                     int c0, bool vec4) {
  const int k = 4 * (int(threadIdx.x) / 32);  // this warp's first column of the tile
  const int lane = int(threadIdx.x) % 32;
  (void)tile, (void)src, (void)ld, (void)rows, (void)cols, (void)r0, (void)c0, (void)vec4;
  (void)k, (void)lane;
}

// TODO(3): the k loop (README, section 3). For every k0 (given), one step of K:
//   a. stage the tiles: load_tile_transposed<kTileM>(a_tile, t.op.a, t.op.lda, t.M, t.K, t.m0,
//      k0, t.a_vec4) for A; for B, load_tile_transposed<kTileN>(b_tile, t.op.b, t.op.ldb, t.N,
//      t.K, t.n0, k0, t.b_vec4) when kBTransposed (if constexpr), else
//      load_tile_direct(b_tile, t.op.b, t.op.ldb, t.K, t.N, k0, t.n0, t.b_vec4);
//   b. a barrier: every thread's part of both tiles is in shared memory before anyone reads;
//   c. for k = 0 .. kTileK - 1 (#pragma unroll): this thread's 8 values of A's column k,
//      a_tile[k][t.row_of(i)] for i < 8, and 8 values of B's row k, b_tile[k][t.col_of(j)]
//      for j < 8, each as two 16-byte loads (rows ty·4 .. +3 and 64 + ty·4 .. +3; columns
//      tx·4 .. +3 and 32 + tx·4 .. +3), then acc[i][j] += a[i] · b[j] (fmaf) for all 64;
//   d. a barrier: nobody starts the next loads while others still read these tiles.
template <bool kBTransposed>
__device__ __forceinline__ void gemm_k_loop(float (*a_tile)[kTileM], float (*b_tile)[kTileN],
                                            const GemmTile& t, float alpha) {
  float acc[kThreadM][kThreadN];  // this thread's 8 x 8 micro-tile of C
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < t.K; k0 += kTileK) {
    (void)a_tile, (void)b_tile;  // TODO(3) a-d
  }
  store_c_tile(acc, t, alpha);  // TODO(4)
}

// TODO(4): the micro-tile to C (README, section 3): for each i < 8 with row
//   m = t.m0 + t.row_of(i) < t.M, and each half (columns n = t.n0 + t.col_of(4 · half), 4 of
//   them), store alpha · acc[i][4 · half .. + 3] at t.op.c + int64_t(m) · t.op.ldc + n with
//   store_chunk (count t.N - n: the columns left; t.c_vec4 says whether 16-byte stores are
//   allowed).
__device__ __forceinline__ void store_c_tile(const float (&acc)[kThreadM][kThreadN],
                                             const GemmTile& t, float alpha) {
  (void)acc, (void)t, (void)alpha;
}

// TODO(5): the keys this row sees are [0, visible). Without the mask, all seq_k of them.
//   With s.causal, the mask is bottom-right aligned (module 04, Problem::first_masked_key):
//   query i sees key j iff j <= i + seq_k - seq_q; clamp to [0, seq_k] (with seq_q > seq_k
//   the first queries see nothing). Compute i + seq_k - seq_q in 64 bits. README, section 4.
__device__ __forceinline__ int visible_keys(const RowSoftmaxArgs& s, int query) {
  (void)query;
  return s.seq_k;  // replace with the visible keys
}

// TODO(6): the row's max m and sum l = sum_j 2^((s_j - m) · scale_log2e) (README, section 4).
//   a. each lane walks its chunks: c = 4 · lane, c + 128, ... < visible; load the chunk with
//      load_chunk(x + c, visible - c, vec4, -INFINITY) (masked keys add 2^-inf = 0), and
//      update its running (m, l), starting from (-inf, 0), once per chunk:
//        m_new = max(m, chunk max),  m_ref = (m_new == -inf ? 0 : m_new),
//        l = l · 2^((m - m_ref) · scale_log2e) + sum of the chunk's 2^((s - m_ref) · scale_log2e),
//        m = m_new;
//   b. merge the 32 lanes' (m, l) with __shfl_xor_sync(0xffffffff, .., offset) for
//      offset = 16, 8, 4, 2, 1, by the same rule (each side rescaled to the larger max).
//   m_ref keeps -inf - -inf = NaN out: a lane, or a whole row, may see no key at all.
__device__ __forceinline__ RowStats row_max_and_sum(const float* x, int visible, bool vec4,
                                                    float scale_log2e, int lane) {
  (void)x, (void)visible, (void)vec4, (void)scale_log2e, (void)lane;
  return {-INFINITY, 0.0f};
}

// TODO(7): pass 2, the whole row (README, section 4): for c = 4 · lane, c + 128, ... < seq_k,
//   p = 2^((s - m_ref) · scale_log2e) / l for the visible keys (load them as in pass 1: the
//   masked ones come back -inf and give 0), stored over the scores with
//   store_chunk(x + c, p, seq_k - c, vec4). A row that sees no key has l = 0: write zeros,
//   not 0/0 (use 1/l only when l > 0).
__device__ __forceinline__ void write_probabilities(float* x, int seq_k, int visible, bool vec4,
                                                    float scale_log2e, int lane, RowStats row) {
  (void)x, (void)seq_k, (void)visible, (void)vec4, (void)scale_log2e, (void)lane, (void)row;
}

}  // namespace attn::m05::ATTN_IMPL
