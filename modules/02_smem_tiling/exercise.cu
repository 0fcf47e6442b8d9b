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
  // TODO(1): copy rows key0 .. key0 + keys - 1 of K or V for head (b, h) into tile[32][D],
  // with all kQueriesPerBlock threads of the block sharing the work (README, section 2).
  //   - Coalesced: the lanes of a warp must read consecutive floats of a row. Number the
  //     tile's kKeysPerTile * D elements e = row * D + col and give element e to thread
  //     e % kQueriesPerBlock (loop e = threadIdx.x, threadIdx.x + kQueriesPerBlock, ...).
  //   - Row `row` of the tile is key key0 + row: src + Problem::offset(s, b, h, key0 + row).
  //   - Store 0.0f where col >= head_dim (q_reg is zero there too, and shared memory starts
  //     out holding garbage, possibly NaN) and where row >= keys (past the last key: never
  //     read global memory there).
  template <int D>
  static __device__ __forceinline__ void load_tile(float (*tile)[D], const float* __restrict__ src,
                                                   const Strides& s, int b, int h, int key0,
                                                   int keys, int head_dim) {
    (void)tile, (void)src, (void)s, (void)b, (void)h, (void)key0, (void)keys, (void)head_dim;
  }

  // TODO(2): pass 1, the row max m over all keys, one K tile at a time (README, sections 2,
  //   3). The keys come in ceil(seq_k / kKeysPerTile) tiles; tile t starts at key0 = t * 32
  //   and holds keys = min(32, seq_k - key0) keys (the last tile may be partial). For each
  //   tile: load_tile into blk.k_tile; wait until the whole tile is in shared memory
  //   (__syncthreads, section 3); for j < keys: m = fmaxf(m, dot<D>(q_reg, blk.k_tile[j]));
  //   and wait until every thread is done reading the tile before the next load overwrites it.
  template <int D>
  static __device__ __forceinline__ float row_max(const Block<D>& blk, const float (&q_reg)[D]) {
    (void)blk, (void)q_reg;
    return -INFINITY;
  }

  // TODO(3): pass 2, l = sum over all keys of expf(s_j - m): the same loop over K tiles,
  //   with the same two barriers (README, sections 2, 3).
  template <int D>
  static __device__ __forceinline__ float row_sum(const Block<D>& blk, const float (&q_reg)[D],
                                                  float m) {
    (void)blk, (void)q_reg, (void)m;
    return 0.0f;
  }

  // TODO(4): pass 3 (README, sections 2, 3), for the output columns col0 .. col0 + kCols - 1
  //   (all of them, unless D = 128: then the kernel calls this twice). Loop over the tiles
  //   again, loading both blk.k_tile and blk.v_tile, and for each key j of the tile add
  //   w = expf(dot<D>(q_reg, blk.k_tile[j]) - m) times blk.v_tile[j][col0 + c] to acc[c], for
  //   c < kCols (fully unrolled: acc must stay in registers). After the loop, a thread with a
  //   query (has_query) writes o_row[col0 + c] = acc[c] * inv_l (inv_l = 1 / l) for the
  //   columns col0 + c < head_dim.
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
