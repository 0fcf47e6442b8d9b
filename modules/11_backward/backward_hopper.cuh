// Module 11, given: the backward on Hopper's warpgroup MMA (wgmma, sm_90a), the tensor-core
// kernel of backward_kernel.cuh moved onto module 09's instructions (README, section 5).
//
// The same work partitioning: a block owns 128 keys of one K/V head, streams the query tiles
// (64 rows of Q, dO, lse, D) through stages of shared memory, and keeps dK and dV in
// registers. Two kernels: flash_bwd_producer_kernel (the module's), where a producer warpgroup
// loads the tiles with TMA and barriers in shared memory hand the stages over, and
// flash_bwd_wgmma_kernel, where all threads copy with cp.async and a block-wide barrier starts
// every step (the kernel for rows TMA cannot read). In both, two math warpgroups of 128
// threads share the tile's work (backward_tile); warpgroup w owns keys 64w .. 64w + 63 and
// runs, per query tile:
//
//     S^T  = K_w Q^T          wgmma m64n64, both operands read from shared memory
//     dP^T = V_w dO^T         wgmma m64n64
//     P^T, dS^T               Steps::probability, Steps::score_gradient on the accumulators
//     dV  += P^T dO           wgmma m64nD, A = P^T from registers (the accumulator layout is
//     dK  += dS^T Q           the A layout), B read from shared memory N-major
//     dQ  += dS K             dS stored [query][key] in shared memory (stmatrix); D = 128: warpgroup w
//                             takes columns 64w .. 64w + 63 over all 128 keys; D = 64: all
//                             columns over its own 64 keys (two partial sums per tile)
//
// Every key block adds its share of dQ into one fp32 buffer. kDqBulk: each warpgroup stores its
// 64 x 64 block of dQ in shared memory and one thread adds the whole block to the buffer with
// one bulk reduction (cp.reduce.async.bulk: the copy engine reads shared memory, the L2 adds);
// else every thread adds its accumulators with float2 atomics, 16 per thread and tile.
//
// The difference from mma.sync: the tensor cores read the shared-memory operands themselves;
// no ldmatrix moves them through registers first, which is what limited the mma.sync kernel
// (its shared-memory pipe, not its tensor cores, was the busiest unit). Tiles are stored in
// the 128-byte swizzle wgmma reads (module 09, section 2): 64-column panels of 128-byte rows,
// 16-byte chunk c of row r at chunk c ^ (r % 8), every panel on a 1024-byte boundary.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only)
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/device/cp_async.cuh"
#include "common/device/math.cuh"
#include "common/problem.h"
#include "modules/09_hopper/hopper_ptx.cuh"
#include "modules/09_hopper/wgmma_ops.cuh"
#include "modules/11_backward/key_blocks.cuh"
#include "modules/11_backward/rows_kernels.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_M11_WGMMA 1  // this compilation pass targets sm_90a: wgmma exists
#else
#define ATTN_M11_WGMMA 0
#endif

