// The device layer: asynchronous global -> shared copies (cp.async, sm_80+).
//
// cp.async copies global memory into shared memory without passing through registers
// (LDGSTS in SASS): a thread issues the copy and goes on computing while it is in flight,
// which is how a kernel overlaps loading tile t + 1 with the math of tile t. The protocol:
//   cp_async_16 / cp_async_4   start copies (each thread its own)
//   cp_async_commit            closes this thread's copies issued since the last commit into
//                              one "group"
//   cp_async_wait<n>           waits until at most n of this thread's groups are still in
//                              flight (groups complete in the order they were committed);
//                              cp_async_wait_all waits for every copy
// A wait makes a thread's *own* copies visible to it; other threads' copies become visible
// only after a barrier (__syncthreads) that follows their waits.
//
// Before sm_80 there is no cp.async: the copies below fall back to an ordinary load and
// store (synchronous, so commit and wait have nothing to do). The fp32 modules (up to 06)
// run on sm_70 and sm_75 through that path; the 16-bit tensor-core modules need sm_80 for
// their mma.sync anyway.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace attn::device {

// The 32-bit shared-window address of a generic pointer into shared memory: what cp.async
// and ldmatrix take.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from gmem to smem (both 16-byte aligned). valid = false reads nothing and
// writes 16 zero bytes: rows past the sequence and columns past head_dim become zeros, which
// add nothing to a dot product (gmem must still be a valid address: pass the tile's base).
// .cg caches in L2 only, not L1: a K or V tile is read once per block from L2, where the
// blocks of one head share it.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)),
               "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4*>(smem) =
      valid ? *static_cast<const uint4*>(gmem) : make_uint4(0u, 0u, 0u, 0u);
#endif
}

// Copies 4 bytes (both 4-byte aligned), for rows that are not 16-byte aligned; valid = false
// writes a zero. .cg exists only for 16-byte copies: a 4-byte copy goes through L1 (.ca).
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)),
               "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
#else
  *static_cast<uint32_t*>(smem) = valid ? *static_cast<const uint32_t*>(gmem) : 0u;
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Waits for all of this thread's copies, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace attn::device
