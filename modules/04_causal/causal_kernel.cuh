// Module 04, given: module 03's FlashAttention forward (fp32) with the places where the causal
// mask goes. The kernel is a template over `Mask`, a struct with four static functions that
// the exercise (exercise.cu) and the solution (solutions/04_causal/solution.cu) provide:
//
//   Mask::visible_end(p, query)       TODO 1: the first key `query` does not see (section 1)
//   Mask::block_keys(p, first_query, queries)  TODO 2: the keys the block needs at all, and
//                                     those every query of the block sees (section 2)
//   Mask::mask_tile(s, kv_start, kv_full, row_end, seq_k)  TODO 3: the element mask (section 2)
//   Mask::inverse_sum(l)              TODO 4: 1 / l, for a row that saw no key too (section 1)
//
// Everything else is module 03's, given from the device layer (common/device/): the tiling
// and the K/V tile loader (fp32_tiles.cuh), the online softmax update and the output store
// (online_softmax.cuh). Module 03's README explains them. Given here too: the heaviest-first
// order of the query blocks (README, section 3).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/fp32_tiles.cuh"
#include "common/device/online_softmax.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/04_causal/causal.h"

namespace attn::m04 {

// The tiling of one head-dim instance D (32, 64, 96 or 128), as in module 03.
template <int D>
using Tiling = device::Fp32Tiling<D, kThreadsPerBlock, kKeysPerTile>;

// The keys of one block of queries: the tile loop runs over [0, end); keys below `full` are
// visible to every query of the block, so tiles that end at or below it need no mask.
struct KeyRange {
  int end;
  int full;
};

template <class Mask, int D, bool vec4>
__global__ void __launch_bounds__(kThreadsPerBlock, Tiling<D>::kMinBlocksPerSM)
    flash_forward_kernel(Problem p, float q_scale, int query_blocks,
                          const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ o) {
  using T = Tiling<D>;
  __shared__ __align__(16) float k_tile[kKeysPerTile * D];
  __shared__ __align__(16) float v_tile[kKeysPerTile * D];

  // Which queries. Non-causal: blockIdx.x enumerates (head, query block) with the query
  // blocks of one head side by side, so blocks that run at the same time read the same K and
  // V (L2 hits). Causal: the query blocks differ in cost (block n sees about n + 1 blocks'
  // worth of keys), so blockIdx.x enumerates (query block, head) from the LAST query block
  // down: the first batch*heads blocks to start are the heaviest ones of every head, and the
  // light ones fill the gaps at the end (README, section 3).
  // One flat grid.x: batch*heads can pass grid.y's limit of 65535.
  const int heads_total = p.batch * p.heads;
  int query_block, bh;
  if (p.causal) {
    query_block = query_blocks - 1 - int(blockIdx.x / unsigned(heads_total));
    bh = int(blockIdx.x % unsigned(heads_total));
  } else {
    query_block = int(blockIdx.x % unsigned(query_blocks));
    bh = int(blockIdx.x / unsigned(query_blocks));
  }
  const int b = bh / p.heads, h = bh % p.heads;
  const int part = int(threadIdx.x) % T::kSplit;  // which slice of the row this thread holds
  const int first_query = query_block * T::kQueries;
  const int i = first_query + int(threadIdx.x) / T::kSplit;
  // Threads past the last query still load tiles and reach every barrier; they compute on
  // a zero query and write nothing.
  const bool has_row = i < p.seq_q;

  const KeyRange keys = Mask::block_keys(p, first_query, T::kQueries);
  const int row_end = Mask::visible_end(p, i);  // the first key this thread's row does not see

  float q_reg[T::kSlice], acc[T::kSlice];  // acc starts at 0
  device::load_query_slice<T>(q_reg, acc, q + Problem::offset(p.q, b, h, has_row ? i : 0),
                              has_row, part, p.head_dim, q_scale);
  float m = -INFINITY;  // running max of the scores seen so far (base-2 units)
  float l = 0.0f;       // running sum of 2^(s_j - m)

  const float* k_head = k + Problem::offset(p.k, b, h, 0);
  const float* v_head = v + Problem::offset(p.v, b, h, 0);

  for (int kv_start = 0; kv_start < keys.end; kv_start += kKeysPerTile) {
    device::load_kv_tile<T, vec4>(k_tile, v_tile, k_head, v_head, p.k.seq, p.v.seq, kv_start,
                                  p.seq_k, p.head_dim);
    __syncthreads();  // the whole tile is in shared memory before anyone reads it

    float s[kKeysPerTile];
    device::tile_scores<T>(s, q_reg, k_tile, part);
    Mask::mask_tile(s, kv_start, keys.full, row_end, p.seq_k);

    // Module 03's online-softmax update, once for the whole tile. A row whose keys so far
    // are all masked keeps m = -inf, l = 0 and acc = 0 (no NaN: see online_softmax.cuh).
    device::online_softmax_update<T>(m, l, acc, s, v_tile, part);
    __syncthreads();  // everyone is done with this tile before the next load overwrites it
  }

  if (has_row)
    device::store_row<T>(o + Problem::offset(p.o, b, h, i), acc, Mask::inverse_sum(l), part,
                         p.head_dim);
}

// The kernel instance for the head dim (d) and for 4- or 16-byte K/V loads (vec4), over the
// grid of device::launch_rows (common/device/fp32_tiles.cuh).
template <class Mask>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  return device::launch_rows<kThreadsPerBlock, kKeysPerTile>(
      p, k, v, [&](auto d, auto vec4, const device::RowGrid& g) {
        flash_forward_kernel<Mask, decltype(d)::value, decltype(vec4)::value>
            <<<g.blocks, kThreadsPerBlock, 0, stream>>>(p, g.q_scale, g.query_blocks, q, k, v, o);
      });
}

}  // namespace attn::m04
