// Module 02 exercise: K and V tiles staged in shared memory, still one thread per query and
// three passes. Read modules/02_smem_tiling/README.md first.
// Run: ./course run 02   Grade: ./course grade 02
//
// Given (modules/02_smem_tiling/smem_tiling_kernel.cuh): the block and query of each thread,
// the query row in registers, the dot product dot<D>(q_reg, row), the sweeps of pass 3, the
// launch. Yours, the four functions of SharedTiles below: copying tiles into shared memory,
// the barriers, the loops over tiles. blk (a Block<D>) holds what the passes work on:
// blk.seq_k and blk.head_dim, blk.k and blk.v (the tensors in global memory) with their
// strides blk.k_strides and blk.v_strides, the block's head (blk.b, blk.h), and its two
// shared tiles blk.k_tile and blk.v_tile (kKeysPerTile = 32 rows of D floats each).
#include "modules/02_smem_tiling/smem_tiling.h"
#include "modules/02_smem_tiling/smem_tiling_kernel.cuh"

namespace attn::m02::ATTN_IMPL {

struct SharedTiles {
  // TODO(1): copy keys key0 .. key0 + keys - 1 of K or V for head (b, h) into tile, all
  //   kQueriesPerBlock threads of the block sharing the work (README, section 2, "The
  //   cooperative, coalesced copy"). The global row of key `key` starts at
  //   src + Problem::offset(s, b, h, key). Ask yourself: which elements does one warp load in
  //   one instruction, and are they neighbours in memory? What must the tile hold where
  //   there is no key, or no column of the head? (Shared memory starts out as garbage.)
  template <int D>
  static __device__ __forceinline__ void load_tile(float (*tile)[D], const float* __restrict__ src,
                                                   const Strides& s, int b, int h, int key0,
                                                   int keys, int head_dim) {
    (void)tile, (void)src, (void)s, (void)b, (void)h, (void)key0, (void)keys, (void)head_dim;
  }

  // TODO(2): pass 1, the row max over all keys, one K tile at a time (README, section 2,
  //   "K and V tiles in shared memory"). The last tile may hold fewer than kKeysPerTile keys.
  //   A tile in shared memory is shared by every thread of the block: when may a thread
  //   start reading it, and when may the next load overwrite it (README, section 3)? The
  //   score of key j of the tile is dot<D>(q_reg, blk.k_tile[j]).
  template <int D>
  static __device__ __forceinline__ float row_max(const Block<D>& blk, const float (&q_reg)[D]) {
    (void)blk, (void)q_reg;
    return -INFINITY;
  }

  // TODO(3): pass 2, the softmax denominator l from the row max m: the same walk over the
  //   K tiles as pass 1 (README, section 2).
  template <int D>
  static __device__ __forceinline__ float row_sum(const Block<D>& blk, const float (&q_reg)[D],
                                                  float m) {
    (void)blk, (void)q_reg, (void)m;
    return 0.0f;
  }

  // TODO(4): pass 3, the output columns col0 .. col0 + kCols - 1 (all of them, unless
  //   D = 128: then the kernel calls this twice; README, section 4). Walk the tiles once more,
  //   now with K and V, and accumulate each key's softmax weight times its V row into acc
  //   (a loop over c with a compile-time bound, unrolled, keeps acc in registers). At the
  //   end, only a thread with a query writes its output, and only the columns the head has
  //   (README, sections 2 and 3).
  template <int D, int kCols>
  static __device__ __forceinline__ void output_sweep(const Block<D>& blk,
                                                      const float (&q_reg)[D], float m,
                                                      float inv_l, int col0, float (&acc)[kCols],
                                                      bool has_query, float* o_row) {
    (void)blk, (void)q_reg, (void)m, (void)inv_l, (void)col0, (void)acc, (void)has_query;
    (void)o_row;
  }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<SharedTiles>(p, q, k, v, o, stream);
}

}  // namespace attn::m02::ATTN_IMPL
