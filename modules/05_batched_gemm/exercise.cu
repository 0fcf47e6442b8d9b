// Module 05 exercise: attention unfused, as two batched GEMMs and a row softmax.
// Read modules/05_batched_gemm/README.md first. Run: ./course run 05   Grade: ./course grade 05
//
//   S = scale · Q K^T   gemm_strided (B transposed), S in a device workspace
//   P = softmax(S)      row_softmax, in place, causal mask bottom-right aligned
//   O = P V             gemm_strided
//
// Given (batched_gemm_kernels.cuh): the grid, the tiled GEMM's k loop (shared-memory tiles,
// barriers, the 8 x 8 register micro-tile of every thread), the kernels and launches,
// forward(), the workspace, a 16-byte store helper (store_chunk). Your part is what changes
// from one GEMM call to the next and the softmax, the seven functions below:
//   TODO(1) load_chunk: 4 floats, one 16-byte load where allowed          (README, section 3.4)
//   TODO(2) head_operands, strided: where head (b, h) starts               (section 2)
//   TODO(3) head_operands, pointer arrays: the same from device tables     (section 2)
//   TODO(4) store_c_tile: alpha · acc into C, nothing past M or N          (section 3.4)
//   TODO(5) visible_keys: the row softmax's visible keys (causal)          (section 4)
//   TODO(6) row_max_and_sum: the row's max and sum (online, then warp)     (section 4)
//   TODO(7) write_probabilities: P over S, zeros for masked keys           (section 4)
// t (GemmTile, batched_gemm_kernels.cuh) holds the block's operands t.op, the sizes t.M, t.N,
// t.K, the tile's corner t.m0, t.n0, the thread's place t.tx, t.ty (t.row_of(i), t.col_of(j):
// its micro-tile's rows and columns), and whether rows allow 16-byte accesses (t.a_vec4, ...).
#include <cstdint>

#include "modules/05_batched_gemm/batched_gemm_kernels.cuh"

namespace attn::m05::ATTN_IMPL {

// TODO(1): p[0 .. 4), with the entries at index >= count replaced by `fill`. A 16-byte load
//   is allowed only when the caller says so (vec4) and all 4 entries are in range; otherwise
//   read one float at a time, and never read at an index >= count (it may be past the end of
//   the matrix). README, section 3.4 (hints there).
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4, float fill) {
  (void)p, (void)count, (void)vec4;
  return make_float4(fill, fill, fill, fill);
}

// TODO(2): head (b, h) of a strided batched GEMM: A, B and C of that head, and their row
//   strides (HeadOperands: a, b, c, lda, ldb, ldc). Each operand has a batch stride and a head
//   stride; B's head is shared by g.b_head_group consecutive query heads (GQA). README,
//   section 2, "Batched GEMM: strided or pointer arrays".
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmStridedArgs& g, int b,
                                                      int h) {
  (void)b, (void)h;  // every head computes head (0, 0): replace
  return {g.A, g.B, g.C, g.a_row_stride, g.b_row_stride, g.c_row_stride};
}

// TODO(3): the same from pointer arrays: g.A, g.B, g.C are DEVICE arrays of batch · num_heads
//   pointers, head (b, h) at entry b · num_heads + h (index in 64 bits); the row strides are
//   g.lda, g.ldb, g.ldc. README, section 2.
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmPtrArgs& g, int b, int h) {
  (void)b, (void)h;  // every head computes head (0, 0): replace
  return {g.A[0], g.B[0], g.C[0], g.lda, g.ldb, g.ldc};
}

// TODO(4): the epilogue: this thread's 8 x 8 accumulators, times alpha, into C. Its rows and
//   columns in the tile are t.row_of(i) and t.col_of(j), in groups of 4 columns; store them
//   with store_chunk (batched_gemm_kernels.cuh) and write nothing past row t.M or column t.N.
//   README, section 3.4 (hints there).
__device__ __forceinline__ void store_c_tile(const float (&acc)[kThreadM][kThreadN],
                                             const GemmTile& t, float alpha) {
  (void)acc, (void)t, (void)alpha;
}

// TODO(5): the keys this row sees are [0, visible). Without the mask, all seq_k of them; with
//   s.causal, module 04's bottom-right aligned mask (Problem::first_masked_key), clamped to
//   [0, seq_k]. Mind the sign and the width of the intermediate. README, section 4.
__device__ __forceinline__ int visible_keys(const RowSoftmaxArgs& s, int query) {
  (void)query;
  return s.seq_k;  // replace with the visible keys
}

// TODO(6): the row's max m and sum l = sum_j 2^((s_j - m) · scale_log2e) over the visible keys.
//   Each lane walks its own 16-byte chunks of the row (load_chunk with fill -INFINITY) and
//   keeps a running (m, l), the online update of module 03; then the 32 lanes merge their
//   pairs with __shfl_xor_sync. A lane, or a whole row, may see no key: keep -inf - -inf out
//   of every exponent. README, section 4 (hints there).
__device__ __forceinline__ RowStats row_max_and_sum(const float* x, int visible, bool vec4,
                                                    float scale_log2e, int lane) {
  (void)x, (void)visible, (void)vec4, (void)scale_log2e, (void)lane;
  return {-INFINITY, 0.0f};
}

// TODO(7): pass 2 over the whole row (all seq_k entries): p = 2^((s - m) · scale_log2e) / l for
//   the visible keys, 0 for the masked ones, stored over the scores with store_chunk. A row
//   that sees no key has l = 0: it must become zeros, not 0/0. README, section 4.
__device__ __forceinline__ void write_probabilities(float* x, int seq_k, int visible, bool vec4,
                                                    float scale_log2e, int lane, RowStats row) {
  (void)x, (void)seq_k, (void)visible, (void)vec4, (void)scale_log2e, (void)lane, (void)row;
}

}  // namespace attn::m05::ATTN_IMPL
