// Module 03, given: the FlashAttention forward in fp32, everything except the online softmax.
// The kernel is a template over `Softmax`, a struct with five static functions that the
// exercise (exercise.cu) and the solution (solutions/03_online_softmax/solution.cu) provide
// (README, sections 1 and 3):
//
//   Softmax::update_max(m, tile_max, alpha)   TODO 1: the new running max; returns m_ref,
//                                             the max the tile's exponentials are measured from
//   Softmax::rescale(l, acc, alpha)           TODO 2: l and acc moved onto the new max
//   Softmax::accumulate_tile<T>(l, acc, s, v_tile, part, m_ref)
//                                             TODO 3: the tile's keys added to l and acc
//   Softmax::finish_tile()                    TODO 4: before the next load overwrites the tiles
//   Softmax::write_output<T>(o_row, acc, l, part, head_dim)   TODO 5: o = acc / l
//
// The layout (common/device/fp32_tiles.cuh, README section 3): a block of kThreadsPerBlock
// threads owns consecutive queries of one (batch, head); a query row is spread over
// T::kSplit neighbouring threads, each holding T::kSlice columns of q and acc in registers.
// Per tile of kKeysPerTile keys:
//
//     K, V tile -> shared memory          device::load_kv_tile, then a barrier
//     s_j = q . k_j (base-2 units)        device::tile_scores
//     tile_max = max_j s_j                device::tile_max
//     m_ref = update_max(m, tile_max, alpha); rescale(l, acc, alpha)         (yours)
//     l += 2^(s_j - m_ref), acc += 2^(s_j - m_ref) v_j   accumulate_tile    (yours)
//     finish_tile()                                                           (yours)
//
// and after the last tile write_output (yours). From module 04 on, the three middle steps
// are given as device::online_softmax_update (common/device/online_softmax.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/fp32_tiles.cuh"
#include "common/device/online_softmax.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/03_online_softmax/online_softmax.h"

namespace attn::m03 {

// The tiling of one head-dim instance D (32, 64, 96 or 128): T::kSplit, T::kSlice,
// T::kChunks, T::kQueries and T::column(t, part, e), the head-dim column of element e of
// float4 chunk t of the thread with slice `part`.
template <int D>
using Tiling = device::Fp32Tiling<D, kThreadsPerBlock, kKeysPerTile>;

template <class Softmax, int D, bool vec4>
__global__ void __launch_bounds__(kThreadsPerBlock, Tiling<D>::kMinBlocksPerSM)
    flash_forward_kernel(Problem p, float q_scale, int query_blocks,
                         const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, float* __restrict__ o) {
  using T = Tiling<D>;
  __shared__ __align__(16) float k_tile[kKeysPerTile * D];
  __shared__ __align__(16) float v_tile[kKeysPerTile * D];

  // Which queries: blockIdx.x enumerates (head, query block) with the query blocks of one
  // head side by side, so blocks that run at the same time read the same K and V (L2 hits).
  // One flat grid.x: batch*heads can pass grid.y's limit of 65535.
  const int query_block = int(blockIdx.x % unsigned(query_blocks));
  const int bh = int(blockIdx.x / unsigned(query_blocks));
  const int b = bh / p.heads, h = bh % p.heads;
  const int part = int(threadIdx.x) % T::kSplit;  // which slice of the row this thread holds
  const int i = query_block * T::kQueries + int(threadIdx.x) / T::kSplit;
  // Threads past the last query still load tiles and reach every barrier; they compute on
  // a zero query and write nothing.
  const bool has_row = i < p.seq_q;

  float q_reg[T::kSlice], acc[T::kSlice];  // acc starts at 0
  device::load_query_slice<T>(q_reg, acc, q + Problem::offset(p.q, b, h, has_row ? i : 0),
                              has_row, part, p.head_dim, q_scale);
  float m = -INFINITY;  // running max of the scores seen so far (base-2 units)
  float l = 0.0f;       // running sum of 2^(s_j - m)

  const float* k_head = k + Problem::offset(p.k, b, h, 0);
  const float* v_head = v + Problem::offset(p.v, b, h, 0);

  for (int kv_start = 0; kv_start < p.seq_k; kv_start += kKeysPerTile) {
    device::load_kv_tile<T, vec4>(k_tile, v_tile, k_head, v_head, p.k.seq, p.v.seq, kv_start,
                                  p.seq_k, p.head_dim);
    __syncthreads();  // the whole tile is in shared memory before anyone reads it

    float s[kKeysPerTile];
    device::tile_scores<T>(s, q_reg, k_tile, part);
    if (kv_start + kKeysPerTile > p.seq_k) {  // the last tile sticks out past the last key
#pragma unroll
      for (int j = 0; j < kKeysPerTile; ++j)
        if (kv_start + j >= p.seq_k) s[j] = -INFINITY;
    }

    // The online-softmax update, once for the whole tile (README, section 1).
    float alpha;
    const float m_ref = Softmax::update_max(m, device::tile_max(s), alpha);
    Softmax::rescale(l, acc, alpha);
    Softmax::template accumulate_tile<T>(l, acc, s, v_tile, part, m_ref);
    Softmax::finish_tile();
  }

  if (has_row)
    Softmax::template write_output<T>(o + Problem::offset(p.o, b, h, i), acc, l, part,
                                      p.head_dim);
}

// The kernel instance for the head dim (d) and for 4- or 16-byte K/V loads (vec4), over the
// grid of device::launch_rows (common/device/fp32_tiles.cuh).
template <class Softmax>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  return device::launch_rows<kThreadsPerBlock, kKeysPerTile>(
      p, k, v, [&](auto d, auto vec4, const device::RowGrid& g) {
        flash_forward_kernel<Softmax, decltype(d)::value, decltype(vec4)::value>
            <<<g.blocks, kThreadsPerBlock, 0, stream>>>(p, g.q_scale, g.query_blocks, q, k, v, o);
      });
}

}  // namespace attn::m03
