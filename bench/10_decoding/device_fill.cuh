// Random 16-bit tensors filled on the device (no trip through the host: bench_10's caches
// reach 8.6 GB), for bench_10 and decode_loop_10.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/problem.h"

namespace attn::bench10 {

// x[i] = a hash of (i, seed) mapped to [-1, 1), rounded to bf16 or f16.
__global__ void fill_random16(uint16_t* x, int64_t n, uint32_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    const float u = float(h >> 8) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
    x[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(u)) : __half_as_ushort(__float2half_rn(u));
  }
}

inline void fill_random(uint16_t* x, int64_t n, uint32_t seed, DType t) {
  if (n == 0) return;
  fill_random16<<<1024, 256>>>(x, n, seed, t == DType::bf16);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace attn::bench10
