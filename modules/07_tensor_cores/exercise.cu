// Module 07 exercise: the warp's tensor-core step of the FlashAttention-2 forward.
// Read modules/07_tensor_cores/README.md first. Run: ./course run 07   Grade: ./course grade 07
//
// Given (modules/07_tensor_cores/tensor_core_kernel.cuh): the whole pipeline -- the flat grid
// over (query block, head, batch), the swizzled shared tiles, the cp.async copies of K and V
// in the background, the online softmax on the S accumulator registers, the epilogue. Given
// (mma_primitives.cuh): one wrapper per PTX instruction (Elem<T>::mma, ldmatrix_x4,
// ldmatrix_x4_trans) and the fragment layouts they use. Your part, the four functions of
// WarpMma below:
//   TODO 1  load_a: a 16 x 16 block of Q -> an A fragment with ldmatrix (README, section 2);
//   TODO 2  qk:     S += Q K^T with ldmatrix and mma (README, section 3);
//   TODO 3  pack_p: the S accumulators (f32) -> A fragments of P (16-bit), in registers;
//   TODO 4  pv:     O += P V with ldmatrix.trans and mma (README, section 3).
// chunk_addr<C>(tile, row, chunk) gives the shared address of 16-byte chunk `chunk` (8
// elements) of a tile row, swizzle included: that is what a lane hands ldmatrix.
// The fp32 rungs (README, section 10; tf32_kernel.cuh): TODO 5, Tf32Split::split below.
//
// A warp owns kRowTiles tiles of 16 query rows. Per K/V tile of kKeys keys:
//   S (16 x kKeys per row tile) = Q K^T:  D/16 k-steps x kKeys/8 mma   (A = Q, B = K^T)
//   O (16 x D per row tile)    += P V:    kKeys/16 k-steps x D/8 mma   (A = P, B = V)
#include <cstdint>

#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/07_tensor_cores/tensor_cores.h"
#include "modules/07_tensor_cores/tf32_kernel.cuh"

namespace attn::m07::ATTN_IMPL {

struct WarpMma {
  // TODO(1): the A fragment of the 16 x 16 block at rows row0 .. row0 + 15, columns
  // 16 kk .. 16 kk + 15 of a shared tile (Q): a[0..3] = a0..a3 of the fragment layout.
  // One ldmatrix_x4 does it: which row and which chunk must lane `lane` point at so that its
  // four matrices are a0, a1, a2, a3? Write the table for each group of 8 lanes first
  // (README, section 2, "A from ldmatrix": the method, then hints that unfold one by one).
  template <class C>
  static __device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t tile, int row0,
                                                int kk, int lane) {
    (void)tile, (void)row0, (void)kk, (void)lane;
    a[0] = a[1] = a[2] = a[3] = 0u;
  }

  // TODO(2): s[mt][n] (rows of row tile mt x keys 8n .. 8n + 7 of the tile) += Q K^T.
  // q.get(mt, kk, a) gives Q's A fragment of row tile mt, k-step kk (it calls your load_a).
  // For each k-step kk and each 8-key block n, the B operand is K^T[16kk .., 8n ..]: b0 holds
  // K[key 8n + g][d 16kk + 2t, +1], two consecutive elements of a stored K row. One
  // ldmatrix_x4 can fetch the b0, b1 of two 8-key blocks; then Elem<T>::mma(s[mt][n], a, b0,
  // b1) for every row tile, so each K fragment is loaded once and used kRowTiles times.
  // The order of the four matrices follows the mma calls, not Q's order (README, section 3,
  // "S = Q K^T", and its hints).
  template <class T, class C, class QFrags>
  static __device__ __forceinline__ void qk(float (&s)[C::kRowTiles][C::kKeys / 8][4],
                                            const QFrags& q, uint32_t sK, int lane) {
    (void)s, (void)q, (void)sK, (void)lane;
  }

  // TODO(3): the A fragments of P for P V, from the S accumulators after the softmax.
  // pa[mt][kk] covers keys 16kk .. 16kk + 15: compare the A layout (a0..a3) with the C layout
  // (c0..c3) of S blocks 2kk and 2kk + 1 (README, section 3). Elem<T>::pack(lo, hi) makes one
  // register of two 16-bit values.
  template <class T, class C>
  static __device__ __forceinline__ void pack_p(uint32_t (&pa)[C::kRowTiles][C::kKeys / 16][4],
                                                const float (&s)[C::kRowTiles][C::kKeys / 8][4]) {
    (void)s;
#pragma unroll
    for (int mt = 0; mt < C::kRowTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk)
        pa[mt][kk][0] = pa[mt][kk][1] = pa[mt][kk][2] = pa[mt][kk][3] = 0u;
  }

  // TODO(4): o[mt][n] (rows of row tile mt x head-dim columns 8n .. 8n + 7) += P V.
  // For each k-step kk (16 keys) and each 8-column block n, the B operand is V[16kk .., 8n ..]:
  // b0 holds V[key 16kk + 2t, +1][d 8n + g], two elements of a stored V *column*. Which
  // ldmatrix variant hands a lane a column pair? One x4 call can cover 16 keys x 16 columns
  // (README, section 3, "O += P V", and its hints).
  template <class T, class C>
  static __device__ __forceinline__ void pv(float (&o)[C::kRowTiles][C::D / 8][4],
                                            const uint32_t (&pa)[C::kRowTiles][C::kKeys / 16][4],
                                            uint32_t sV, int lane) {
    (void)o, (void)pa, (void)sV, (void)lane;
  }
};

// TODO(5): 3xTF32's split of an fp32 value x into two TF32 values with x ~= big + small:
// big = x rounded to TF32 (to_tf32(x) gives its bits), small = the rest, x - big, rounded to
// TF32 too. The kernel calls it on every element of Q, K, V and P and computes each product as
// small*big + big*small + big*big (README, section 10, "3xTF32: the split and the three
// products", and its hints).
struct Tf32Split {
  static __device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
    (void)x;
    big = small = 0u;
  }
};

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<WarpMma>(p, q, k, v, o, stream);
}

ATTN_M07_FP32_FORWARDS(Tf32Split)  // forward_3xtf32() over your split, forward_tf32()

}  // namespace attn::m07::ATTN_IMPL