namespace attn::m11 {

template <int D_, bool kDqBulk_ = true, bool kDqByColumns_ = D_ == 128,
          bool kProducer_ = kDqBulk_ && (kDqByColumns_ || D_ == 64)>
struct HopperBwdConfig {
  static constexpr int D = D_;
  static constexpr bool kDqBulk = kDqBulk_;
  static constexpr int kKeys = 128, kQueries = 64, kMathThreads = 256;
  // kProducer: a third warpgroup (the first of the block) loads every tile with TMA, and
  // barriers in shared memory hand each stage from it to the two math warpgroups and back
  // (flash_bwd_producer_kernel). Without it, all 256 threads copy with cp.async, and a
  // block-wide barrier starts every step (flash_bwd_wgmma_kernel). The producer kernel takes
  // dQ by bulk reductions, one 64-column block per warpgroup and tile: the default where so.
  static constexpr bool kProducer = kProducer_;
  static constexpr int kThreads = kProducer ? kMathThreads + 128 : kMathThreads;
  static constexpr int kPanels = D / 64;  // 64 16-bit columns = one 128-byte row
  // How the warpgroups share dQ = dS K. By columns (D = 128): warpgroup w takes columns
  // 64w .. 64w + 63 over all 128 keys, one sum per element and tile, after a barrier of both
  // warpgroups (it reads the other warpgroup's dS). By keys (D = 64; at D = 128 a bench_11 rung,
  // measured slower): each multiplies its own 64 keys' dS by all D columns of K, 64 columns at
  // a time, and adds a partial sum; it needs only its own dS, so no barrier between them.
  static constexpr bool kDqByColumns = kDqByColumns_;
  static constexpr int kDqBlocks = kDqByColumns ? 1 : D / 64;  // 64-column blocks a warpgroup adds
  // dS buffers. By columns with the producer, the warpgroups are not in step at a step's start
  // (no block-wide barrier there): one may write the next tile's dS while the other still reads
  // this tile's, so they alternate between two. Otherwise one: without the producer the barrier
  // at the step's start orders them, and by keys a warpgroup reads only the dS it wrote.
  static constexpr int kDsBuffers = kProducer && kDqByColumns ? 2 : 1;
  // Stages of Q, dO, lse2 and D: the producer kernel at D = 64 has room for three (the tiles
  // are half as large), so its copies run two tiles ahead; the cp.async kernel's loop is
  // written for two, and at D = 128 two fill the SM's shared memory.
  static constexpr int kStages = kProducer && D == 64 ? 3 : 2;
  // Byte offsets (from a 1024-byte aligned base): K | V | Q[kStages] | dO[kStages] |
  // dS[kDsBuffers] | lse2[kStages] D[kStages] | with kDqBulk, two 64 x 64 fp32 dQ blocks per
  // warpgroup, used by alternate steps (a step never writes the block that the reduction issued
  // one step before may still be reading) | with kProducer, 2 kStages + 1 8-byte barriers and a
  // flag.
  static constexpr int kTileK = kKeys * D * 2, kTileQ = kQueries * D * 2;
  static constexpr int kTileDS = kQueries * kKeys * 2;
  static constexpr int kK = 0, kV = kTileK, kQ = 2 * kTileK, kdO = kQ + kStages * kTileQ;
  static constexpr int kdS = kdO + kStages * kTileQ;
  static constexpr int kRows = kdS + kDsBuffers * kTileDS;
  static constexpr int kDqBlock = kDqBlockRows * kDqBlockCols * 4;
  static constexpr int kDqStage = kRows + (2 * kStages * kQueries * 4 + 1023) / 1024 * 1024;
  static constexpr int kBarriers = kDqStage + (kDqBulk ? 4 * kDqBlock : 0);
  static constexpr int kSmemBytes = kBarriers + (kProducer ? 64 : 0) + 1024;  // + slack
  // Registers per thread after setmaxnreg (65536 per SM; 128 x 24 + 256 x 240 = 64512).
  static constexpr int kProducerRegisters = 24, kMathRegisters = 240;
  using WithoutProducer = HopperBwdConfig<D_, kDqBulk_, kDqByColumns_, false>;
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(!kDqByColumns || D == 128, "by columns: two 64-column halves");
  static_assert(!kProducer || (kDqBulk && kDqBlocks == 1),
                "the producer kernel adds dQ by bulk reductions, one block per warpgroup");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
  static_assert(8 * (2 * kStages + 1) + 4 <= 64, "the barriers and the flag fit their 64 bytes");
};

// Byte offset of 16-byte chunk `chunk` (of the whole row) of row `row` in a tile of kRows
// rows stored as 64-column panels with the 128-byte swizzle.
template <int kRows>
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
  return (chunk / 8) * (kRows * 128) + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
}

// The first 1024-byte boundary in dynamic shared memory (the swizzle repeats every 1024 bytes),
// found by pointer arithmetic on the __shared__ array itself: a pointer that went through an
// integer would lose its address space, and every access through it would be a generic load or
// store (LD.E / ST.E) instead of LDS / STS.
__device__ __forceinline__ unsigned char* aligned_shared_1024(unsigned char* smem_raw) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return smem_raw + ((1024u - (address & 1023u)) & 1023u);
}

// Rows [0, kRows) of a head slice into a panel tile; rows >= rows_valid and columns >=
// head_dim become zeros (kVec: 16-byte cp.async; else element by element).
template <int kRows, int D, int kThreads, bool kVec>
__device__ __forceinline__ void load_panels(unsigned char* tile, const uint16_t* __restrict__ g,
                                            int64_t ld, int rows_valid, int head_dim) {
  constexpr int kChunks = D / 8;
  for (int i = int(threadIdx.x); i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    unsigned char* dst = tile + panel_offset<kRows>(r, c);
    const uint16_t* src = g + r * ld + c * 8;
    if constexpr (kVec) {
      const bool ok = r < rows_valid && c * 8 < head_dim;
      device::cp_async_16(dst, ok ? src : g, ok);
    } else {
      uint16_t x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = r < rows_valid && c * 8 + e < head_dim ? src[e] : uint16_t(0);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(x);
    }
  }
}

