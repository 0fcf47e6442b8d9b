// The device layer: the fp32 FlashAttention layout of modules 03 and 04 (module 03's README,
// section 3, explains it; module 06 builds on the same idea).
//
// A block of kThreads threads owns consecutive queries of one (batch, head). Each query row
// lives in registers: its query vector q (pre-scaled) and its output accumulator acc. A
// thread holds at most kColumnsPerThread of the row's columns, so a row of head dim D is
// spread over kSplit = D / 64 neighbouring threads (1 or 2; 2 threads of 48 columns for
// D = 96), which add up their partial dot products with warp shuffles. K and V stream
// through shared memory in tiles of kKeys keys (row-major, kKeys x D floats each).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device/head_dim.cuh"
#include "common/device/math.cuh"
#include "common/problem.h"
#include "common/status.h"

namespace attn::device {

// The most head-dim columns one thread holds. A thread keeps its slice of q and acc and the
// tile's kKeys scores in registers: up to 64 + 64 + 16 floats, which fits 2 blocks (8 warps)
// per SM at <= 255 registers per thread, with no spills. Measured on the H100: 32 columns
// and 3 blocks per SM ran d = 128 at 14.8 TFLOP/s, 64 columns at 25.9 (and d = 64 the same,
// 27.3-27.5): half the threads per row, half the shuffles and redundant exp2 per key, and
// each K/V tile shared by twice as many queries (module 03's README, section 3).
constexpr int kColumnsPerThread = 64;

// Everything about one kernel instance that follows from the padded head dim D (the smallest
// of 32, 64, 96, 128 that holds head_dim; the columns past head_dim are zeros), the block
// size and the tile size.
template <int D_, int kThreads_, int kKeys_>
struct Fp32Tiling {
  static constexpr int D = D_;
  static constexpr int kThreads = kThreads_;
  static constexpr int kKeys = kKeys_;  // keys per K/V tile
  static constexpr int kMinBlocksPerSM = 2;  // __launch_bounds__: see kColumnsPerThread
  // Threads per query row: a power of two, so that the threads of a row are aligned groups
  // of lanes within a warp (D = 96 takes 2 threads of 48 columns).
  static constexpr int kSplit = D <= kColumnsPerThread ? 1 : D <= 2 * kColumnsPerThread ? 2 : 4;
  static constexpr int kSlice = D / kSplit;   // head-dim columns one thread owns
  static constexpr int kChunks = kSlice / 4;  // ... as float4 chunks
  static constexpr int kQueries = kThreads / kSplit;  // query rows per block
  static_assert(kSlice % 4 == 0 && kSlice <= kColumnsPerThread, "whole float4 chunks");

