// Module 08 exercise: the recipe of module 07's kernel, written with CuTe.
// Read modules/08_cute/README.md first. Grade the layouts on the CPU: ./course grade 08
// (the host part needs no GPU); run: ./course run 08.
//
// Given (cute_kernel.cuh): the kernel. It builds every tensor from your recipe: one head of
// Q/K/V/O from head_layout, the shared tiles from shared_tile, each thread's share of a copy
// or an MMA from global_copy, tiled_mma and the shared_to_* copies, V^T from transposed, and
// P's operand from accumulator_as_a. The online softmax and the pipeline are module 07's.
//
// Each TODO below compiles as it is but is wrong (or slow): replace the body. The host grader
// (tests/test_08_cute_host.cpp) checks TODOs 1-4, 6 and 7 on the CPU, one at a time; the GPU
// grader checks the attention they make together.
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attn::m08::ATTN_IMPL {

using namespace cute;

struct Recipe {
  // TODO(1): one head of Q, K, V or O as a (rows, cols) layout: element (r, c) sits at
  // r * row_stride + c. Give the column stride as the static Int<1>{} so that CuTe can prove
  // that 8 neighbours form one 16-byte chunk (README, section 2, "shape and stride").
  static __host__ __device__ auto head_layout(int rows, int cols, int64_t row_stride) {
    (void)row_stride;  // rows of `cols` elements: right only for contiguous, unpadded heads
    return make_layout(make_shape(rows, cols), make_stride(int64_t(cols), Int<1>{}));
  }

  // TODO(2): a kRows x D shared tile, swizzled so that the 8 rows an ldmatrix reads at one
  // chunk column fall in 8 different bank groups. Start from an atom of 8 rows x 64 columns
  // (row-major), compose it with Swizzle<3, 3, 3>, and tile it over the whole tile with
  // tile_to_shape (README, section 2, "swizzling is a layout too"). This plain row-major tile
  // is correct but every ldmatrix of it is an 8-way bank conflict.
  template <int kRows, int D>
  static __host__ __device__ auto shared_tile() {
    return Layout<Shape<Int<kRows>, Int<D>>, Stride<Int<D>, _1>>{};
  }

  // TODO(3): the global -> shared copy: a 16-byte cp.async atom
  // (SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>), threads laid out over the tile so that D / 8
  // consecutive threads cover one row (coalesced), 8 values (one chunk) per thread and copy
  // (README, section 3, "a tiled copy"). This one walks the threads down the rows instead.
  template <class T, int kThreads, int D>
  static __host__ __device__ auto global_copy() {
    constexpr int kChunks = D / 8;
    return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                           Layout<Shape<Int<kThreads / kChunks>, Int<kChunks>>>{},
                           Layout<Shape<_1, _8>>{});
  }

  // TODO(4): the tiled MMA: the m16n8k16 atom of T with fp32 accumulators
  // (SM80_16x8x16_F32BF16BF16F32_TN for bfloat16_t, SM80_16x8x16_F32F16F16F32_TN for half_t),
  // kWarps warps along the rows, N and K tiles of 16, and a row permutation that gives warp w
  // the 32 consecutive rows 32w .. 32w + 31 (README, section 4, "a tiled MMA").
  template <class T, int kWarps>
  static __host__ __device__ auto tiled_mma() {
    using Atom = std::conditional_t<std::is_same_v<T, bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                                    SM80_16x8x16_F32F16F16F32_TN>;
    return make_tiled_mma(Atom{}, Layout<Shape<Int<kWarps>, _1, _1>>{},
                          Tile<Int<32 * kWarps>, _16, _16>{});
  }

  // TODO(5): shared -> registers for the MMA's operands, with ldmatrix: make_tiled_copy_A /
  // make_tiled_copy_B over the MMA, with the x4 atom (SM75_U32x4_LDSM_N) for Q and K, and the
  // transposing x4 atom (SM75_U16x8_LDSM_T) for V, stored key-major (README, section 3).
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_a(const Mma& mma) {
    return make_tiled_copy_A(Copy_Atom<DefaultCopy, T>{}, mma);
  }
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_b(const Mma& mma) {
    return make_tiled_copy_B(Copy_Atom<DefaultCopy, T>{}, mma);
  }
  template <class T, class Mma>
  static __host__ __device__ auto shared_to_b_transposed(const Mma& mma) {
    return make_tiled_copy_B(Copy_Atom<DefaultCopy, T>{}, mma);
  }

  // TODO(6): V^T, a (D, keys) view of a (keys, D) tile: (d, key) must reach the tile's
  // (key, d). Compose the tile's layout with a layout from (d, key) to the tile's own index of
  // (key, d) (README, section 3, "a transpose is a composition").
  template <class TileLayout>
  static __host__ __device__ auto transposed(TileLayout tile) {
    return composition(tile, make_layout(make_shape(size<1>(tile), size<0>(tile))));
  }

  // TODO(7): S's accumulator registers ((2, 2), MMA_M, MMA_N) viewed as P's A operand
  // ((2, 2, 2), MMA_M, MMA_N / 2): an A fragment spans 16 keys, two accumulator blocks of 8.
  // logical_divide the N mode in pairs and move the pair index into the value mode
  // (README, section 4, "P without a copy").
  template <class AccLayout>
  static __host__ __device__ auto accumulator_as_a(AccLayout acc) {
    return composition(acc, make_layout(make_shape(Shape<_2, _2, _2>{}, size<1>(acc), size<2>(acc) / _2{})));
  }
};

}  // namespace attn::m08::ATTN_IMPL

#include "modules/08_cute/entry_points.cuh"
