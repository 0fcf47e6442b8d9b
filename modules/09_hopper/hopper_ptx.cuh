// The Hopper instructions module 09 uses, one small wrapper each, with the PTX in the open so
// the lesson and the SASS (HGMMA, UTMALDG, SYNCS) can be read side by side with it.
//   mbarrier.*              a 64-bit barrier object in shared memory: a count of arrivals and
//                           a count of bytes still expected from the copy engine (tx-count);
//                           it completes a phase when both reach zero, and the phase bit flips.
//   cp.async.bulk.tensor.*  TMA: one thread asks the copy engine for a whole tile.
//   wgmma.*                 fences and groups around the asynchronous warpgroup MMA.
//   setmaxnreg              moves registers between warpgroups.
// Everything here needs sm_90 (setmaxnreg and wgmma need sm_90a); hopper_kernel.cuh only
// compiles these bodies for that target.
#pragma once

#include <cstdint>

#include "modules/09_hopper/hopper.h"  // HangReport

namespace attn::m09 {

__device__ inline uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// ---- mbarrier --------------------------------------------------------------------------------

// `arrivals` threads must arrive (plus the expected bytes land) for each phase to complete.
__device__ inline void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the copy engine (the async proxy) and the other
// threads; a __syncthreads() must follow.
__device__ inline void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also announces `bytes` more to come from the copy engine in this phase.
__device__ inline void mbarrier_arrive_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ inline void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// True once the phase with parity `phase` has completed. The barrier starts in phase 0; waiting
// on parity 1 of a fresh barrier returns at once (the phase "before" phase 0 counts as done),
// which is how a producer's first wait on an empty slot passes.
__device__ inline bool mbarrier_try_wait(uint32_t bar, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(phase)
      : "memory");
  return done != 0;
}

__device__ inline uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A wait that cannot hang the machine: a barrier that has not completed after kHangNs is a bug
// (a wrong phase bit, an expect_tx byte count that differs from what the copies bring, a
// missing arrive). The thread writes down which barrier and stops waiting; every other wait
// of the kernel then gives up too (it sees report->hung), so the kernel ends within moments,
// with a wrong output, and the host reads the report (hang_report() in hopper.h).
// Why not __trap()? A trap makes the compiler keep the kernel's entry register budget in the
// consumers (no setmaxnreg), which costs the overlap of the two products.
constexpr uint64_t kHangNs = 10ull * 1000 * 1000 * 1000;
constexpr uint64_t kHangCheckNs = 1000 * 1000;  // look at report->hung once a millisecond

// `gave_up` is a shared-memory word the block reads to stop issuing copies once a wait has
// given up (copies still in flight when the block exits would write to freed shared memory).
__device__ inline void mbarrier_wait(uint32_t bar, uint32_t phase, HangReport* report,
                                     int barrier, int slot, uint32_t gave_up) {
  if (mbarrier_try_wait(bar, phase)) return;
  const uint64_t start = global_timer_ns();
  uint64_t next_check = start + kHangCheckNs;
  while (!mbarrier_try_wait(bar, phase)) {
    const uint64_t now = global_timer_ns();
    if (now < next_check) continue;
    next_check = now + kHangCheckNs;
    volatile HangReport* r = report;
    if (r->hung) {  // another thread has already reported: stop waiting
      asm volatile("st.shared.u32 [%0], 1;" ::"r"(gave_up) : "memory");
      return;
    }
    if (now - start > kHangNs) {
      r->block = static_cast<int>(blockIdx.x);
      r->thread = static_cast<int>(threadIdx.x);
      r->barrier = barrier;
      r->slot = slot;
      r->phase = phase;
      __threadfence_system();
      r->hung = 1;
      __threadfence_system();
      asm volatile("st.shared.u32 [%0], 1;" ::"r"(gave_up) : "memory");
      return;
    }
  }
}

// ---- TMA: cp.async.bulk.tensor ---------------------------------------------------------------