template <class T>
__device__ __forceinline__ uint32_t pack16(float lo, float hi) {
  return m07::Elem<T>::pack(lo, hi);
}

// A matrix descriptor `bytes` further on: its low 14 bits hold the address / 16, and shared
// addresses stay below 256 KB, so adding bytes / 16 never carries out of the field. Cheaper
// than building each descriptor from its address: one addition instead of a shift, a mask and
// an OR on the uniform datapath before every wgmma (README, section 5).
__device__ __forceinline__ uint64_t advance(uint64_t descriptor, uint32_t bytes) {
  return descriptor + (bytes >> 4);
}

// One query tile of warpgroup wg's work (wg = 0, 1: keys 64 wg .. 64 wg + 63 of the block): the
// five products, P^T and dS^T, and the warpgroup's share of dQ added to dq_sum. Both kernels
// below run it; they differ in how the tile reached shared memory and in their barriers:
// kBothBarrier is the barrier of the 256 math threads before dQ by columns (0, __syncthreads,
// in the 256-thread block; a named barrier beside the producer), kOwnBarrier + wg the barrier
// of one warpgroup. s_rows: the lse2[2] | D[2] rows in shared memory; sdS: this tile's dS.
// With kDqBulk, `release()` runs on one thread of the warpgroup once all of it is done with
// the tile's Q, dO, lse2 and D (products complete, loads done).
template <class Steps, class T, class C, bool kCausal, int kBothBarrier, int kOwnBarrier,
          class Walk, class Release>
__device__ __forceinline__ void backward_tile(const RowsArgs<T>& a, const Walk& walk, int step,
                                              int wg, uint32_t s_base, const float* s_rows,
                                              uint32_t sdS, float (&dk)[C::D / 2],
                                              float (&dv)[C::D / 2],
                                              float* __restrict__ dq_sum, Release release) {
  using namespace m09;
  constexpr int D = C::D, BC = C::kKeys, BR = C::kQueries;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const Problem& p = a.p;
  const int warp = (int(threadIdx.x) % 128) / 32;
  const int lane = int(threadIdx.x) % 32, g = lane / 4, tq = lane % 4;
  const int stage = step % C::kStages, h = walk.head(step), q0 = walk.q0(step), k0 = walk.k0;
  const uint32_t sK = s_base + C::kK, sV = s_base + C::kV;
  const uint32_t sQ = s_base + C::kQ + stage * C::kTileQ;
  const uint32_t sdO = s_base + C::kdO + stage * C::kTileQ;
  const float* lse2 = s_rows + stage * BR;  // lse2[kStages] | D[kStages]
  const float* delta = s_rows + (C::kStages + stage) * BR;
  // Accumulator element i of a 64 x N wgmma tile: row 16 warp + g + 8 ((i % 4) / 2) of the
  // warpgroup's 64, column 8 (i / 4) + 2 tq + i % 2 (wgmma_ops.cuh).
  const int key_row = 64 * wg + 16 * warp + g;  // within the block; + 8 for (i % 4) >= 2

  // S^T = K_w Q^T and dP^T = V_w dO^T: both operands K-major (rows of 16-bit values along d);
  // each k16 step is 32 bytes further along the 128-byte rows, a new panel every 4 steps;
  // SBO = 1024 bytes from one 8-row atom to the next (module 09's issue_scores). Warpgroup w's A
  // starts 64 w rows into the K or V panels.
  float s[32], dp[32];
  // Each descriptor is made once and moved along by adding bytes / 16 to its address field.
  auto keys_by_queries = [&](float(&acc)[32], uint32_t keys, uint32_t queries) {
    const uint64_t a0 = matrix_descriptor(keys + wg * 64 * 128, 16, 1024);
    const uint64_t b0 = matrix_descriptor(queries, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t at = (kk / 4), step_bytes = (kk % 4) * 32;
      Wgmma<64>::template a_smem<kBf16>(acc, advance(a0, at * BC * 128 + step_bytes),
                                        advance(b0, at * BR * 128 + step_bytes), kk > 0 ? 1 : 0);
    }
  };
  wgmma_fence();
  keys_by_queries(s, sK, sQ);
  keys_by_queries(dp, sV, sdO);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(s);
  fence_registers(dp);

  // P^T and dS^T on the accumulators (keys as rows, queries as columns); keys past seq_k
  // and, with the mask, keys a query does not see: -inf, so P = 0. (Computing P^T while dP^T
  // still runs, in a commit group of its own, measured slower: docs/worklog/11_backward.md.)
  // With the mask, two copies of the loop: the per-score test only in the copy for the tiles on
  // the diagonal. Under a runtime flag the compiler computes the test's compares for every
  // score of every tile; with the copies the causal kernel measured much faster (README,
  // section 5). Without the mask the test is key >= seq_k alone, two compares per thread that
  // the compiler hoists, and one copy measured faster (a second copy costs code, not work).
  const bool edge = walk.edge(p, q0);
  auto probabilities = [&](auto masked) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int col = 8 * (i / 4) + 2 * tq + (i % 2);
      const int key = k0 + key_row + 8 * ((i % 4) / 2);
      float x = s[i];
      if (decltype(masked)::value && edge &&
          (key >= p.seq_k || (kCausal && key > q0 + col + (p.seq_k - p.seq_q))))
        x = -INFINITY;
      s[i] = Steps::probability(x * a.scale_log2, lse2[col]);
      dp[i] = Steps::score_gradient(s[i], dp[i], delta[col]);
    }
  };
  if (kCausal && !edge)
    probabilities(std::false_type{});
  else
    probabilities(std::true_type{});
  // P^T and dS^T as A fragments: the accumulators of two adjacent 8-column blocks are the A
  // layout of one k16 step (module 09's rescale_and_pack).
  uint32_t pa[BR / 16][4], da[BR / 16][4];
