// Module 02 solution: K and V tiles staged in shared memory. Still one thread per query and
// still the three passes of module 01; the only new idea is the tiling. The kernel that calls
// these functions is given in modules/02_smem_tiling/smem_tiling_kernel.cuh.
//
// A block of kQueriesPerBlock = 64 threads owns 64 consecutive queries of one (batch, head).
// The keys are processed kKeysPerTile = 32 at a time: the 64 threads copy a tile of K (in
// pass 3 also of V) from global into shared memory together, wait at a barrier, and then
// every thread runs its own query against the 32 rows of the tile, read from shared memory.
// So each element of K and V is read from global memory once per block and pass, not once
// per thread and pass (README, section 1), and with coalesced loads (section 2).
//
// Each thread keeps its query row, already multiplied by the softmax scale, in registers:
// q_reg[D], where D is head_dim rounded up to 32, 64, 96 or 128 (a template parameter, so
// every index into q_reg is a compile-time constant; a run-time index would force the array
// into local memory). The entries past head_dim are zero, and so are the tile columns past
// head_dim, so the padding adds nothing to a dot product. The passes:
//   1. m = max_j s_j            with s_j = (scale * q_i) . k_j
//   2. l = sum_j exp(s_j - m)
//   3. o_i = (sum_j exp(s_j - m) * v_j) / l
#include "modules/02_smem_tiling/smem_tiling.h"
#include "modules/02_smem_tiling/smem_tiling_kernel.cuh"

namespace attn::m02::ATTN_IMPL {

struct SharedTiles {
  // Copies rows key0 .. key0 + keys - 1 of K or V for head (b, h) into tile, all threads of
  // the block together. Element e of the tile (row e / D, column e % D) is copied by thread
  // e % kQueriesPerBlock: the 32 lanes of a warp copy 32 consecutive floats of one row (D is
  // a multiple of 32), which is one coalesced 128-byte request (README, section 2). Columns
  // past head_dim and rows past the last key become 0: nothing is read out of bounds, and
  // the zero columns cancel q_reg's zero padding.
  //
  // Plain 4-byte loads, not float4: a float4 needs a 16-byte aligned address, which head_dim
  // 59 or a row stride of 21 do not give, and a second code path is not worth it here: the
  // loads are about 1 instruction in 64 of the kernel (README, section 2).
  template <int D>
  static __device__ __forceinline__ void load_tile(float (*tile)[D], const float* __restrict__ src,
                                                   const Strides& s, int b, int h, int key0,
                                                   int keys, int head_dim) {
#pragma unroll 4
    for (int e = threadIdx.x; e < kKeysPerTile * D; e += kQueriesPerBlock) {
      const int row = e / D;
      const int col = e % D;
      float x = 0.0f;
      if (row < keys && col < head_dim) x = src[Problem::offset(s, b, h, key0 + row) + col];
      tile[row][col] = x;
    }
  }

  // Pass 1: the row max over all K tiles.
  template <int D>
  static __device__ __forceinline__ float row_max(const Block<D>& blk, const float (&q_reg)[D]) {
    const int tiles = (blk.seq_k + kKeysPerTile - 1) / kKeysPerTile;
    float m = -INFINITY;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * kKeysPerTile;
      const int keys = min(kKeysPerTile, blk.seq_k - key0);  // the last tile may be partial
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      __syncthreads();  // the tile is complete: every thread's share of it has been stored
      for (int j = 0; j < keys; ++j) m = fmaxf(m, dot<D>(q_reg, blk.k_tile[j]));
      __syncthreads();  // no thread still reads the tile when the next load overwrites it
    }
    return m;
  }

  // Pass 2: the softmax denominator, over all K tiles again.
  template <int D>
  static __device__ __forceinline__ float row_sum(const Block<D>& blk, const float (&q_reg)[D],
                                                  float m) {
    const int tiles = (blk.seq_k + kKeysPerTile - 1) / kKeysPerTile;
    float l = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * kKeysPerTile;
      const int keys = min(kKeysPerTile, blk.seq_k - key0);
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      __syncthreads();
      for (int j = 0; j < keys; ++j) l += expf(dot<D>(q_reg, blk.k_tile[j]) - m);
      __syncthreads();
    }
    return l;
  }

  // Pass 3, output columns col0 .. col0 + kCols - 1: o_i = sum_j exp(s_j - m) v_j / l,
  // accumulated in registers over the K and V tiles.
  template <int D, int kCols>
  static __device__ __forceinline__ void output_sweep(const Block<D>& blk,
                                                      const float (&q_reg)[D], float m,
                                                      float inv_l, int col0, float (&acc)[kCols],
                                                      bool has_query, float* o_row) {
    const int tiles = (blk.seq_k + kKeysPerTile - 1) / kKeysPerTile;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * kKeysPerTile;
      const int keys = min(kKeysPerTile, blk.seq_k - key0);
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      load_tile<D>(blk.v_tile, blk.v, blk.v_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      __syncthreads();
      for (int j = 0; j < keys; ++j) {
        const float w = expf(dot<D>(q_reg, blk.k_tile[j]) - m);
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[c] = fmaf(w, blk.v_tile[j][col0 + c], acc[c]);
      }
      __syncthreads();
    }
    if (has_query) {
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        if (col0 + c < blk.head_dim) o_row[col0 + c] = acc[c] * inv_l;
    }
  }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<SharedTiles>(p, q, k, v, o, stream);
}

}  // namespace attn::m02::ATTN_IMPL
