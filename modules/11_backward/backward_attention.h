// Module 11: the backward pass of attention. dQ, dK, dV from the log-sum-exp the forward
// saves, P recomputed tile by tile (common/backward.h states the math and the conventions).
// Two rungs share one interface:
//   fp32 tensors  the readable kernels on the CUDA cores (rows_kernels.cuh): one thread per
//                 key for dK and dV, one thread per query for dQ, nothing shared, no atomics;
//   f16 / bf16    the FlashAttention-2 backward on the tensor cores (backward_kernel.cuh): a
//                 block per K/V tile, dK and dV in registers, dQ added up in fp32 with atomics.
// The exercise (exercise.cu) and the solution (solutions/11_backward/) implement
// BackwardSteps, the math every kernel calls; the grader is tests/test_11_backward.cpp.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m11 {

// What this module handles (given, shared by exercise and solution): head_dim up to 128 in
// every type (a row of dK, dV or dQ is kept in one thread's registers by the fp32 kernels,
// and in a warp's accumulators by the tensor-core kernel).
inline Status supports(const Problem& p) {
  if (p.head_dim > 128)
    return Status::error("module 11 keeps a row of dK and dV in registers: head_dim must be at "
                         "most 128 (got " + std::to_string(p.head_dim) + ")");
  return Status::ok();
}

// Which backward kernel runs: the readable rows kernels (rows_kernels.cuh), the mma.sync
// kernel (backward_kernel.cuh, sm_80 on), the wgmma kernel (backward_hopper.cuh, Hopper from a
// build with sm_90a code), or the fastest this GPU, build and shape have (entry_points.cuh,
// fastest_path). fp32 always runs rows.
enum class Path { rows, tensor_cores, hopper, fastest };

namespace ATTN_IMPL {

// The plain forward (O only) of every type, as `attn run -m 11` without --backward runs it.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);
Status forward16(const Problem& p, const void* q, const void* k, const void* v, void* o,
                 cudaStream_t stream);
// O and the log-sum-exp of each row (lse: fp32 [batch][heads][seq_q], +inf for a row that
// sees no key); tensors in p.dtype.
Status forward_lse(const Problem& p, const void* q, const void* k, const void* v, void* o,
                   float* lse, cudaStream_t stream);
// dQ, dK, dV (common/backward.h), on the fastest kernel.
Status backward(const Problem& p, const void* q, const void* k, const void* v, const void* o,
                const void* dout, const float* lse, void* dq, void* dk, void* dv,
                cudaStream_t stream);
// Whether this GPU and build can run Path::hopper (a Hopper GPU, sm_90a code in the build).
bool hopper_kernel_available();
// The same on a chosen kernel (the grader checks each one the GPU can run).
Status backward_on(Path path, const Problem& p, const void* q, const void* k, const void* v,
                   const void* o, const void* dout, const float* lse, void* dq, void* dk,
                   void* dv, cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m11