#pragma unroll
  for (int kq = 0; kq < BR / 16; ++kq)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      pa[kq][r] = pack16<T>(s[8 * kq + 2 * r], s[8 * kq + 2 * r + 1]);
      da[kq][r] = pack16<T>(dp[8 * kq + 2 * r], dp[8 * kq + 2 * r + 1]);
    }
  // dS stored [query][key] (the A operand of dQ = dS K, K-major) with stmatrix .trans: the four
  // registers of da[kq] are four 8 x 8 blocks of dS^T (keys g / g + 8 of the warp's 16, queries
  // 16 kq .. + 7 / + 8 .. + 15), and each is stored transposed. Lane i addresses row i % 8 of
  // block i / 8: query 16 kq + 8 (i / 16) + i % 8, the 16-byte chunk of keys 8 (i / 8 % 2) on
  // from the warp's first key. The chunk is the tile's swizzled place (panel_offset): its row
  // is the query, so row % 8 = i % 8, and the steps kq are 2048 bytes apart.
  {
    const int m = lane / 8, q = lane % 8;
    const int chunk = 2 * warp + m % 2;  // 16-byte chunk within the warpgroup's 64-key panel
    uint32_t at = sdS + wg * (BR * 128) + (8 * (m / 2) + q) * 128 + ((chunk ^ q) << 4);
    asm volatile("" : "+r"(at));  // computed per step, not kept live across the key loop
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq)
      stmatrix_x4_trans(at + kq * 2048, da[kq][0], da[kq][1], da[kq][2], da[kq][3]);
  }
  // dV += P^T dO, dK += dS^T Q: B = dO or Q [query][d], N-major (d contiguous): LBO = bytes
  // from one 64-column panel to the next, SBO = 1024 bytes from 8 queries to the next 8,
  // each k16 step 16 rows further (module 09's issue_pv).
  wgmma_fence();
  const uint64_t dO_desc = matrix_descriptor(sdO, BR * 128, 1024);
  const uint64_t q_desc = matrix_descriptor(sQ, BR * 128, 1024);
#pragma unroll
  for (int kq = 0; kq < BR / 16; ++kq)
    Wgmma<D>::template a_regs_b_n_major<kBf16>(dv, pa[kq], advance(dO_desc, kq * 16 * 128), 1);
#pragma unroll
  for (int kq = 0; kq < BR / 16; ++kq)
    Wgmma<D>::template a_regs_b_n_major<kBf16>(dk, da[kq], advance(q_desc, kq * 16 * 128), 1);
  wgmma_commit();

  // dQ += dS K. A = dS [query][key] K-major; B = K [key][d] N-major.
  fence_shared_for_async_proxy();  // the stmatrix stores of dS, read by the tensor cores next
  if constexpr (C::kDqByColumns) {
    named_barrier_sync(kBothBarrier, C::kMathThreads);  // both warpgroups' dS: each takes all 128 keys
  } else {
    named_barrier_sync(kOwnBarrier + wg, 128);  // its own 64 keys only
  }
