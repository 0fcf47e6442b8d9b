// Module 09: attention the way Hopper (sm_90a) runs it. fp16 or bf16 Q, K, V and O in
// memory, fp32 accumulators and softmax statistics inside, as in module 07; what changes is
// how the work reaches the tensor cores:
//   - wgmma.mma_async: a warpgroup (4 warps, 128 threads) multiplies a 64-row tile, operands
//     read straight from shared memory through 64-bit matrix descriptors;
//   - TMA (cp.async.bulk.tensor): one thread copies a whole 2-D tile from a tensor map, and
//     the copy engine signals an mbarrier when the bytes have landed;
//   - warp specialization: a producer warp only issues copies, two consumer warpgroups only
//     compute, and full/empty barriers hand the K/V ring stages between them.
// The exercise (exercise.cu) and the solution (solutions/09_hopper/solution.cu) implement the
// parts that carry these ideas (HopperSteps in hopper_kernel.cuh); the grader
// (tests/test_09_hopper.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m09 {

// What this module's entry points handle: f16 and bf16 tensors (forward()), f32 tensors
// (forward_3xtf32()), head_dim 64 or 128. Shared by exercise and solution (given, not a TODO).
// The GPU (compute capability 9.x) and the 16-byte alignment of the tensors are checked by
// the entry points, which see the device and the pointers.
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16 && p.dtype != DType::f32)
    return Status::error("module 09 runs on Hopper's tensor cores and takes f16, bf16 or f32 "
                         "tensors (--dtype bf16, f16 or f32), not " +
                         std::string(dtype_name(p.dtype)));
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("module 09 supports head_dim 64 or 128 (its shared-memory tiles are "
                         "whole 128-byte swizzle panels); got " + std::to_string(p.head_dim) +
                         ": run module 07 for other head dims");
  return Status::ok();
}

// ---- A barrier wait that never completes ----------------------------------------------------
// Every mbarrier wait of the kernel gives up after 10 s (hopper_ptx.cuh, mbarrier_wait): the
// first thread to give up writes what it waited for into this record, in mapped host memory;
// the others then stop waiting too, the kernel ends with a wrong output, and hang_report()
// turns the record into one line for the grader.
struct HangReport {
  int hung;        // 1 once some thread gave up
  int block;       // blockIdx.x of that thread
  int thread;      // threadIdx.x
  int barrier;     // which barrier (Barrier in hopper_kernel.cuh)
  int slot;        // ring slot (0 for Q)
  unsigned phase;  // the parity it waited for
};

inline const char* barrier_name(int b) {
  static const char* const names[] = {"Q full", "K full",  "K empty",  "V full",
                                      "V empty", "Q empty", "work full"};
  return b >= 0 && b < 7 ? names[b] : "unknown";
}

// The record (one per process, allocated on first use; nullptr if the allocation failed).
inline HangReport* hang_report_buffer() {
  static HangReport* buffer = [] {
    HangReport* b = nullptr;
    if (cudaHostAlloc(&b, sizeof(HangReport), cudaHostAllocMapped) != cudaSuccess) return b;
    *b = HangReport{};
    return b;
  }();
  return buffer;
}

// "" while no wait of the last launch has given up; else one line saying which and why.
inline std::string hang_report() {
  HangReport* r = hang_report_buffer();
  if (!r || !r->hung) return "";
  return "module 09: thread " + std::to_string(r->thread) + " of block " +
         std::to_string(r->block) + " waited more than 10 s on the " +
         barrier_name(r->barrier) + " barrier of slot " + std::to_string(r->slot) +
         " for phase parity " + std::to_string(r->phase) +
         " and gave up, so the kernel ended with a wrong output: the barrier never completed "
         "(a wrong phase bit, an arrive_expect_bytes count that differs from the bytes the "
         "copies bring, or a missing arrive)";
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`. q, k, v, o are device pointers to p.dtype elements
// (__half for f16, __nv_bfloat16 for bf16) laid out as p's strides say. Refuses (an error
// Status, nothing launched) on a GPU that is not compute capability 9.x, on a build without
// the sm_90a target, and on tensors whose rows are not 16-byte aligned (TMA's rule).
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);

// fp32 tensors (p.dtype == f32) on the tensor cores as 3xTF32 (tf32_kernel.cuh), fp32
// accuracy: the module's fp32 entry point (`attn run --module 9 --dtype f32`). The same
// refusals as forward(), for rows of 4-byte elements.
Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m09
