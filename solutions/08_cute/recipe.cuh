// Module 08 solution: the recipe (the exercise's seven functions, filled in). The kernel that
// uses it is modules/08_cute/cute_kernel.cuh; the README's sections 2-4 explain each part.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attn::m08::ATTN_IMPL {

using namespace cute;

struct Recipe {
  // 1. One head of Q, K, V or O: (row, column) -> row * row_stride + column. The row stride
  //    comes from the problem (BHSD or BSHD, module 06); columns are contiguous, a static 1,
  //    so CuTe can prove 8 neighbours form one 16-byte chunk.
  static __host__ __device__ auto head_layout(int rows, int cols, int64_t row_stride) {
    return make_layout(make_shape(rows, cols), make_stride(row_stride, Int<1>{}));
  }

  // 2. A shared tile of kRows x D elements: rows of 64 elements (128 bytes, all 32 banks) in
  //    atoms of 8 rows, with the 16-byte chunk index XORed with the row index (Swizzle<3, 3,
  //    3>: bits 3-5 of the offset ^= bits 6-8). The 8 rows an ldmatrix reads at one chunk
  //    column then sit in 8 different bank groups: no conflict.
  template <int kRows, int D>
  static __host__ __device__ auto shared_tile() {
    using Atom = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
    return tile_to_shape(Atom{}, Shape<Int<kRows>, Int<D>>{});
  }

  // 3. Global -> shared: each thread copies 16-byte chunks (8 elements) with cp.async;
  //    consecutive threads take consecutive chunks of a row (coalesced), D / 8 threads per
  //    row, kThreads / (D / 8) rows per pass.
  template <class T, int kThreads, int D>
  static __host__ __device__ auto global_copy() {
    constexpr int kChunks = D / 8;
    return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                           Layout<Shape<Int<kThreads / kChunks>, Int<kChunks>>,
                                  Stride<Int<kChunks>, _1>>{},
                           Layout<Shape<_1, _8>>{});
  }

  // 4. The tiled MMA: the m16n8k16 atom of the dtype, kWarps warps stacked along the rows; the
  //    N and K tiles of 16 let one ldmatrix.x4 feed two atoms. The row permutation gives warp
  //    w the 32 consecutive rows 32w .. 32w + 31 (its two 16-row atoms), as in module 07:
  //    logical row i + 16 w + 16 kWarps j (atom row i, warp w, repeat j) -> i + 32 w + 16 j.
  template <class T, int kWarps>
  static __host__ __device__ auto tiled_mma() {
    using Atom = std::conditional_t<std::is_same_v<T, bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                                    SM80_16x8x16_F32F16F16F32_TN>;
    using Rows = Layout<Shape<_16, Int<kWarps>, _2>, Stride<_1, _32, _16>>;
    return make_tiled_mma(Atom{}, Layout<Shape<Int<kWarps>, _1, _1>>{}, Tile<Rows, _16, _16>{});
  }

  // 5. Shared -> registers with ldmatrix, shaped to the MMA's operands: x4 for Q (A) and K
  //    (B, a K row is a column of K^T), x4.trans for V, whose rows are stored key-major.
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_a(const Mma& mma) {
    return make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, T>{}, mma);
  }
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_b(const Mma& mma) {
    return make_tiled_copy_B(Copy_Atom<SM75_U32x4_LDSM_N, T>{}, mma);
  }
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_b_transposed(const Mma& mma) {
    return make_tiled_copy_B(Copy_Atom<SM75_U16x8_LDSM_T, T>{}, mma);
  }

  // 6. V^T as a (D, keys) view of the (keys, D) tile: (d, key) -> the tile's (key, d). A
  //    row-major (D, keys) layout sends (d, key) to d * keys + key, which is the tile's own
  //    column-major index of (key, d); composing the tile's layout after it does the rest.
  template <class TileLayout>
  static __host__ __device__ auto transposed(TileLayout tile) {
    return composition(tile, make_layout(make_shape(size<1>(tile), size<0>(tile)), GenRowMajor{}));
  }

  // 7. S's accumulators ((2, 2), MMA_M, MMA_N) as P's A operand ((2, 2, 2), MMA_M, MMA_N / 2):
  //    an A fragment spans 16 keys, two n8 accumulator blocks, so the N mode is split in pairs
  //    and the pair index joins the value mode. Same registers, new order: no data moves.
  template <class AccLayout>
  static __host__ __device__ auto accumulator_as_a(AccLayout acc) {
    auto split = logical_divide(acc, Shape<Underscore, Underscore, _2>{});  // ((2,2), M, (2, N/2))
    return make_layout(make_layout(get<0>(split), get<2, 0>(split)), get<1>(split),
                       get<2, 1>(split));
  }
};

}  // namespace attn::m08::ATTN_IMPL
