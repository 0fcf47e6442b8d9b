// Module 07 solution: the warp's tensor-core step of the FlashAttention-2 forward (WarpMma),
// in a header so that two programs instantiate it: solution.cu's forward() with the
// production configurations, and the ladder (bench/07_tensor_cores/bench.cu) with its own.
// The pipeline around it (tiles, cp.async, the softmax on the accumulators, the epilogue) is
// given in modules/07_tensor_cores/tensor_core_kernel.cuh; the fragment layouts are drawn in
// modules/07_tensor_cores/mma_primitives.cuh and the README, section 2.
//
// A warp owns kRowTiles tiles of 16 query rows. Per K/V tile of kKeys keys:
//   S (16 x kKeys per row tile) = Q K^T:  D/16 k-steps x kKeys/8 mma   (A = Q, B = K^T)
//   O (16 x D per row tile)    += P V:    kKeys/16 k-steps x D/8 mma   (A = P, B = V)
// Both B operands come from row-major [key][d] tiles in shared memory: K^T's columns are K's
// rows (plain ldmatrix), V's columns are not (ldmatrix.trans).
#pragma once

#include <cstdint>

#include "modules/07_tensor_cores/tensor_core_kernel.cuh"

namespace attn::m07::ATTN_IMPL {

// Byte offset, inside a block of 16 rows, of lane's row `row` (0..15), chunk 2 * step + half:
// chunk_addr<C>(0, row, 2 * step + half), written so that the part that depends on the lane is
// computed once and each step is one XOR with a constant. The swizzle XORs the chunk index
// with row % 8; chunk 2 * step + half = (step << 1) ^ half, so the byte offset is
// (offset of chunk `half`) ^ (step << 5), and step << 5 (< 256) shares no bit with the row's
// offset (a multiple of 2 * D = 128 or 256 bytes). Without the swizzle the XOR is an add.
// Same address as chunk_addr; at D = 128 with 32 rows per warp it is what keeps the causal
// kernel from spilling (ptxas, README section 5).
template <class C>
__device__ __forceinline__ uint32_t step_addr(int row, int half, int step) {
  return chunk_addr<C>(0, row, half) ^ uint32_t(step << 5);
}

struct WarpMma {
  // The A fragment of the 16 x 16 block at rows row0 .. row0 + 15, columns 16 kk .. 16 kk + 15
  // of a shared tile (for Q). One ldmatrix.x4: matrix 0 = rows 0-7 x columns 0-7 of the block
  // (-> a0), matrix 1 = rows 8-15 x 0-7 (a1), matrix 2 = rows 0-7 x 8-15 (a2), matrix 3 =
  // rows 8-15 x 8-15 (a3). Lane L gives row L % 8 of matrix L / 8: row L % 16, chunk
  // 2 kk + L / 16.
  template <class C>
  static __device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t tile, int row0,
                                                int kk, int lane) {
    ldmatrix_x4(a, tile + 2 * C::D * row0 + step_addr<C>(lane % 16, lane / 16, kk));
  }

  // s += Q K^T. The B operand of k-step kk and 8-key block n is K^T[16kk .. +15][8n .. +7]:
  // b0 = K[key 8n + g][d 16kk + 2t, +1], two consecutive elements of a stored K row, so a
  // plain ldmatrix of K delivers it. One ldmatrix.x4 covers 16 keys x 16 d: matrix 0 = keys
  // 0-7, d 0-7 (b0 of block 2np), matrix 1 = keys 0-7, d 8-15 (b1 of 2np), matrices 2, 3 the
  // same for keys 8-15 (block 2np + 1). Lane L: key 16np + 8 (L / 16) + L % 8, chunk
  // 2kk + (L / 8) % 2. Each fragment feeds kRowTiles mma (one per row tile).
  template <class T, class C, class QFrags>
  static __device__ __forceinline__ void qk(float (&s)[C::kRowTiles][C::kKeys / 8][4],
                                            const QFrags& q, uint32_t sK, int lane) {
    const int key = 8 * (lane / 16) + lane % 8;
    const int half = (lane / 8) % 2;
#pragma unroll
    for (int kk = 0; kk < C::D / 16; ++kk) {
      uint32_t a[C::kRowTiles][4];
#pragma unroll
      for (int mt = 0; mt < C::kRowTiles; ++mt) q.get(mt, kk, a[mt]);
#pragma unroll
      for (int np = 0; np < C::kKeys / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, sK + 2 * C::D * 16 * np + step_addr<C>(key, half, kk));
#pragma unroll
        for (int mt = 0; mt < C::kRowTiles; ++mt) {
          Elem<T>::mma(s[mt][2 * np], a[mt], b[0], b[1]);
          Elem<T>::mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // P (the softmax'ed S accumulators, f32) -> A fragments of P V, in registers. For k-step kk
  // (keys 16kk .. 16kk + 15) the A fragment needs P[g][16kk + 2t, +1] (a0), P[g + 8][...]
  // (a1), P[g][16kk + 8 + 2t, +1] (a2), P[g + 8][...] (a3): exactly c0 c1 / c2 c3 of the S
  // blocks 2kk and 2kk + 1 that this lane already holds. No shuffle, no shared memory.
  template <class T, class C>
  static __device__ __forceinline__ void pack_p(uint32_t (&pa)[C::kRowTiles][C::kKeys / 16][4],
                                                const float (&s)[C::kRowTiles][C::kKeys / 8][4]) {
#pragma unroll
    for (int mt = 0; mt < C::kRowTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk) {
        pa[mt][kk][0] = Elem<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = Elem<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = Elem<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = Elem<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
  }

  // o += P V. The B operand of k-step kk and 8-column block n is V[16kk .. +15][8n .. +7]:
  // b0 = V[key 16kk + 2t, +1][d 8n + g], two elements of a stored *column*: ldmatrix.trans
  // hands lane L exactly that pair. One ldmatrix.x4.trans covers 16 keys x 16 d: matrix 0 =
  // keys 0-7, d 0-7 (b0 of block 2dp), matrix 1 = keys 8-15, d 0-7 (b1 of 2dp), matrices 2, 3
  // the same for d 8-15 (block 2dp + 1). Lane L: key 16kk + L % 16, chunk 2dp + L / 16.
  template <class T, class C>
  static __device__ __forceinline__ void pv(float (&o)[C::kRowTiles][C::D / 8][4],
                                            const uint32_t (&pa)[C::kRowTiles][C::kKeys / 16][4],
                                            uint32_t sV, int lane) {
#pragma unroll
    for (int kk = 0; kk < C::kKeys / 16; ++kk)
#pragma unroll
      for (int dp = 0; dp < C::D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, sV + 2 * C::D * 16 * kk + step_addr<C>(lane % 16, lane / 16, dp));
#pragma unroll
        for (int mt = 0; mt < C::kRowTiles; ++mt) {
          Elem<T>::mma(o[mt][2 * dp], pa[mt][kk], b[0], b[1]);
          Elem<T>::mma(o[mt][2 * dp + 1], pa[mt][kk], b[2], b[3]);
        }
      }
  }
};

}  // namespace attn::m07::ATTN_IMPL
