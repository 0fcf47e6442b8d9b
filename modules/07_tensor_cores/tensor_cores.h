// Module 07: attention on the tensor cores. fp16 or bf16 Q, K, V and O in memory; fp32
// accumulators and fp32 softmax statistics inside. One warp-wide instruction,
// mma.sync.m16n8k16, multiplies a 16x16 tile by a 16x8 tile; ldmatrix feeds it from shared
// memory; cp.async streams K and V in the background. The work split is FlashAttention-2's:
// each warp owns whole query rows, so the softmax runs on the accumulator registers.
// The closing rungs (README, section 10) run fp32 tensors on the tensor cores with
// mma.sync.m16n8k8 in TF32 (tf32_kernel.cuh): plain TF32, and 3xTF32 (each operand split into
// a TF32 big and a TF32 small part, three products), which keeps fp32 accuracy.
// The exercise (exercise.cu) and the solution (solutions/07_tensor_cores/solution.cu) both
// implement the warp's tensor-core step (WarpMma, called by tensor_core_kernel.cuh) and
// 3xTF32's split (Tf32Split, called by tf32_kernel.cuh); the grader
// (tests/test_07_tensor_cores.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m07 {

constexpr int kMaxSupportedHeadDim = 128;

// What this module's entry points handle: f16 and bf16 tensors (forward()), f32 tensors
// (forward_3xtf32() and forward_tf32()), head_dim up to 128. Shared by exercise and solution
// (given, not a TODO).
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16 && p.dtype != DType::f32)
    return Status::error("module 07 takes f16, bf16 or f32 tensors, not " +
                         std::string(dtype_name(p.dtype)));
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 07", "a warp's output rows");
}

// The relative L2 error plain TF32 is held to (tests/test_07_tensor_cores.cpp), against the
// double reference on the fp32 inputs. TF32 keeps 10 of fp32's 23 mantissa bits: rounding an
// operand costs up to 2^-11 (about 4.9e-4) of it, and about 2.8e-4 on average. A score
// q . k / sqrt(d) made of such products is off by about 2.8e-4 times the typical size of a
// logit, and the softmax turns an error in a logit into the same relative error in its
// weight; P and V are rounded too. So a correct TF32 kernel lands near 3e-4 on unit-range
// inputs and near 1e-3 with logits of a few units (Q, K entries up to 4): above the fp32
// tolerance of 1e-4 always, and 5e-3 leaves room for logits of that size, not for large ones.
constexpr double kTf32Tolerance = 5e-3;

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`. q, k, v, o are device pointers to p.dtype elements
// (__half for f16, __nv_bfloat16 for bf16) laid out as p's strides say.
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);

// fp32 tensors (p.dtype == f32) on the tensor cores. 3xTF32, fp32 accuracy: the module's fp32
// entry point (`attn run --module 7 --dtype f32`).
Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream);
// Plain TF32: every operand rounded to TF32, one product each; faster, within kTf32Tolerance
// only (the lesson's comparison rung; the benchmark and the grader call it).
Status forward_tf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m07
