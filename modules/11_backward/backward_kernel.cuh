// Module 11, given: the FlashAttention-2 backward on the tensor cores (f16/bf16, mma.sync as
// in module 07), calling BackwardSteps (the exercise) for the math of each score.
//
// Work partitioning (README, section 3): a block owns kKeys consecutive keys of one K/V head;
// each warp owns 16 of them. dK and dV of those keys live in the warp's registers for the
// whole kernel, so they are written once, without atomics; for grouped K/V heads the block
// visits every query head of its group and the sums over the group come for free. The block
// streams the query tiles (kQueries rows of Q, dO, lse, D) through shared memory, double
// buffered, and per query tile each warp runs five products:
//
//     S^T  = K_w Q^T          scores, keys as rows (the warp's 16 x kQueries)
//     P^T  = 2^(S^T scale log2(e) - lse2)   recomputed: Steps::probability
//     dV_w += P^T dO          P^T straight from the accumulators (C layout = A layout)
//     dP^T = V_w dO^T
//     dS^T = P^T o (dP^T - D)                Steps::score_gradient
//     dK_w += dS^T Q
//     dQ  += dS K             every warp's dS^T goes through shared memory; each warp then
//                             takes 16 query rows x all d and adds them to an fp32 buffer
//                             with atomics (other blocks add their keys' share to the same
//                             rows at the same time)
//
// Computing S^T (keys as rows) rather than S is what makes dV and dK products with the
// accumulators as the A operand; only dQ needs the transpose, through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/cp_async.cuh"
#include "common/device/math.cuh"
#include "common/problem.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/11_backward/rows_kernels.cuh"

namespace attn::m11 {

using m07::Elem;
using m07::ldmatrix_x4;
using m07::ldmatrix_x4_trans;
using m07::smem_u32;

// One configuration: D the padded head dim (64 or 128), kKeys keys per block (16 per warp),
// kQueries rows per query tile, kMinBlocks for __launch_bounds__. In the dQ product the warps
// split the kQueries x D tile into 16-row slices x kDqCols columns. kSwizzle is module 07's XOR
// swizzle of 16-byte chunks (m07::load_tile and m07::chunk_addr read it).
template <int D_, int kKeys_, int kQueries_, int kMinBlocks_>
struct BwdConfig {
  static constexpr int D = D_;
  static constexpr int kKeys = kKeys_;
  static constexpr int kQueries = kQueries_;
  static constexpr int kWarps = kKeys / 16;
  static constexpr int kDqCols = D * (kQueries / 16) / kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kSwizzle = true;
  // Shared memory, 16-bit elements: K | V | Q[2] | dO[2] | dS^T, then fp32 lse2[2] | D[2].
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKeys * D;
  static constexpr int kQ = kV + kKeys * D;
  static constexpr int kdO = kQ + 2 * kQueries * D;
  static constexpr int kdS = kdO + 2 * kQueries * D;
  static constexpr int kElems16 = kdS + kKeys * kQueries;
  static constexpr int kSmemBytes = 2 * kElems16 + 4 * 4 * kQueries;
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kQueries == 64, "the dS^T tile is stored as rows of 64 (one swizzle period)");
  static_assert(kDqCols % 16 == 0 && kWarps % (kQueries / 16) == 0, "whole dQ slices per warp");
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

  // Blocks: (key block, batch x K/V head), K/V heads fastest; key blocks first to last, so
  // with the mask (where key block 0 is seen by every query) the heaviest blocks start first.
  const unsigned bg_count = unsigned(p.batch) * unsigned(p.kv_heads);
  const int key_block = int(blockIdx.x / bg_count);
  const int bg = int(blockIdx.x % bg_count);
  const int b = bg / p.kv_heads, kvh = bg % p.kv_heads;
  const int k0 = key_block * BC;
  const int group = p.heads / p.kv_heads;

  // The query tiles that see any of this block's keys: all, or (mask) from the first query
  // that sees key k0.
  const int q_tiles = (p.seq_q + BR - 1) / BR;
  const int first_tile = kCausal ? first_query(p, k0) / BR : 0;
  const int tiles_per_head = q_tiles - first_tile;
  const int steps = group * (tiles_per_head > 0 ? tiles_per_head : 0);
  // Step -> (query head, query tile). The blocks of one head run at the same time and all add
  // into the same dQ rows; starting each key block at a different query tile (rotated by its
  // index) spreads their atomics over different rows instead of queueing them on one.
  auto step_head = [&](int step) { return kvh * group + step / tiles_per_head; };
  auto step_q0 = [&](int step) {
    return (first_tile + (step % tiles_per_head + key_block) % tiles_per_head) * BR;
  };

  const uint32_t s_base = smem_u32(smem);
  const uint32_t sK = s_base + 2 * C::kK, sV = s_base + 2 * C::kV, sdS = s_base + 2 * C::kdS;
  float* const s_rows = reinterpret_cast<float*>(smem + C::kElems16);  // lse2[2] | D[2]