#pragma unroll
  for (int c = 0; c < C::kDqBlocks; ++c) {  // one 64-column block of dQ at a time
    float dq[32];
    constexpr int kDqSteps = C::kDqByColumns ? BC / 16 : 64 / 16;
    wgmma_fence();
    const uint64_t ds_desc = matrix_descriptor(sdS, 16, 1024);
    const uint32_t k_panel = (C::kDqByColumns ? wg : c) * BC * 128;  // d columns 64 (w or c) ..
    const uint64_t k_desc = matrix_descriptor(sK + k_panel, BC * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kDqSteps; ++kk) {
      const int key = C::kDqByColumns ? 16 * kk : 64 * wg + 16 * kk;  // first key of the step
      Wgmma<64>::template a_smem_b_n_major<kBf16>(
          dq, advance(ds_desc, (key / 64) * BR * 128 + ((key % 64) / 16) * 32),
          advance(k_desc, key * 128), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    // Block c > 0 reuses the buffer of block c at the step before: thread 0 waited for its
    // reduction to read it after issuing block c - 1 (below); the warpgroup learns it here.
    if (C::kDqBulk && C::kDqBlocks > 1 && c > 0) named_barrier_sync(kOwnBarrier + wg, 128);
    wgmma_wait<0>();  // dQ (and, for the first block, dV and dK)
    fence_registers(dq);
    if (c == 0) {
      fence_registers(dv);
      fence_registers(dk);
    }
    const int col0 = 64 * (C::kDqByColumns ? wg : c);
    if constexpr (C::kDqBulk) {
      // The block in the global layout (dq_layout.h), then one bulk reduction of all
      // 16 KB. Rows past seq_q are in the buffer (padded to whole tiles) and add zeros. The
      // buffer: with one block per step, the step's parity; with more, the block's number.
      const int slot = C::kDqBlocks == 1 ? step & 1 : c;
      const uint32_t block = s_base + C::kDqStage + (2 * wg + slot) * C::kDqBlock;
      // dq_block_offset in bytes: the block is 1024-byte aligned and a row is 256 bytes, so
      // the chunk's XOR with r % 8 = g is an XOR of bits 5-7 of the address. The base is
      // hidden from the compiler per step, else it keeps all 16 addresses live across the
      // key loop.
      uint32_t row_base = block + (16 * warp + g) * 256 + 8 * tq + 32 * g;
      asm volatile("" : "+r"(row_base));
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const uint32_t at = (row_base + 2048 * ((i % 4) / 2)) ^ (32 * (i / 4));
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at), "f"(dq[i]), "f"(dq[i + 1])
                     : "memory");
      }
      fence_shared_for_async_proxy();  // the copy engine reads what these stores wrote
      named_barrier_sync(kOwnBarrier + wg, 128);
      if (threadIdx.x % 128 == 0) {
        if (c == 0) release();  // the whole warpgroup is past its last read of the tile
        bulk_reduce_add_f32(dq_sum + a.row(walk.b, h, q0) * D + col0 * 64, block, C::kDqBlock);
        tma_store_commit();
        // The reduction before this one has read its buffer, which is written next: by the
        // next block of this step, or (one block per step) by the next step, each after a
        // barrier.
        bulk_wait_read<1>();
      }
    } else {
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int row = q0 + 16 * warp + g + 8 * ((i % 4) / 2);
        if (row >= p.seq_q) continue;
        float* dst = dq_sum + a.row(walk.b, h, row) * D + col0 + 8 * (i / 4) + 2 * tq;
        atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[i], dq[i + 1]));
      }
    }
  }
}

// The end of both kernels: dK (times the scale) and dV rounded to T, staged in the K and V
// tiles in their panel layout (every product that reads K and V is complete: the caller passed
// a barrier of the math warpgroups).
template <class T, class C>
__device__ __forceinline__ void stage_dk_dv(const RowsArgs<T>& a, int wg, unsigned char* smem,
                                            const float (&dk)[C::D / 2],
                                            const float (&dv)[C::D / 2]) {
  constexpr int D = C::D, BC = C::kKeys;
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int key_row = 64 * wg + 16 * warp + lane / 4, tq = lane % 4;
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int row = key_row + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * tq;
    const int at = panel_offset<BC>(row, col / 8) + (col % 8) * 2;
    *reinterpret_cast<uint32_t*>(smem + C::kK + at) = pack16<T>(dk[i] * a.scale, dk[i + 1] * a.scale);
    *reinterpret_cast<uint32_t*>(smem + C::kV + at) = pack16<T>(dv[i], dv[i + 1]);
  }
}

