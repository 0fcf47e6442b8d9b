// Module 02, given: one thread per query, three passes over the keys (module 01's math), with
// K and V staged in shared memory a tile at a time. The kernel is a template over `Tiles`, a
// struct with four static functions that the exercise (exercise.cu) and the solution
// (solutions/02_smem_tiling/solution.cu) provide; the kernel calls the three passes, and the
// passes call load_tile:
//
//   Tiles::load_tile<D>(tile, src, strides, b, h, key0, keys, head_dim)
//                                      TODO 1: the block copies one tile of K or V (section 2)
//   Tiles::row_max(blk, q_reg)         TODO 2: pass 1 over the K tiles: m = max_j s_j
//   Tiles::row_sum(blk, q_reg, m)      TODO 3: pass 2 over the K tiles: l = sum_j exp(s_j - m)
//   Tiles::output_sweep(blk, q_reg, m, inv_l, col0, acc, has_query, o_row)
//                                      TODO 4: pass 3 over the K and V tiles, for the output
//                                      columns col0 .. col0 + kCols - 1
//
// Given here: which block owns which queries, the scaled query row in registers, the dot
// product with a row of a shared tile, the output sweeps, the launch. The head-dim dispatch
// is the device layer's (common/device/head_dim.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/device/head_dim.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/02_smem_tiling/smem_tiling.h"

namespace attn::m02 {

// 64 threads = 2 warps per block, one query each. More queries per block would reuse each
// loaded tile more often, but at B=1, H=8, N=1024 blocks of 64 give 128 blocks, enough to put
// work on almost all 132 SMs of an H100; blocks of 128 would leave half of them idle
// (README, section 2).
constexpr int kQueriesPerBlock = 64;
// 32 keys: the K and V tiles take 2 * 32 * D * 4 B = 16 KiB at D = 64 and 32 KiB at D = 128,
// under the 48 KiB that a block can have in static __shared__ arrays (README, section 4).
constexpr int kKeysPerTile = 32;

// Output columns one sweep of pass 3 accumulates. During pass 3 a thread holds q_reg[D] and
// the accumulator acc[] in registers. At D = 128 both whole rows would be 256 floats, more
// than the 255 registers a thread can have, and the compiler would spill to local memory;
// so at D = 128 pass 3 runs twice, over output columns 0..63 and then 64..127 (one extra
// sweep over K, the price of one thread per query). Smaller D take one sweep (section 4).
constexpr int output_columns(int d) { return d <= 96 ? d : 64; }

// scale * (q . k), with the scale already folded into q. Four partial sums, so that four
// independent chains of FMAs are in flight: a single chain makes every FMA wait for the
// previous one (about 4 cycles), and with only a few warps per SM nothing else would fill
// the gap. k_row is a row of a shared-memory tile that every thread of the warp reads at
// the same time (a broadcast, README section 5).
template <int D>
__device__ __forceinline__ float dot(const float (&q_reg)[D], const float* k_row) {
  float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < D; ++c) partial[c % 4] = fmaf(q_reg[c], k_row[c], partial[c % 4]);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// What the passes of one block work on: the keys (seq_k) and the real head dim (head_dim <=
// D), K and V in global memory with their strides, the block's head (b, h), and the block's
// two tiles in shared memory, kKeysPerTile rows of D floats each.
template <int D>
struct Block {
  int seq_k, head_dim;
  const float* k;
  const float* v;
  const Strides& k_strides;
  const Strides& v_strides;
  int b, h;
  float (*k_tile)[D];
  float (*v_tile)[D];
};

template <class Tiles, int D>
__global__ void __launch_bounds__(kQueriesPerBlock)
    smem_tiling_kernel(Problem p, float scale, int query_blocks, const float* __restrict__ q,
                       const float* __restrict__ k, const float* __restrict__ v,
                       float* __restrict__ o) {
  // The tiles, shared by the 64 threads of the block (README, sections 2 and 4).
  __shared__ float k_tile[kKeysPerTile][D];
  __shared__ float v_tile[kKeysPerTile][D];

  // Which queries: the 1-D grid numbers the query blocks of head (0, 0) first, then those of
  // head (0, 1), and so on. gridDim.x may reach 2^31 - 1; a 2-D grid with batch*heads in
  // gridDim.y would stop at 65535 heads. Neighbouring blocks share a head, and so its K and
  // V, which they then find in L2.
  const int block = int(blockIdx.x);
  const int bh = block / query_blocks;
  const int b = bh / p.heads;
  const int h = bh % p.heads;
  const int i = (block % query_blocks) * kQueriesPerBlock + int(threadIdx.x);
  // The last block of a head can have threads past the last query. They must NOT return:
  // they copy their share of every tile and reach every __syncthreads() like the others
  // (README, section 3). They compute on a zero query and skip the final write.
  const bool has_query = i < p.seq_q;

  // The scaled query row in registers (zero past head_dim, and for a thread without query).
  float q_reg[D];
  const float* q_row = q + Problem::offset(p.q, b, h, has_query ? i : 0);
#pragma unroll
  for (int c = 0; c < D; ++c) q_reg[c] = (has_query && c < p.head_dim) ? scale * q_row[c] : 0.0f;

  const Block<D> blk{p.seq_k, p.head_dim, k, v, p.k, p.v, b, h, k_tile, v_tile};
  const float m = Tiles::row_max(blk, q_reg);    // pass 1
  const float l = Tiles::row_sum(blk, q_reg, m);  // pass 2

  // Pass 3: o_i = sum_j exp(s_j - m) v_j / l, accumulated in registers over K and V tiles,
  // in sweeps of kCols output columns (one sweep unless D = 128; see output_columns).
  constexpr int kCols = output_columns(D);
  const float inv_l = 1.0f / l;
  float* o_row = o + Problem::offset(p.o, b, h, has_query ? i : 0);
#pragma unroll
  for (int col0 = 0; col0 < D; col0 += kCols) {  // unrolled: col0 is a constant in each copy
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
    Tiles::output_sweep(blk, q_reg, m, inv_l, col0, acc, has_query, o_row);
  }
}

template <class Tiles, int D>
Status launch_head_dim(const Problem& p, const float* q, const float* k, const float* v,
                       float* o, cudaStream_t stream) {
  const int query_blocks = (p.seq_q + kQueriesPerBlock - 1) / kQueriesPerBlock;
  // One block per (batch, head, query block), all in grid.x. validate() keeps
  // batch*heads*seq_q <= 2^31 - 1, so the block count fits gridDim.x (and an int).
  const int64_t blocks = int64_t(p.batch) * p.heads * query_blocks;
  smem_tiling_kernel<Tiles, D><<<unsigned(blocks), kQueriesPerBlock, 0, stream>>>(
      p, p.softmax_scale(), query_blocks, q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The smallest compiled head dim D (32, 64, 96, 128) that holds head_dim: four kernels.
template <class Tiles>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  return device::dispatch_head_dim<32, 64, 96, 128>(p.head_dim, [&](auto d) {
    return launch_head_dim<Tiles, decltype(d)::value>(p, q, k, v, o, stream);
  });
}

}  // namespace attn::m02
