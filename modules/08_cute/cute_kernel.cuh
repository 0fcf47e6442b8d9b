// Module 08, given: module 07's FlashAttention-2 forward written with CuTe. The kernel is a
// template over `Recipe`, the struct of layouts, copies and MMAs that the exercise
// (exercise.cu) and the solution (solutions/08_cute/recipe.cuh) provide (README, sections
// 2-4). Every index below is a layout: a tensor is a pointer and a layout, a tile of it is
// local_tile, a thread's share of a tile is partition_S / partition_A / partition_C, and the
// (row, column) of any register is read from an identity tensor partitioned the same way.
//
// The algorithm is module 07's (its README, sections 3-4): a block of kWarps warps owns
// kQueries queries of one (batch, head), each warp 32 of them outright; K and V stream
// through shared memory in two stages, tile t + 1 copied while tile t is computed:
//     copy K, V(t + 1) | S = Q K(t)^T, softmax, P | O += P V(t) | wait, barrier
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include <type_traits>

#include "common/device/math.cuh"
#include "common/device/warp.cuh"
#include "common/problem.h"

namespace attn::m08 {

using namespace cute;

// One kernel configuration: D the padded head dim (head_dim <= D; padding columns are
// zeros), kWarps warps of 32 query rows, kKeys keys per K/V tile, kMinBlocks blocks per SM
// (caps the registers at 65536 / (kMinBlocks * 32 * kWarps)), kQInRegisters: Q's fragments
// loaded once (else re-read from shared memory for every tile, as module 07 does at D = 128,
// where O and S already take 192 of the 255 registers).
template <class T_, int D_, int kWarps_, int kKeys_, int kMinBlocks_, bool kQInRegisters_>
struct Config {
  using T = T_;  // cute::half_t or cute::bfloat16_t
  static constexpr int D = D_, kWarps = kWarps_, kKeys = kKeys_, kMinBlocks = kMinBlocks_;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr int kThreads = 32 * kWarps, kWarpRows = 32, kQueries = kWarps * kWarpRows;
  // Shared memory: Q (later O), then K and V of two stages; 2 bytes an element.
  static constexpr int kSmemBytes = 2 * (kQueries + 4 * kKeys) * D;
};

// The first key query `row` does not see (module 07's visible_end): bottom-right causal.
template <bool kCausal>
__device__ __forceinline__ int visible_end(const Problem& p, int row) {
  if (!kCausal) return p.seq_k;
  return max(0, min(p.seq_k, row + p.seq_k - p.seq_q + 1));
}

// Copies a tile between global and shared memory through the thread's partition of the
// global copy: src, dst and the identity coordinates `coord` (row, column of each element)
// have one shape (CPY, CPY_M, CPY_K). Elements past `rows` or `cols` are zeros in dst when
// kZeroFill (loads: padding must not add to Q K^T or P V), left alone otherwise (stores);
// `whole` says the tile has none. kVec: `copy` moves each 16-byte chunk of 8 elements at once
// (cp.async for loads, a plain 16-byte store for O; rows aligned, cols % 8 == 0), so one
// predicate per chunk; else element by element.
template <bool kVec, bool kZeroFill, class Copy, class Src, class Dst, class Coord>
__device__ __forceinline__ void copy_tile(const Copy& copy, const Src& src, Dst&& dst,
                                          const Coord& coord, int rows, int cols, bool whole) {
  if constexpr (kVec)
    if (whole) {  // every row and column in range (most tiles): no predicates at all
      cute::copy(copy, src, dst);
      return;
    }
  auto in = [&](auto rc) { return get<0>(rc) < rows && get<1>(rc) < cols; };
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m)
    CUTE_UNROLL
    for (int c = 0; c < size<2>(dst); ++c) {
      if constexpr (kVec) {  // a chunk's first element decides for the chunk
        if (in(coord(0, m, c))) cute::copy(copy, src(_, m, c), dst(_, m, c));
        else if constexpr (kZeroFill) clear(dst(_, m, c));
      } else {
        CUTE_UNROLL
        for (int e = 0; e < size<0>(dst); ++e)
          if (in(coord(e, m, c))) dst(e, m, c) = src(e, m, c);
          else if constexpr (kZeroFill) dst(e, m, c) = typename std::decay_t<Dst>::value_type(0);
      }
    }
}