  // The head-dim column of element e (0..3) of chunk t of the thread with slice `part`.
  // Chunks are dealt round-robin to the kSplit threads of a query (chunk t*kSplit + part), so
  // at any step the threads of a query read neighbouring 16-byte words of one K/V row:
  // different shared-memory banks, no conflict.
  static __device__ __forceinline__ int column(int t, int part, int e) {
    return 4 * (t * kSplit + part) + e;
  }
};

// This thread's slice of its query row, pre-multiplied by q_scale = softmax_scale * log2(e):
// then q . k is the score in base-2 units and exp2f gives its exponential (math.cuh). Zero
// past head_dim and for a thread without a row (has_row false); acc starts at zero.
template <class T>
__device__ __forceinline__ void load_query_slice(float (&q_reg)[T::kSlice],
                                                 float (&acc)[T::kSlice], const float* q_row,
                                                 bool has_row, int part, int head_dim,
                                                 float q_scale) {
#pragma unroll
  for (int t = 0; t < T::kChunks; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = T::column(t, part, e);
      q_reg[4 * t + e] = (has_row && c < head_dim) ? q_row[c] * q_scale : 0.0f;
      acc[4 * t + e] = 0.0f;
    }
}

// Stages keys [kv_start, kv_start + kKeys) of one head of K and of V in shared memory
// (kKeys x D floats each, row-major). Keys >= seq_k and columns >= head_dim are filled with
// zeros: nothing out of bounds is read, and the padding adds 0 to every dot product. The
// threads of a warp read neighbouring words of a row (coalesced), 16 bytes each when `vec4`
// (rows 16-byte aligned, head_dim % 4 == 0), else 4 bytes.
// Each thread keeps one column for the whole tile and steps down the rows, so its addresses
// are one pointer plus a stride (cheap in registers). When the row's loads do not divide
// the block (D = 96), the few threads left over load nothing.
template <class T, bool vec4>
__device__ __forceinline__ void load_kv_tile(float* k_tile, float* v_tile,
                                             const float* __restrict__ k_head,
                                             const float* __restrict__ v_head, int64_t k_stride,
                                             int64_t v_stride, int kv_start, int seq_k,
                                             int head_dim) {
  constexpr int D = T::D;
  constexpr int kWidth = vec4 ? 4 : 1;                     // floats per load
  constexpr int kLoadsPerRow = D / kWidth;
  constexpr int kRowsPerPass = T::kThreads / kLoadsPerRow;  // >= 1 (D / 4 <= kThreads)
  constexpr int kPasses = (T::kKeys + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kRowsPerPass >= 1, "a block loads at least one row per pass");
  const int row = int(threadIdx.x) / kLoadsPerRow;  // first row of this thread
  const int c = int(threadIdx.x) % kLoadsPerRow * kWidth;
  if (row >= kRowsPerPass) return;  // left over (D = 96); no barrier in here
  const bool column_ok = c < head_dim;
  const float* k_src = k_head + int64_t(kv_start + row) * k_stride + c;
  const float* v_src = v_head + int64_t(kv_start + row) * v_stride + c;
  float* k_dst = k_tile + row * D + c;
  float* v_dst = v_tile + row * D + c;
#pragma unroll
  for (int n = 0; n < kPasses; ++n) {
    const int r = row + n * kRowsPerPass;  // row within the tile
    if (kPasses * kRowsPerPass > T::kKeys && r >= T::kKeys) break;
    const bool ok = column_ok && kv_start + r < seq_k;
    if constexpr (vec4) {
      float4 k_val = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v_val = k_val;
      if (ok) {
        k_val = *reinterpret_cast<const float4*>(k_src);
        v_val = *reinterpret_cast<const float4*>(v_src);
      }
      *reinterpret_cast<float4*>(k_dst) = k_val;
      *reinterpret_cast<float4*>(v_dst) = v_val;
    } else {
      float k_val = 0.0f, v_val = 0.0f;
      if (ok) {
        k_val = *k_src;
        v_val = *v_src;
      }
      *k_dst = k_val;
      *v_dst = v_val;
    }
    k_src += kRowsPerPass * k_stride;
    v_src += kRowsPerPass * v_stride;
    k_dst += kRowsPerPass * D;
    v_dst += kRowsPerPass * D;
  }
}

// s[j] = this query's score against key j of the K tile in shared memory (base-2 units).
// All queries of a warp read the same K row at the same time: a broadcast, no conflict.
template <class T>
__device__ __forceinline__ void tile_scores(float (&s)[T::kKeys], const float (&q_reg)[T::kSlice],
                                            const float* k_tile, int part) {
#pragma unroll
  for (int j = 0; j < T::kKeys; ++j) {
    const float4* k_row = reinterpret_cast<const float4*>(k_tile + j * T::D) + part;
    float dot = 0.0f;
#pragma unroll
    for (int t = 0; t < T::kChunks; ++t) {
      const float4 kc = k_row[t * T::kSplit];
      dot = fmaf(q_reg[4 * t + 0], kc.x, dot);
      dot = fmaf(q_reg[4 * t + 1], kc.y, dot);
      dot = fmaf(q_reg[4 * t + 2], kc.z, dot);
      dot = fmaf(q_reg[4 * t + 3], kc.w, dot);
    }
    // The kSplit threads of a query are neighbouring lanes: sum their partial products
    // (butterfly: afterwards every one of them holds the full score).
#pragma unroll
    for (int lane_mask = 1; lane_mask < T::kSplit; lane_mask *= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, lane_mask);
    s[j] = dot;
  }
}

// ---- Host side: the grid of one launch. ----------------------------------------------------

// One block per (batch, head, query block), all in the 1-D grid.x: batch * heads can pass
// grid.y's limit of 65535, and validate() keeps batch * heads * seq_q <= 2^31 - 1.
struct RowGrid {
  unsigned blocks;   // gridDim.x
  int query_blocks;  // query blocks per (batch, head)
  float q_scale;     // softmax_scale * log2(e), folded into q on loading
};

// Picks the kernel instance and its grid, then calls launch(d, vec4, grid), which performs the
// <<<grid.blocks, kThreads>>> launch of that instance:
//   d      std::integral_constant<int, D>, D = 32, 64, 96 or 128, the smallest that holds
//          head_dim (a template parameter, so that q and acc are register arrays whose every
//          index is known at compile time; the columns past head_dim are zeros);
//   vec4   std::bool_constant, true when 16-byte K/V loads are safe: head_dim % 4 == 0 and
//          every K and V row starts on a 16-byte boundary.
template <int kThreads, int kKeys, class Launch>
Status launch_rows(const Problem& p, const float* k, const float* v, Launch&& launch) {
  return dispatch_head_dim<32, 64, 96, 128>(p.head_dim, [&](auto d) {
    using T = Fp32Tiling<decltype(d)::value, kThreads, kKeys>;
    const int64_t query_blocks = (int64_t(p.seq_q) + T::kQueries - 1) / T::kQueries;
    const int64_t blocks = query_blocks * p.batch * p.heads;  // <= rows <= 2^31 - 1 (validate)
    const RowGrid grid{unsigned(blocks), int(query_blocks), p.softmax_scale() * kLog2e};
    if (p.head_dim % 4 == 0 && rows_aligned16(k, p.k) && rows_aligned16(v, p.v))
      launch(d, std::true_type{}, grid);
    else
      launch(d, std::false_type{}, grid);
    ATTN_CUDA_RETURN(cudaGetLastError());
    return Status::ok();
  });
}

}  // namespace attn::device
