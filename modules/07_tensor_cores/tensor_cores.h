// Module 07: attention on the tensor cores. fp16 or bf16 Q, K, V and O in memory; fp32
// accumulators and fp32 softmax statistics inside. One warp-wide instruction,
// mma.sync.m16n8k16, multiplies a 16x16 tile by a 16x8 tile; ldmatrix feeds it from shared
// memory; cp.async streams K and V in the background. The work split is FlashAttention-2's:
// each warp owns whole query rows, so the softmax runs on the accumulator registers.
// The exercise (exercise.cu) and the solution (solutions/07_tensor_cores/solution.cu) both
// implement the warp's tensor-core step (WarpMma in tensor_core_kernel.cuh); the grader
// (tests/test_07_tensor_cores.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m07 {

constexpr int kMaxSupportedHeadDim = 128;

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Status::error("module 07 runs on the tensor cores and takes f16 or bf16 tensors "
                         "(--dtype bf16 or --dtype f16), not " + std::string(dtype_name(p.dtype)));
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 07", "a warp's output rows");
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`. q, k, v, o are device pointers to p.dtype elements
// (__half for f16, __nv_bfloat16 for bf16) laid out as p's strides say.
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m07