// The cp.async kernel's end: the staged tiles written out as 16-byte row chunks, rows <
// seq_k, columns < head_dim, by the 256 math threads (`thread` = 0 .. 255).
template <class T, class C, bool kVec, class Walk>
__device__ __forceinline__ void store_dk_dv_tiles(const RowsArgs<T>& a, const Walk& walk, int wg,
                                                  unsigned char* smem, const float (&dk)[C::D / 2],
                                                  const float (&dv)[C::D / 2], int both_barrier,
                                                  int thread) {
  constexpr int D = C::D, BC = C::kKeys;
  stage_dk_dv<T, C>(a, wg, smem, dk, dv);
  m09::named_barrier_sync(both_barrier, C::kMathThreads);
  store_dk_dv<BC, D, C::kMathThreads, kVec>(
      a.p, walk.b, walk.kv_head, walk.k0, smem + C::kK, smem + C::kV,
      [](int row, int chunk) { return panel_offset<BC>(row, chunk); }, a.dk, a.dv, thread);
}

// Without a producer: the 256 threads of both warpgroups copy the next query tile with
// cp.async while this one is computed; a block-wide barrier starts every step.
template <class Steps, class T, class C, bool kCausal, bool kVec>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_bwd_wgmma_kernel(RowsArgs<T> a, int key_blocks, float* __restrict__ dq_sum) {
#if ATTN_M11_WGMMA
  using namespace m09;
  constexpr int D = C::D, BC = C::kKeys, BR = C::kQueries;
  static_assert(!C::kProducer, "flash_bwd_producer_kernel runs the configurations with a producer");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = aligned_shared_1024(smem_raw);
  const Problem& p = a.p;
  const int wg = int(threadIdx.x) / 128;

  const KeyBlockWalk<BC, BR, kCausal> walk(p, blockIdx.x, unsigned(key_blocks));  // key_blocks.cuh
  const int b = walk.b, kvh = walk.kv_head, k0 = walk.k0, steps = walk.steps;
  const uint32_t s_base = shared_address(smem);
  float* const s_rows = reinterpret_cast<float*>(smem + C::kRows);  // lse2[2] | D[2]
  static_assert(C::kStages == 2, "this loop alternates two stages");

  auto load_step = [&](int step, int stage) {
    const int h = walk.head(step), q0 = walk.q0(step);
    load_panels<BR, D, C::kThreads, kVec>(
        smem + C::kQ + stage * C::kTileQ,
        reinterpret_cast<const uint16_t*>(a.q) + Problem::offset(p.q, b, h, q0), p.q.seq,
        p.seq_q - q0, p.head_dim);
    load_panels<BR, D, C::kThreads, kVec>(
        smem + C::kdO + stage * C::kTileQ,
        reinterpret_cast<const uint16_t*>(a.dout) + Problem::offset(p.o, b, h, q0), p.o.seq,
        p.seq_q - q0, p.head_dim);
    const int t = int(threadIdx.x);
    if (t < BR / 2) {
      const int which = t / (BR / 4), piece = t % (BR / 4);  // 0: lse2, 1: D
      const float* src = (which == 0 ? a.lse2 : a.delta) + a.row(b, h, q0) + 4 * piece;
      device::cp_async_16(s_rows + (2 * which + stage) * BR + 4 * piece, src, true);
    }
  };

  load_panels<BC, D, C::kThreads, kVec>(
      smem + C::kK, reinterpret_cast<const uint16_t*>(a.k) + Problem::offset(p.k, b, kvh, k0),
      p.k.seq, p.seq_k - k0, p.head_dim);
  load_panels<BC, D, C::kThreads, kVec>(
      smem + C::kV, reinterpret_cast<const uint16_t*>(a.v) + Problem::offset(p.v, b, kvh, k0),
      p.v.seq, p.seq_k - k0, p.head_dim);
  if (steps > 0) load_step(0, 0);
  device::cp_async_commit();

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;

  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    device::cp_async_wait<0>();
    fence_shared_for_async_proxy();  // cp.async wrote what the tensor cores read next
    __syncthreads();  // everyone's tiles landed; everyone is done with the last step
    if (step + 1 < steps) load_step(step + 1, stage ^ 1);
    device::cp_async_commit();
    backward_tile<Steps, T, C, kCausal, 0, 1>(a, walk, step, wg, s_base, s_rows, s_base + C::kdS,
                                              dk, dv, dq_sum, [] {});
  }
  device::cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with K and V: they stage dK and dV now
  store_dk_dv_tiles<T, C, kVec>(a, walk, wg, smem, dk, dv, 0, int(threadIdx.x));
  if constexpr (C::kDqBulk) {
    // The block's shared memory must outlive the reductions' reads of it; their adds in L2
    // need not be waited for (the grid's writes are complete before the next kernel starts).
    if (threadIdx.x % 128 == 0) bulk_wait_read<0>();
  }