// Copies the box at coordinates (c0 = column, c1 = row, c2 = head, c3 = batch) of the 4-D
// tensor described by `tensor_map` into shared memory at `dst`; the bytes count against the
// barrier `bar`'s expected tx-count. Rows past the tensor's end arrive as zeros (and still
// count as bytes).
__device__ inline void tma_load_4d(uint32_t dst, const void* tensor_map, uint32_t bar, int c0,
                                   int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// A plain bulk copy (no tensor map): `bytes` (a multiple of 16) contiguous bytes from global
// memory at `src` (16-byte aligned) to shared memory at `dst`, counted against `bar` as above.
__device__ inline void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          dst),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
      : "memory");
}

// The other direction: shared memory at `src` to the box at (c0, c1, c2, c3). Rows past the
// tensor's end are not written. Completion is tracked per thread with bulk groups.
__device__ inline void tma_store_4d(const void* tensor_map, uint32_t src, int c0, int c1, int c2,
                                    int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          tensor_map),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ inline void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until the stores have finished reading shared memory (so the block may exit).
__device__ inline void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Adds `bytes` (a multiple of 16) of fp32 values from shared memory at `src` to global memory
// at `dst` (16-byte aligned), element by element: one bulk reduction, done by the copy engine
// and the L2, each addition atomic. Completion is tracked per thread with bulk groups, as for
// tma_store_4d (commit with tma_store_commit).
__device__ inline void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}
// Waits until at most `kPending` of this thread's bulk groups may still read shared memory.
template <int kPending>
__device__ inline void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Ordinary stores to shared memory that the copy engine or the tensor cores read next must be
// ordered before them: each writing thread fences, then the threads synchronise.
__device__ inline void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- wgmma groups ------------------------------------------------------------------------------

// Before the first wgmma that reads or writes accumulator registers the threads changed.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes the wgmmas issued so far into one group.
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most `kPending` groups are still running.
template <int kPending>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous MMA (the registers are "in use" by the tensor cores until wgmma_wait).
template <int kCount>
__device__ inline void fence_registers(float (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// ---- stmatrix ----------------------------------------------------------------------------------

// Stores four 8 x 8 matrices of 16-bit values, transposed, from the warp's registers (sm_90):
// register j of every lane holds matrix j's values in the mma fragment layout (the pair at row
// lane / 4, columns 2 (lane % 4) and + 1), the layout of wgmma's accumulators packed to 16 bits;
// lane i gives the shared-memory address of row i % 8 of matrix i / 8 as stored, that is of
// column i % 8 of the fragment (16 bytes, 16-byte aligned). One instruction instead of 32
// 16-bit stores per lane.
__device__ inline void stmatrix_x4_trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2,
                                         uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                   address),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ---- Matrix descriptors ------------------------------------------------------------------------

// A wgmma operand in shared memory is described by 64 bits:
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4  (LBO)
//   bits 32-45  stride-dimension byte offset >> 4   (SBO)
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle
// With the 128-byte swizzle, an operand is made of 8-row x 128-byte atoms (1024 bytes) whose
// 16-byte chunks are permuted: chunk c of row r sits at chunk c ^ (r % 8). The TMA writes that
// same pattern when its tensor map says CU_TENSOR_MAP_SWIZZLE_128B, so the two agree as long
// as every tile starts on a 1024-byte boundary.
__device__ inline uint64_t matrix_descriptor(uint32_t address, uint32_t leading_bytes,
                                             uint32_t stride_bytes) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

// ---- Programmatic dependent launch ---------------------------------------------------------------
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before
// the kernel ahead of it in the stream has finished: as soon as every block of that kernel has
// run griddepcontrol.launch_dependents (or exited). It must then run griddepcontrol.wait before
// it reads anything the earlier kernel writes: the wait returns once that kernel has finished
// and its writes are visible. Work that does not depend on it (loading other tensors, setting up
// barriers) overlaps the earlier kernel's last blocks and the launch itself.
__device__ inline void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ inline void wait_for_prerequisite_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// ---- Registers and barriers between warps ------------------------------------------------------

template <int kRegisters>
__device__ inline void registers_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ inline void registers_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// bar.sync on a named barrier (1..15; 0 is __syncthreads) for `threads` threads.
__device__ inline void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace attn::m09