  auto load_step = [&](int step, int stage) {
    const int h = step_head(step), q0 = step_q0(step);
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

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  const int key_row = 16 * warp;  // the warp's first key, within the block
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int h = step_head(step), q0 = step_q0(step);
    if (step + 1 < steps) load_step(step + 1, stage ^ 1);  // read last before step's barrier A
    device::cp_async_commit();
    device::cp_async_wait<1>();  // this step's tiles have landed (own copies) ...
    __syncthreads();             // ... everyone's; everyone is done with the last dS^T
    const uint32_t sQ = s_base + 2 * (C::kQ + stage * BR * D);
    const uint32_t sdO = s_base + 2 * (C::kdO + stage * BR * D);
    const float* lse2 = s_rows + stage * BR;
    const float* delta = s_rows + (2 + stage) * BR;

    // S^T = K_w Q^T: A = the warp's 16 K rows (ldmatrix), B = Q^T, whose columns are Q's rows
    // (plain ldmatrix, as K^T in module 07's Q K^T).
    float s[BR / 8][4];
#pragma unroll
    for (int n = 0; n < BR / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4];
      ldmatrix_x4(ka, tile_addr<D>(sK, key_row + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int np = 0; np < BR / 16; ++np) {
        uint32_t qb[4];
        ldmatrix_x4(qb, tile_addr<D>(sQ, 16 * np + 8 * (lane / 16) + lane % 8,
                                     2 * kk + (lane / 8) % 2));
        Elem<T>::mma(s[2 * np], ka, qb[0], qb[1]);
        Elem<T>::mma(s[2 * np + 1], ka, qb[2], qb[3]);
      }
    }

    // Lane (g, tq) holds keys k0 + key_row + g (+ 8 for e >= 2) x queries q0 + 8n + 2tq (+1).
    // Keys past seq_k (zero rows) and, with the mask, keys a query does not see: -inf, so
    // P = 0 there. Only tiles on the diagonal or at the end of the keys need the test.
    const int key_lo = k0 + key_row + g;
    const bool edge = k0 + BC > p.seq_k ||
                      (kCausal && q0 + (p.seq_k - p.seq_q) < k0 + BC - 1);
    if (edge) {
#pragma unroll
      for (int n = 0; n < BR / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_lo + 8 * (e >> 1), query = q0 + 8 * n + 2 * tq + (e & 1);
          if (key >= p.seq_k || (kCausal && key > query + (p.seq_k - p.seq_q))) s[n][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int n = 0; n < BR / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = Steps::probability(s[n][e] * a.scale_log2, lse2[8 * n + 2 * tq + (e & 1)]);

    // dV_w += P^T dO: A = P^T from the accumulators (module 07's pack_p), B = dO [query][d]
    // (ldmatrix.trans, as V in P V).
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq) {
      uint32_t pa[4] = {Elem<T>::pack(s[2 * kq][0], s[2 * kq][1]),
                        Elem<T>::pack(s[2 * kq][2], s[2 * kq][3]),
                        Elem<T>::pack(s[2 * kq + 1][0], s[2 * kq + 1][1]),
                        Elem<T>::pack(s[2 * kq + 1][2], s[2 * kq + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t ob[4];
        ldmatrix_x4_trans(ob, tile_addr<D>(sdO, 16 * kq + lane % 16, 2 * dp + lane / 16));
        Elem<T>::mma(dv[2 * dp], pa, ob[0], ob[1]);
        Elem<T>::mma(dv[2 * dp + 1], pa, ob[2], ob[3]);
      }
    }

    // dP^T = V_w dO^T, the same shape as S^T.
    float dpt[BR / 8][4];
#pragma unroll
    for (int n = 0; n < BR / 8; ++n) dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t va[4];
      ldmatrix_x4(va, tile_addr<D>(sV, key_row + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int np = 0; np < BR / 16; ++np) {
        uint32_t ob[4];
        ldmatrix_x4(ob, tile_addr<D>(sdO, 16 * np + 8 * (lane / 16) + lane % 8,
                                     2 * kk + (lane / 8) % 2));
        Elem<T>::mma(dpt[2 * np], va, ob[0], ob[1]);
        Elem<T>::mma(dpt[2 * np + 1], va, ob[2], ob[3]);
      }
    }

    // dS^T = P^T o (dP^T - D), in place of P^T; stored (16-bit) for the dQ product.
#pragma unroll
    for (int n = 0; n < BR / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = Steps::score_gradient(s[n][e], dpt[n][e], delta[8 * n + 2 * tq + (e & 1)]);
#pragma unroll
    for (int n = 0; n < BR / 8; ++n) {
      uint16_t* row0 = smem + C::kdS + m07::chunk_offset<BR, true>(key_row + g, n) + 2 * tq;
      uint16_t* row8 = smem + C::kdS + m07::chunk_offset<BR, true>(key_row + g + 8, n) + 2 * tq;
      *reinterpret_cast<uint32_t*>(row0) = Elem<T>::pack(s[n][0], s[n][1]);
      *reinterpret_cast<uint32_t*>(row8) = Elem<T>::pack(s[n][2], s[n][3]);
    }

    // dK_w += dS^T Q (scaled once, at the end).
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq) {
      uint32_t da[4] = {Elem<T>::pack(s[2 * kq][0], s[2 * kq][1]),
                        Elem<T>::pack(s[2 * kq][2], s[2 * kq][3]),
                        Elem<T>::pack(s[2 * kq + 1][0], s[2 * kq + 1][1]),
                        Elem<T>::pack(s[2 * kq + 1][2], s[2 * kq + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t qb[4];
        ldmatrix_x4_trans(qb, tile_addr<D>(sQ, 16 * kq + lane % 16, 2 * dp + lane / 16));
        Elem<T>::mma(dk[2 * dp], da, qb[0], qb[1]);
        Elem<T>::mma(dk[2 * dp + 1], da, qb[2], qb[3]);
      }
    }
    __syncthreads();  // barrier A: every warp's dS^T is stored

    // dQ += dS K: warp w takes rows 16 (w % (BR / 16)) .. + 15 of the tile and kDqCols
    // columns from (w / (BR / 16)) kDqCols. A = dS[query][key], stored transposed as
    // dS^T[key][query]: ldmatrix.trans of matrix i (lanes 8i .. 8i + 7) at keys
    // 16kk + 8 (i / 2) + lane % 8, query chunk 2 (row slice) + i % 2 gives a0..a3.
    // B = K [key][d] (ldmatrix.trans, as V in P V).
    constexpr int kSlices = BR / 16, kCols = C::kDqCols;
    const int slice = warp % kSlices, col0 = (warp / kSlices) * kCols;
    const int query_row = 16 * slice;
    const bool row_ok[2] = {q0 + query_row + g < p.seq_q, q0 + query_row + g + 8 < p.seq_q};
    float* dq_rows = dq_sum + a.row(b, h, q0 + query_row + g) * D + col0;
    float acc[kCols / 8][4];
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t da[4];
      ldmatrix_x4_trans(da, tile_addr<BR>(sdS, 16 * kk + 8 * (lane / 16) + lane % 8,
                                          2 * slice + (lane / 8) % 2));
#pragma unroll
      for (int dp = 0; dp < kCols / 16; ++dp) {
        uint32_t kb[4];
        ldmatrix_x4_trans(kb, tile_addr<D>(sK, 16 * kk + lane % 16, col0 / 8 + 2 * dp + lane / 16));
        Elem<T>::mma(acc[2 * dp], da, kb[0], kb[1]);
        Elem<T>::mma(acc[2 * dp + 1], da, kb[2], kb[3]);
      }
    }
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n) {
      const int col = 8 * n + 2 * tq;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!row_ok[r]) continue;
        float* dst = dq_rows + 8 * r * D + col;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // sm_90 adds two neighbouring floats in one atomic (RED.E.ADD.F32x2): half the ops.
        atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[n][2 * r], acc[n][2 * r + 1]));
#else
        atomicAdd(dst, acc[n][2 * r]);
        atomicAdd(dst + 1, acc[n][2 * r + 1]);
#endif
      }
    }
  }
  device::cp_async_wait<0>();
  __syncthreads();  // every warp is done with K and V: they stage dK and dV now