#else
  (void)a, (void)key_blocks, (void)dq_sum;
#endif
}

// The six tensor maps of the producer kernel (built on the host, passed as __grid_constant__
// parameters: the copy engine reads them from the kernel's parameter space). Boxes of 64
// columns x 128 rows for K and V (read) and dK and dV (written), x 64 rows for Q and dO.
struct BwdTensorMaps {
  CUtensorMap q, k, v, dout, dk, dv;
};

// With a producer (module 09's pattern, section 5 of the lesson): warpgroup 0 gives its
// registers away and one of its threads issues every copy with TMA: K and V once, then the
// query tiles into kStages stages (two at D = 128, three at D = 64), each stage's Q, dO, lse2 and
// D as one barrier's bytes. Barriers:
//   kv_full:   K and V have landed (once);
//   full[s]:   stage s's bytes have landed (the copy engine counts them);
//   empty[s]:  both math warpgroups are done with stage s (one arrival each).
// The math warpgroups (1, 2) wait only for the data they read: neither waits for the other's
// copies, and the copies of the next tile start as soon as a stage is free. A wait that gives
// up (a bug in this protocol, hopper_ptx.cuh's mbarrier_wait) ends the kernel with a wrong
// result, which the graders and bench_11's checks report; it never hangs the GPU.
template <class Steps, class T, class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_bwd_producer_kernel(const __grid_constant__ BwdTensorMaps maps, RowsArgs<T> a,
                              int key_blocks, float* __restrict__ dq_sum, m09::HangReport* hang) {
#if ATTN_M11_WGMMA
  using namespace m09;
  constexpr int D = C::D, BC = C::kKeys, BR = C::kQueries;
  static_assert(C::kProducer, "flash_bwd_wgmma_kernel runs the configurations without one");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = aligned_shared_1024(smem_raw);
  const uint32_t s_base = shared_address(smem);
  const uint32_t kv_full = s_base + C::kBarriers;
  auto full = [&](int stage) { return s_base + C::kBarriers + 8 + 8 * stage; };
  auto empty = [&](int stage) { return s_base + C::kBarriers + 8 + 8 * (C::kStages + stage); };
  // Set once a wait gave up (hopper_ptx.cuh).
  const uint32_t gave_up = s_base + C::kBarriers + 8 + 16 * C::kStages;
  auto given_up = [&] {
    uint32_t flag;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(flag) : "r"(gave_up) : "memory");
    return flag != 0;
  };
  const KeyBlockWalk<BC, BR, kCausal> walk(a.p, blockIdx.x, unsigned(key_blocks));  // key_blocks.cuh
  // The same for all 32 lanes, and the compiler can see it: each role below is a branch whole
  // warps take, which setmaxnreg needs.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);

  if (threadIdx.x == 0) {
    asm volatile("st.shared.u32 [%0], 0;" ::"r"(gave_up) : "memory");
    mbarrier_init(kv_full, 1);  // the producer's arrive_expect_bytes
    for (int stage = 0; stage < C::kStages; ++stage) {
      mbarrier_init(full(stage), 1);
      mbarrier_init(empty(stage), 2);  // one thread of each math warpgroup
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    registers_release<C::kProducerRegisters>();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_bytes(kv_full, 2 * C::kTileK);
      for (int panel = 0; panel < C::kPanels; ++panel) {
        tma_load_4d(s_base + C::kK + panel * BC * 128, &maps.k, kv_full, 64 * panel, walk.k0,
                    walk.kv_head, walk.b);
        tma_load_4d(s_base + C::kV + panel * BC * 128, &maps.v, kv_full, 64 * panel, walk.k0,
                    walk.kv_head, walk.b);
      }
      for (int step = 0; step < walk.steps; ++step) {
        const int stage = step % C::kStages;
        // Use n = step / kStages of the stage waits for the end of use n - 1 (a fresh
        // barrier's "previous phase", parity 1, counts as complete: the first kStages pass at
        // once).
        mbarrier_wait(empty(stage), ((step / C::kStages) & 1) ^ 1, hang, 2, stage, gave_up);
        if (given_up()) break;
        const int h = walk.head(step), q0 = walk.q0(step);
        mbarrier_arrive_expect_bytes(full(stage), 2 * C::kTileQ + 2 * BR * 4);
        for (int panel = 0; panel < C::kPanels; ++panel) {
          tma_load_4d(s_base + C::kQ + stage * C::kTileQ + panel * BR * 128, &maps.q,
                      full(stage), 64 * panel, q0, h, walk.b);
          tma_load_4d(s_base + C::kdO + stage * C::kTileQ + panel * BR * 128, &maps.dout,
                      full(stage), 64 * panel, q0, h, walk.b);
        }
        // lse2 and D of the tile's 64 rows (padded arrays: always whole, 16-byte aligned).
        const int64_t row = a.row(walk.b, h, q0);
        bulk_load(s_base + C::kRows + stage * BR * 4, a.lse2 + row, BR * 4, full(stage));
        bulk_load(s_base + C::kRows + (C::kStages + stage) * BR * 4, a.delta + row, BR * 4,
                  full(stage));
      }
      // After a wait gave up, copies may still be in flight: keep the block alive until they
      // have landed (a block's shared memory is freed when its last thread exits).
      if (given_up()) {
        const uint64_t until = global_timer_ns() + 2 * kHangCheckNs;
        while (global_timer_ns() < until) {
        }
      }
    }
    return;
  }

  registers_claim<C::kMathRegisters>();
  const int wg = warpgroup - 1;
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
  // Also without any step: the end stages dK and dV in the K and V tiles, after their copies.
  mbarrier_wait(kv_full, 0, hang, 0, 0, gave_up);
  for (int step = 0; step < walk.steps; ++step) {
    const int stage = step % C::kStages;
    mbarrier_wait(full(stage), (step / C::kStages) & 1, hang, 1, stage, gave_up);
    backward_tile<Steps, T, C, kCausal, 1, 2>(
        a, walk, step, wg, s_base, reinterpret_cast<const float*>(smem + C::kRows),
        s_base + C::kdS + (step % C::kDsBuffers) * C::kTileDS, dk, dv,
        dq_sum, [&] { mbarrier_arrive(empty(stage)); });
  }
  named_barrier_sync(1, C::kMathThreads);  // both warpgroups are done with K and V
  // dK and dV staged in the K and V tiles, then written by one thread with TMA stores, one per
  // 64-column panel (the copy engine skips rows past seq_k and columns past head_dim): a loop
  // of 16-byte stores with their index math by all 256 threads measured slower at short
  // sequences, where this end is a larger share of a block's time.
  stage_dk_dv<T, C>(a, wg, smem, dk, dv);
  fence_shared_for_async_proxy();  // the copy engine reads what these stores wrote
  named_barrier_sync(1, C::kMathThreads);
  if (threadIdx.x == 128) {
    for (int panel = 0; panel < C::kPanels; ++panel) {
      tma_store_4d(&maps.dk, s_base + C::kK + panel * BC * 128, 64 * panel, walk.k0, walk.kv_head,
                   walk.b);
      tma_store_4d(&maps.dv, s_base + C::kV + panel * BC * 128, 64 * panel, walk.k0, walk.kv_head,
                   walk.b);
    }
    tma_store_commit();
  }
  // The block's shared memory outlives the reads of the reductions and stores (not their
  // writes: as above).
  if (threadIdx.x % 128 == 0) bulk_wait_read<0>();
#else
  (void)maps, (void)a, (void)key_blocks, (void)dq_sum, (void)hang;
#endif
}

// Whether this build carries sm_90a code for module 11's wgmma kernel (a build for other GPUs
// compiles it with an empty body).
template <int kUnused = 0>
__global__ void probe_wgmma_code(int* has_code) {
  *has_code = ATTN_M11_WGMMA;
}

}  // namespace attn::m11
