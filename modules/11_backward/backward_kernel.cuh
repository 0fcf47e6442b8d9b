// Module 11, given: the FlashAttention-2 backward on the tensor cores (f16/bf16, mma.sync as
// in module 07), calling BackwardSteps (the exercise) for the math of each score.
//
// Work partitioning (README, section 3): a block owns kKeys consecutive keys of one K/V head.
// dK and dV of those keys live in the warps' registers for the whole kernel, so they are
// written once, without atomics; for grouped K/V heads the block visits every query head of
// its group and the sums over the group come for free. The block streams the query tiles
// (kQueries rows of Q, dO, lse, D) through shared memory, double buffered, and per query tile
// runs five products:
//
//     S^T  = K Q^T            scores, keys as rows
//     P^T  = 2^(S^T scale log2(e) - lse2)   recomputed: Steps::probability
//     dP^T = V dO^T
//     dS^T = P^T o (dP^T - D)                Steps::score_gradient
//     dV  += P^T dO           P^T and dS^T are stored (16-bit) in shared memory: each warp
//     dK  += dS^T Q           needs the queries other warps computed
//     dQ  += dS K             added to an fp32 buffer with atomics (other blocks add their
//                             keys' share to the same rows at the same time)
//
// Each warp owns 32 keys in every product with keys as rows, and halves of the other side
// (32 of the 64 queries in S^T and dP^T, D/2 columns of dV and dK): two 16-row m-tiles, so
// every ldmatrix fragment of the other operand feeds two mma. Keys as rows (S^T rather than
// S) keeps dV and dK, the products that stay in registers, in the layout of the accumulators.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/cp_async.cuh"
#include "common/device/math.cuh"
#include "common/problem.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/11_backward/key_blocks.cuh"
#include "modules/11_backward/rows_kernels.cuh"

namespace attn::m11 {

using m07::Elem;
using m07::ldmatrix_x4;
using m07::ldmatrix_x4_trans;
using m07::smem_u32;

// One configuration: D the padded head dim (64 or 128), kKeys keys per block (one warp per 16:
// warps in pairs, each pair owning 32 keys), kQueries rows per query tile (64: two halves of
// 32), kMinBlocks for __launch_bounds__. In the dQ product the warps split the kQueries x D
// tile into two 32-row halves x kDqCols columns. kSwizzle is module 07's XOR swizzle of 16-byte
// chunks (m07::load_tile and m07::chunk_addr read it).
template <int D_, int kKeys_, int kQueries_, int kMinBlocks_>
struct BwdConfig {
  static constexpr int D = D_;
  static constexpr int kKeys = kKeys_;
  static constexpr int kQueries = kQueries_;
  static constexpr int kWarps = kKeys / 16;
  // dQ's kQueries x D tile: two 32-row halves x kWarps / 2 column slices.
  static constexpr int kDqCols = D / (kWarps / 2);
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kSwizzle = true;
  // Shared memory, 16-bit elements: K | V | Q[2] | dO[2] | dS^T | P^T, then fp32 lse2[2] | D[2].
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKeys * D;
  static constexpr int kQ = kV + kKeys * D;
  static constexpr int kdO = kQ + 2 * kQueries * D;
  static constexpr int kdS = kdO + 2 * kQueries * D;
  static constexpr int kP = kdS + kKeys * kQueries;
  static constexpr int kElems16 = kP + kKeys * kQueries;
  static constexpr int kSmemBytes = 2 * kElems16 + 4 * 4 * kQueries;
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kQueries == 64, "the dS^T tile is stored as rows of 64 (one swizzle period)");
  static_assert(kKeys % 32 == 0 && kDqCols % 16 == 0, "warps in pairs of 32 keys; whole dQ slices");
};

// Byte address of logical 16-byte chunk `chunk` of row `row` of a swizzled tile of rows of
// kRow elements.
template <int kRow>
__device__ __forceinline__ uint32_t tile_addr(uint32_t tile, int row, int chunk) {
  return tile + 2 * m07::chunk_offset<kRow, true>(row, chunk);
}