// A view of an MMA accumulator ((2, 2), MMA_M, MMA_N) as a matrix (rows, columns): value v
// of an m16n8 atom sits at row 8 * (v / 2), column v % 2 (module 07, README section 3).
template <class Layout>
__device__ __forceinline__ auto rows_by_columns(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

// Rounds fp32 registers to 16 bits, element j of src's storage to element j of dst's (their
// layouts may differ: P's A-operand view of S). CUTLASS's array converter rounds two at a
// time (one cvt.rn.bf16x2 / f16x2 per pair).
template <class Src, class Dst>
__device__ __forceinline__ void round_to_16bit(const Src& src, Dst& dst) {
  using T = typename Dst::value_type;
  constexpr int N = decltype(size(src))::value;
  const auto& in = *reinterpret_cast<const cutlass::Array<float, N>*>(src.data());
  using Converter = cutlass::NumericArrayConverter<T, float, N>;
  *reinterpret_cast<cutlass::Array<T, N>*>(dst.data()) = Converter{}(in);
}

// C += A B over k-step kk of the MMA, with B read from shared memory one copy instruction
// at a time: copy j fills the B fragments of kPerCopy consecutive N blocks (an ldmatrix.x4
// covers the MMA's N tile of 16, two atoms of 8), and their MMAs follow it at once, so few B
// fragments are live at a time. rB_view is the copy's view of rB.
template <class Mma, class CopyB, class SB, class RBView, class RA, class RB, class RC>
__device__ __forceinline__ void mma_k_step(const Mma& mma, const CopyB& copy_b, const SB& sB,
                                           RBView& rB_view, const RA& rA, const RB& rB, RC& rC,
                                           int kk) {
  constexpr int kPerCopy = decltype(size<1>(rB) / size<1>(rB_view))::value;
  CUTE_UNROLL
  for (int n = 0; n < size<1>(rB); ++n) {
    if (n % kPerCopy == 0) copy(copy_b, sB(_, n / kPerCopy, kk), rB_view(_, n / kPerCopy, kk));
    CUTE_UNROLL
    for (int m = 0; m < size<1>(rA); ++m) gemm(mma, rA(_, m, kk), rB(_, n, kk), rC(_, m, n));
  }
}

template <class Recipe, class C, bool kCausal, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    cute_flash_kernel(Problem p, float scale_log2, int query_blocks, int head_group,
                      const typename C::T* q, const typename C::T* k, const typename C::T* v,
                      typename C::T* o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // mma.sync of 16-bit inputs: sm_80
  using T = typename C::T;
  constexpr int BQ = C::kQueries, BK = C::kKeys, D = C::D;
  using QTile = Shape<Int<BQ>, Int<D>>;  // a block's queries (and outputs) x the head dim
  using KTile = Shape<Int<BK>, Int<D>>;  // one tile of keys (and values) x the head dim
  // Which (query block, batch, head). The (batch, head) pairs come in groups of head_group;
  // inside a group heads fast and the last query block first (module 07): the blocks on the
  // GPU at one time share the K/V of at most head_group heads, which stay in L2.
  const int heads_total = p.batch * p.heads;
  const int first_bh = int(blockIdx.x / unsigned(head_group * query_blocks)) * head_group;
  const int group_heads = min(head_group, heads_total - first_bh);
  const int in_group = int(blockIdx.x) - first_bh * query_blocks;
  const int query_block = query_blocks - 1 - in_group / group_heads;
  const int bh = first_bh + in_group % group_heads, b = bh / p.heads, h = bh % p.heads;
  const int q0 = query_block * BQ, tid = int(threadIdx.x), warp = tid / 32;

  // One head of each tensor, (rows, head_dim), and the tiles of it this block visits.
  auto head = [&](auto* ptr, const Strides& s, int hh, int rows) {
    return make_tensor(make_gmem_ptr(ptr + Problem::offset(s, b, hh, 0)),
                       Recipe::head_layout(rows, p.head_dim, s.seq));
  };
  const bool full_d = p.head_dim == D;  // no padding columns
  Tensor gQ = local_tile(head(q, p.q, h, p.seq_q), QTile{}, make_coord(query_block, 0));
  Tensor gO = local_tile(head(o, p.o, h, p.seq_q), QTile{}, make_coord(query_block, 0));
  Tensor gK = local_tile(head(k, p.k, p.kv_head(h), p.seq_k), KTile{}, make_coord(_, 0));
  Tensor gV = local_tile(head(v, p.v, p.kv_head(h), p.seq_k), KTile{}, make_coord(_, 0));

  // Shared memory: Q (later O), then a K and a V tile per stage, each in the recipe's swizzled
  // layout. Stage s is the same tensors 2 * cosize(KVLayout) elements further on: at(x, s).
  extern __shared__ __align__(128) unsigned char smem[];
  using QLayout = decltype(Recipe::template shared_tile<BQ, D>());
  using KVLayout = decltype(Recipe::template shared_tile<BK, D>());
  auto at = [](const auto& tensor, int stage) {
    return make_tensor(tensor.data() + stage * 2 * cosize(KVLayout{}), tensor.layout());
  };
  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem)), QLayout{});
  Tensor sK = make_tensor(sQ.data() + cosize(QLayout{}), KVLayout{});
  Tensor sV = make_tensor(sK.data() + cosize(KVLayout{}), KVLayout{});
  Tensor sVt = make_tensor(sV.data(), Recipe::transposed(KVLayout{}));  // (D, keys)

  // Global -> shared: every thread's share of a tile, with the (row, column) of each element.
  auto g2s_copy = Recipe::template global_copy<T, C::kThreads, D>();
  auto g2s = g2s_copy.get_thread_slice(tid);
  Tensor tQg = g2s.partition_S(gQ);
  Tensor tQs = g2s.partition_D(sQ);
  Tensor tKg = g2s.partition_S(gK);  // (CPY, CPY_M, CPY_K, tile)
  Tensor tKs = g2s.partition_D(sK);
  Tensor tVg = g2s.partition_S(gV);
  Tensor tVs = g2s.partition_D(sV);
  Tensor tQc = g2s.partition_S(make_identity_tensor(QTile{}));
  Tensor tKc = g2s.partition_S(make_identity_tensor(KTile{}));

  // The MMAs: this thread's fragments of Q, K, V^T, S and O, and the ldmatrix copies that fill
  // the operand fragments from shared memory.
  auto mma = Recipe::template tiled_mma<T, C::kWarps>();
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rQ = thr_mma.partition_fragment_A(sQ);   // (MMA, MMA_M, MMA_K)
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rVt = thr_mma.partition_fragment_B(sVt);
  Tensor rO = partition_fragment_C(mma, QTile{});
  auto s2r_q = Recipe::template shared_to_a<T>(mma);
  auto s2r_k = Recipe::template shared_to_b<T>(mma);
  auto s2r_v = Recipe::template shared_to_b_transposed<T>(mma);
  Tensor sQ_r = s2r_q.get_thread_slice(tid).partition_S(sQ);
  Tensor rQ_r = s2r_q.get_thread_slice(tid).retile_D(rQ);
  Tensor sK_r = s2r_k.get_thread_slice(tid).partition_S(sK);
  Tensor rK_r = s2r_k.get_thread_slice(tid).retile_D(rK);
  Tensor sV_r = s2r_v.get_thread_slice(tid).partition_S(sVt);
  Tensor rV_r = s2r_v.get_thread_slice(tid).retile_D(rVt);
  // (row, key) of each S register, as a (rows, columns) matrix like the softmax statistics.
  Tensor rS_coord = thr_mma.partition_C(make_identity_tensor(Shape<Int<BQ>, Int<BK>>{}));
  Tensor sc = make_tensor(rS_coord.data(), rows_by_columns(rS_coord.layout()));

  // The key tiles: up to the last key the block's last query sees; this warp's own range.
  const int tiles = (visible_end<kCausal>(p, min(q0 + BQ, p.seq_q) - 1) + BK - 1) / BK;
  const int warp_q0 = q0 + warp * C::kWarpRows;
  const int warp_last = min(warp_q0 + C::kWarpRows, p.seq_q) - 1;
  const int warp_end = warp_q0 < p.seq_q ? visible_end<kCausal>(p, warp_last) : 0;
  const int warp_full = visible_end<kCausal>(p, warp_q0);  // keys every row of the warp sees

  Tensor rows_view = make_tensor(rO.data(), rows_by_columns(rO.layout()));  // (rows, D)
  constexpr int kRows = size<0>(decltype(rows_view.layout()){});
  float m[kRows], l[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) m[r] = -INFINITY, l[r] = 0.f;
  clear(rO);

  // K and V tile t into stage t % 2 (rows past seq_k become zeros).
  auto copy_kv = [&](int t) {
    const int rows = p.seq_k - t * BK, cols = p.head_dim;
    const bool whole = rows >= BK && full_d;
    copy_tile<kVec, true>(g2s_copy, tKg(_, _, _, t), at(tKs, t % 2), tKc, rows, cols, whole);
    copy_tile<kVec, true>(g2s_copy, tVg(_, _, _, t), at(tVs, t % 2), tKc, rows, cols, whole);
  };
  const bool whole_q = p.seq_q - q0 >= BQ && full_d;
  copy_tile<kVec, true>(g2s_copy, tQg, tQs, tQc, p.seq_q - q0, p.head_dim, whole_q);
  if (tiles > 0) copy_kv(0);
  cp_async_fence();
  cp_async_wait<0>();
  __syncthreads();
  if constexpr (C::kQInRegisters) copy(s2r_q, sQ_r, rQ_r);
  for (int t = 0; t < tiles; ++t) {
    // Tile t is complete in stage t % 2, and nobody reads the other stage any more (the
    // barrier that ended t - 1): tile t + 1 is copied there while this one is computed.
    if (t + 1 < tiles) copy_kv(t + 1);
    cp_async_fence();
    const int key0 = t * BK;
    Tensor sK_t = at(sK_r, t % 2);
    Tensor sV_t = at(sV_r, t % 2);
    Tensor rS = partition_fragment_C(mma, Shape<Int<BQ>, Int<BK>>{});
    Tensor rP = make_tensor<T>(Recipe::accumulator_as_a(rS.layout()));
    // S = Q K^T, the online softmax and P, with or without the mask.
    auto step = [&](auto with_mask) {
      clear(rS);
      CUTE_UNROLL
      for (int kk = 0; kk < size<2>(rK); ++kk) {  // one 16-wide k-step at a time
        if constexpr (!C::kQInRegisters) copy(s2r_q, sQ_r(_, _, kk), rQ_r(_, _, kk));
        mma_k_step(mma, s2r_k, sK_t, rK_r, rQ, rK, rS, kk);
      }
      // The online softmax (module 03, in base-2 units, module 07's register form) on S seen
      // as (rows, keys). A row lives in the 4 lanes of a quad: its max takes two shuffles.
      Tensor s = make_tensor(rS.data(), rows_by_columns(rS.layout()));
      // Keys past a row's last visible key (or past seq_k) become -inf.
      if constexpr (decltype(with_mask)::value) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          const int end = visible_end<kCausal>(p, q0 + get<0>(sc(r, 0))) - key0;
          CUTE_UNROLL
          for (int c = 0; c < size<1>(s); ++c)
            if (get<1>(sc(r, c)) >= end) s(r, c) = -INFINITY;
        }
      }
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        float tile_max = -INFINITY;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s); ++c) tile_max = fmaxf(tile_max, s(r, c));
        const float m_new = fmaxf(m[r], device::group_max<4>(tile_max) * scale_log2);
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: no NaN
        const float alpha = device::fast_exp2(m[r] - m_ref);
        m[r] = m_new;
        l[r] *= alpha;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(rows_view); ++c) rows_view(r, c) *= alpha;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s); ++c) {
          s(r, c) = device::fast_exp2(fmaf(s(r, c), scale_log2, -m_ref));
          l[r] += s(r, c);
        }
      }
      // P: the S registers rounded to 16 bits, 2 at a time, already in the A operand's order.
      round_to_16bit(rS, rP);
    };
    // A warp skips the tiles none of its rows sees (the causal diagonal): the same branch for
    // the whole warp, no divergence. Only the tiles on the diagonal and the last tile need the
    // mask; two copies of the step, picked by one branch, because inside a single copy the
    // compiler turns the mask into predicated instructions that every tile would issue.
    const bool active = key0 < warp_end;
    if (active) {
      if (key0 + BK > warp_full || key0 + BK > p.seq_k) step(std::true_type{});
      else step(std::false_type{});
    }
    // O += P V, for every warp (P = 0 where the warp skipped the tile): inside the branch, P
    // and V's fragments would take registers in both paths, and the kernel spills (README,
    // section 5).
    if (!active) clear(rP);
    CUTE_UNROLL
    for (int kk = 0; kk < size<2>(rVt); ++kk) mma_k_step(mma, s2r_v, sV_t, rV_r, rP, rVt, rO, kk);
    cp_async_wait<0>();  // tile t + 1 has landed (own copies) ...
    __syncthreads();     // ... everyone's; and nobody reads stage t % 2 any more
  }
  __syncthreads();  // every warp is done with Q's tile, where O is staged (also with no tile)

  // Epilogue: O / l rounded to 16 bits, staged in shared memory (Q's tile), written out in the
  // global copy's 16-byte chunks. A row that saw no key has l = 0: it writes 0, not 0/0.
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const float sum = device::group_sum<4>(l[r]);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(rows_view); ++c) rows_view(r, c) *= inv;
  }
  Tensor rOut = make_tensor<T>(rO.layout());
  round_to_16bit(rO, rOut);
  copy(rOut, thr_mma.partition_C(sQ));
  __syncthreads();
  copy_tile<kVec, false>(Copy_Atom<UniversalCopy<uint128_t>, T>{}, g2s.partition_S(sQ),
                         g2s.partition_D(gO), tQc, p.seq_q - q0, p.head_dim, whole_q);
#endif
}

}  // namespace attn::m08
