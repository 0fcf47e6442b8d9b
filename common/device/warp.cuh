// The device layer: reductions across the lanes of a warp that share one row.
//
// When several lanes of a warp each hold part of a row (a few of its scores, a partial row
// sum), the row's max or sum is reduced in registers with __shfl_xor_sync, no shared memory:
// in step k every lane adds (or maxes) the value of the lane whose index differs in one bit.
// After log2(kLanes) steps every lane of a group of kLanes consecutive lanes (lanes
// kLanes*i .. kLanes*i + kLanes - 1) holds the group's result. XOR masks below kLanes never
// leave the group, so the groups of one warp reduce side by side:
//   kLanes = 4:  a quad, e.g. the 4 lanes holding one row of an mma.sync accumulator;
//   kLanes = 16: a half-warp, e.g. the 16 lanes of a row group of a register-tiled kernel.
// All 32 lanes must call it (full mask).
#pragma once

#include <cuda_runtime.h>

namespace attn::device {

// The max over each group of kLanes consecutive lanes (masks 1, 2, ..., kLanes/2). max is
// exact, so the order does not change the result.
template <int kLanes>
__device__ __forceinline__ float group_max(float x) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "kLanes is a power of two <= 32");
#pragma unroll
  for (int mask = 1; mask < kLanes; mask *= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
  return x;
}

// The sum over each group of kLanes consecutive lanes, as a tree (masks 1, 2, ..., kLanes/2:
// neighbours first): log2(kLanes) additions of similar magnitudes instead of a chain of
// kLanes - 1.
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "kLanes is a power of two <= 32");
#pragma unroll
  for (int mask = 1; mask < kLanes; mask *= 2) x += __shfl_xor_sync(0xffffffffu, x, mask);
  return x;
}

}  // namespace attn::device