template <class Steps, class T, class C, bool kCausal, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_bwd_kernel(RowsArgs<T> a, int key_blocks, float* __restrict__ dq_sum) {
  constexpr int D = C::D, BC = C::kKeys, BR = C::kQueries;
  extern __shared__ __align__(128) uint16_t smem[];
  const Problem& p = a.p;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int g = lane / 4, tq = lane % 4;

  const KeyBlockWalk<BC, BR, kCausal> walk(p, blockIdx.x, unsigned(key_blocks));  // key_blocks.cuh
  const int b = walk.b, kvh = walk.kv_head, k0 = walk.k0, steps = walk.steps;

  const uint32_t s_base = smem_u32(smem);
  const uint32_t sK = s_base + 2 * C::kK, sV = s_base + 2 * C::kV, sdS = s_base + 2 * C::kdS;
  float* const s_rows = reinterpret_cast<float*>(smem + C::kElems16);  // lse2[2] | D[2]

  auto load_step = [&](int step, int stage) {
    const int h = walk.head(step), q0 = walk.q0(step);
    const uint16_t* qg = reinterpret_cast<const uint16_t*>(a.q) + Problem::offset(p.q, b, h, q0);
    const uint16_t* og = reinterpret_cast<const uint16_t*>(a.dout) + Problem::offset(p.o, b, h, q0);
    m07::load_tile<C, BR, kVec>(smem + C::kQ + stage * BR * D, qg, p.q.seq, p.seq_q - q0, p.head_dim);
    m07::load_tile<C, BR, kVec>(smem + C::kdO + stage * BR * D, og, p.o.seq, p.seq_q - q0,
                                p.head_dim);
    // lse2 and D of the tile's rows: padded arrays, whole 16-byte pieces, always in bounds.
    const int t = int(threadIdx.x);
    if (t < BR / 2) {
      const int which = t / (BR / 4), piece = t % (BR / 4);  // 0: lse2, 1: D
      const float* src = (which == 0 ? a.lse2 : a.delta) + a.row(b, h, q0) + 4 * piece;
      device::cp_async_16(s_rows + (2 * which + stage) * BR + 4 * piece, src, true);
    }
  };

  // K and V of the block's keys (rows past seq_k are zeros), with the first query tile.
  {
    const uint16_t* kg = reinterpret_cast<const uint16_t*>(a.k) + Problem::offset(p.k, b, kvh, k0);
    const uint16_t* vg = reinterpret_cast<const uint16_t*>(a.v) + Problem::offset(p.v, b, kvh, k0);
    m07::load_tile<C, BC, kVec>(smem + C::kK, kg, p.k.seq, p.seq_k - k0, p.head_dim);
    m07::load_tile<C, BC, kVec>(smem + C::kV, vg, p.v.seq, p.seq_k - k0, p.head_dim);
    if (steps > 0) load_step(0, 0);
    device::cp_async_commit();
  }

  // Warp w's tiles: keys 32 (w / 2) .. + 31 of the block (two 16-row m-tiles) in every product
  // with keys as rows; x queries 32 (w % 2) .. + 31 of the tile in S^T and dP^T, x columns
  // (D / 2) (w % 2) .. + D / 2 - 1 of d in dV and dK. dQ: queries 32 (w % 2) .. + 31 x kDqCols
  // columns from (w / 2) kDqCols.
  constexpr int kHalfD = D / 2;
  const int key_row = 32 * (warp / 2);  // the warp's first key, within the block
  const int half = warp % 2;
  float dk[2][kHalfD / 8][4], dv[2][kHalfD / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int n = 0; n < kHalfD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mt][n][e] = dv[mt][n][e] = 0.0f;

  // x^T = A_w B^T for the warp's 32 keys x 32 queries: A = 32 rows of K or V (ldmatrix, as Q
  // in module 07's Q K^T), B^T's columns are rows of Q or dO (plain ldmatrix, as K there).
  // Every fragment feeds two mma (2 m-tiles x 2 n-blocks per ldmatrix pair).
  auto keys_by_queries = [&](float (&x)[2][4][4], uint32_t sA, uint32_t sB) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int n = 0; n < 4; ++n) x[mt][n][0] = x[mt][n][1] = x[mt][n][2] = x[mt][n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t fa[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(fa[mt], tile_addr<D>(sA, key_row + 16 * mt + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t fb[4];
        ldmatrix_x4(fb, tile_addr<D>(sB, 32 * half + 16 * np + 8 * (lane / 16) + lane % 8,
                                     2 * kk + (lane / 8) % 2));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Elem<T>::mma(x[mt][2 * np], fa[mt], fb[0], fb[1]);
          Elem<T>::mma(x[mt][2 * np + 1], fa[mt], fb[2], fb[3]);
        }
      }
    }
  };
  // acc += A B for the warp's 32 keys x D / 2 columns: A = a [key][query] tile (P^T or dS^T,
  // plain ldmatrix), B = the [query][d] tile (dO or Q, ldmatrix.trans, as V in P V).
  auto keys_by_d = [&](float (&acc)[2][kHalfD / 8][4], uint32_t sA, uint32_t sB) {
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq) {
      uint32_t fa[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(fa[mt], tile_addr<BR>(sA, key_row + 16 * mt + lane % 16, 2 * kq + lane / 16));
#pragma unroll
      for (int dp = 0; dp < kHalfD / 16; ++dp) {
        uint32_t fb[4];
        ldmatrix_x4_trans(fb, tile_addr<D>(sB, 16 * kq + lane % 16,
                                           kHalfD / 8 * half + 2 * dp + lane / 16));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Elem<T>::mma(acc[mt][2 * dp], fa[mt], fb[0], fb[1]);
          Elem<T>::mma(acc[mt][2 * dp + 1], fa[mt], fb[2], fb[3]);
        }
      }
    }
  };

  const uint32_t sP = s_base + 2 * C::kP;
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int h = walk.head(step), q0 = walk.q0(step);
    device::cp_async_wait<0>();  // this step's tiles have landed (own copies) ...
    __syncthreads();  // ... everyone's; everyone is done with the last step: its P^T, dS^T and
                      // its Q and dO stage, which dV and dK read after barrier A
    if (step + 1 < steps) load_step(step + 1, stage ^ 1);  // lands while this step computes
    device::cp_async_commit();
    const uint32_t sQ = s_base + 2 * (C::kQ + stage * BR * D);
    const uint32_t sdO = s_base + 2 * (C::kdO + stage * BR * D);
    const float* lse2 = s_rows + stage * BR;
    const float* delta = s_rows + (2 + stage) * BR;

    // S^T and dP^T. Lane (g, tq) holds keys k0 + key_row + 16 mt + g (+ 8 for e >= 2) x
    // queries q0 + 32 half + 8n + 2tq (+ 1 for odd e).
    float s[2][4][4], dpt[2][4][4];
    keys_by_queries(s, sK, sQ);
    keys_by_queries(dpt, sV, sdO);

    // Keys past seq_k (zero rows) and, with the mask, keys a query does not see: -inf, so
    // P = 0 there. Only tiles on the diagonal or at the end of the keys need the test.
    const bool edge = walk.edge(p, q0);
    if (edge) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + key_row + 16 * mt + g + 8 * (e >> 1);
            const int query = q0 + 32 * half + 8 * n + 2 * tq + (e & 1);
            if (key >= p.seq_k || (kCausal && key > query + (p.seq_k - p.seq_q)))
              s[mt][n][e] = -INFINITY;
          }
    }
    // P^T (recomputed) and dS^T = P^T o (dP^T - D), both stored 16-bit for the products that
    // need other warps' queries: [key][query] rows of 64, swizzled.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        float pr[4], ds[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 32 * half + 8 * n + 2 * tq + (e & 1);
          pr[e] = Steps::probability(s[mt][n][e] * a.scale_log2, lse2[col]);
          ds[e] = Steps::score_gradient(pr[e], dpt[mt][n][e], delta[col]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int at = m07::chunk_offset<BR, true>(key_row + 16 * mt + g + 8 * r, 4 * half + n) + 2 * tq;
          *reinterpret_cast<uint32_t*>(smem + C::kP + at) = Elem<T>::pack(pr[2 * r], pr[2 * r + 1]);
          *reinterpret_cast<uint32_t*>(smem + C::kdS + at) = Elem<T>::pack(ds[2 * r], ds[2 * r + 1]);
        }
      }
    __syncthreads();  // barrier A: every warp's P^T and dS^T are stored

    keys_by_d(dv, sP, sdO);  // dV += P^T dO
    keys_by_d(dk, sdS, sQ);  // dK += dS^T Q (scaled once, at the end)

    // dQ += dS K: A = dS[query][key], stored transposed as dS^T[key][query]: ldmatrix.trans
    // of matrix i (lanes 8i .. 8i + 7) at keys 16kk + 8 (i / 2) + lane % 8, query chunk
    // (16-query block) * 2 + i % 2 gives a0..a3. B = K [key][d] (ldmatrix.trans).
    constexpr int kCols = C::kDqCols;
    const int col0 = (warp / 2) * kCols;
    float acc[2][kCols / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n)
        acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t da[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4_trans(da[mt], tile_addr<BR>(sdS, 16 * kk + 8 * (lane / 16) + lane % 8,
                                                4 * half + 2 * mt + (lane / 8) % 2));
#pragma unroll
      for (int dp = 0; dp < kCols / 16; ++dp) {
        uint32_t kb[4];
        ldmatrix_x4_trans(kb, tile_addr<D>(sK, 16 * kk + lane % 16, col0 / 8 + 2 * dp + lane / 16));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Elem<T>::mma(acc[mt][2 * dp], da[mt], kb[0], kb[1]);
          Elem<T>::mma(acc[mt][2 * dp + 1], da[mt], kb[2], kb[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int row = q0 + 32 * half + 16 * mt + g;  // and row + 8
      float* dq_rows = dq_sum + a.row(b, h, row) * D + col0;
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (row + 8 * r >= p.seq_q) continue;
          float* dst = dq_rows + 8 * r * D + 8 * n + 2 * tq;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          // sm_90 adds two neighbouring floats in one atomic: half the operations.
          atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[mt][n][2 * r], acc[mt][n][2 * r + 1]));
#else
          atomicAdd(dst, acc[mt][n][2 * r]);
          atomicAdd(dst + 1, acc[mt][n][2 * r + 1]);
#endif
        }
    }
  }
  device::cp_async_wait<0>();
  __syncthreads();  // every warp is done with K and V: they stage dK and dV now

  // Epilogue: dK (times the scale) and dV rounded to T, staged in the K and V tiles, then
  // written out as 16-byte row chunks (coalesced), rows < seq_k, columns < head_dim.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int n = 0; n < kHalfD / 8; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int at = m07::chunk_offset<D, true>(key_row + 16 * mt + g + 8 * r,
                                                  kHalfD / 8 * half + n) + 2 * tq;
        *reinterpret_cast<uint32_t*>(smem + C::kK + at) =
            Elem<T>::pack(dk[mt][n][2 * r] * a.scale, dk[mt][n][2 * r + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(smem + C::kV + at) =
            Elem<T>::pack(dv[mt][n][2 * r], dv[mt][n][2 * r + 1]);
      }
  __syncthreads();
  store_dk_dv<BC, D, C::kThreads, kVec>(
      p, b, kvh, k0, reinterpret_cast<const unsigned char*>(smem + C::kK),
      reinterpret_cast<const unsigned char*>(smem + C::kV),
      [](int row, int chunk) { return 2 * m07::chunk_offset<D, true>(row, chunk); }, a.dk, a.dv);
}

}  // namespace attn::m11