  // Epilogue: dK (times the scale) and dV rounded to T, staged in the K and V tiles, then
  // written out as 16-byte row chunks (coalesced), rows < seq_k, columns < head_dim.
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = key_row + g + 8 * r;
      const int at = m07::chunk_offset<D, true>(row, n) + 2 * tq;
      *reinterpret_cast<uint32_t*>(smem + C::kK + at) =
          Elem<T>::pack(dk[n][2 * r] * a.scale, dk[n][2 * r + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(smem + C::kV + at) = Elem<T>::pack(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  __syncthreads();
  constexpr int kChunks = D / 8;
  for (int c = int(threadIdx.x); c < 2 * BC * kChunks; c += C::kThreads) {
    const int which = c / (BC * kChunks), rc = c % (BC * kChunks);
    const int row = rc / kChunks, chunk = rc % kChunks;
    if (k0 + row >= p.seq_k || chunk * 8 >= p.head_dim) continue;
    const uint16_t* src = smem + (which == 0 ? C::kK : C::kV) + m07::chunk_offset<D, true>(row, chunk);
    uint16_t* dst = reinterpret_cast<uint16_t*>(which == 0 ? a.dk : a.dv) +
                    Problem::offset(which == 0 ? p.k : p.v, b, kvh, k0 + row) + chunk * 8;
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && chunk * 8 + e < p.head_dim; ++e) dst[e] = src[e];
    }
  }
}

}  // namespace attn::m11
