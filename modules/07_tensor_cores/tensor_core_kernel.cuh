// Module 07, given: the FlashAttention-2 forward on the tensor cores, everything except the
// warp's tensor-core step. The kernel is a template over `Warp`, a struct with four static
// functions that the exercise (exercise.cu) and the solution (solutions/07_tensor_cores/
// solution.cu) provide (README, section 3):
//
//   Warp::load_a<C>(a, tile, row0, kk, lane)  the A fragment of rows row0 .. row0 + 15,
//                                             columns 16 kk .. 16 kk + 15 of a shared tile
//   Warp::qk<T, C>(s, q, sK, lane)           s += Q K^T for the warp's rows x the tile's keys;
//                                             q.get(mt, kk, a) hands out Q's A fragments
//   Warp::pack_p<T, C>(pa, s)                 P (f32 accumulators) -> A fragments (16-bit)
//   Warp::pv<T, C>(o, pa, sV, lane)           o += P V for the warp's rows x all D columns
//
// Work partitioning (FlashAttention-2): a block of kWarps warps owns kQueries consecutive
// queries of one (batch, head); each warp owns 16 * kRowTiles of them outright. Its S tile,
// its softmax statistics and its O accumulators live in its registers (Q too, or Q is re-read
// from shared memory); warps share only the K and V tiles in shared memory, which the whole
// block streams through in tiles of kKeys keys:
//
//     per K/V tile, per warp:   S = Q K^T          (D/16 x kKeys/8 mma per row tile)
//                               online softmax on the S registers (quad shuffles)
//                               P = 16-bit exp2(...) in registers (C layout = A layout)
//                               O += P V           (kKeys/16 x D/8 mma per row tile)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/cp_async.cuh"
#include "common/device/head_dim.cuh"
#include "common/device/math.cuh"
#include "common/device/shared_memory.cuh"
#include "common/device/warp.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"

namespace attn::m07 {

using device::kLog2e;  // exp(x) = 2^(x * log2(e))

// How K/V copies overlap the math (README, section 4):
//   sync       each tile is copied, waited for, then computed: nothing overlaps (a ladder rung);
//   two_stage  K and V double-buffered: tile t + 1 is copied while tile t is computed; one
//              barrier per tile;
//   fa2        one K and one V buffer, copied as separate groups in FlashAttention-2's order:
//                wait K(t), barrier | copy V(t) | S = Q K(t)^T, softmax |
//                wait V(t), barrier | copy K(t + 1) | O += P V(t)
//              V(t) lands while S and the softmax run, K(t + 1) while P V runs. Half the
//              shared memory of two_stage, two barriers per tile; the copy code runs after the
//              softmax, when S has become P (half the registers): that is what lets
//              32 rows per warp at D = 128 fit in 255 registers without spills.
enum class Pipeline { sync, two_stage, fa2 };

// One kernel configuration. D: the padded head dim (64 or 128; head_dim <= D, the padding
// columns are zeros). kWarps warps x kRowTiles 16-row tiles each = kQueries queries per
// block; kKeys keys per K/V tile; kMinBlocks for __launch_bounds__ (caps the registers so that
// that many blocks fit on an SM). The other options are rungs of the ladder (README,
// section 5; modules/07_tensor_cores/NOTES.md, section 7):
//   kSwizzle        XOR-swizzled shared tiles (else plain rows: 8-way ldmatrix conflicts);
//   kPipeline       see Pipeline;
//   kQInRegisters   Q's A fragments loaded once into registers (Q passes through shared
//                   memory once, staged in a K/V buffer that is filled later); else Q keeps
//                   its own shared buffer and its fragments are re-read for every K/V tile
//                   (fewer registers: at D = 128 with 32 rows per warp, O and S alone take
//                   192 of the 255);
//   kQBlocksFast    consecutive blocks take consecutive query blocks of one head (the blocks
//                   on the GPU at one time cover a few heads, whose K/V stays in L2); else
//                   consecutive blocks take the same query block of consecutive heads.
template <int D_, int kWarps_, int kRowTiles_, int kKeys_, int kMinBlocks_, bool kSwizzle_ = true,
          Pipeline kPipeline_ = Pipeline::two_stage, bool kQInRegisters_ = true,
          bool kQBlocksFast_ = false>
struct Config {
  static constexpr int D = D_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kRowTiles = kRowTiles_;
  static constexpr int kKeys = kKeys_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kSwizzle = kSwizzle_;
  static constexpr Pipeline kPipeline = kPipeline_;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr bool kQBlocksFast = kQBlocksFast_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kRowTiles;
  static constexpr int kQueries = kWarps * kWarpRows;
  static constexpr int kTileElems = kKeys * D;  // one K or V tile
  // Shared memory, in 16-bit elements: K and V buffers first, [K0 | V0 | K1 | V1] (two_stage)
  // or [K | V]; then Q. With Q in registers (and copies in the background) Q is staged over
  // the buffer that is written last, K1 (two_stage) or V (fa2), so it costs no space of its
  // own; the epilogue stages O at the same place.
  static constexpr int kBufferElems = (kPipeline == Pipeline::two_stage ? 4 : 2) * kTileElems;
  static constexpr bool kQStaged = kQInRegisters && kPipeline != Pipeline::sync;
  static constexpr int kQOffset =
      !kQStaged ? kBufferElems : kPipeline == Pipeline::two_stage ? 2 * kTileElems : kTileElems;
  static constexpr int kQElems = kQueries * D;
  static constexpr int kSmemElems =
      kQOffset + kQElems > kBufferElems ? kQOffset + kQElems : kBufferElems;
  static constexpr int kSmemBytes = 2 * kSmemElems;
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kKeys % 16 == 0, "whole k-steps of P V");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

// Byte address (shared window) of logical chunk `chunk` of row `row` of the tile at `tile`:
// what each lane hands ldmatrix (README, section 2).
template <class C>
__device__ __forceinline__ uint32_t chunk_addr(uint32_t tile, int row, int chunk) {
  return tile + 2 * chunk_offset<C::D, C::kSwizzle>(row, chunk);
}

// Copies rows [0, kRows) of a head slice (row stride `ld` elements) into a shared tile.
// Rows >= rows_valid and columns >= head_dim become zeros. Thread i copies chunk i % (D/8) of
// rows i / (D/8), + kThreads / (D/8), ...: consecutive threads, consecutive 16-byte chunks of
// a row (coalesced). kVec: 16-byte cp.async (rows 16-byte aligned, head_dim % 8 == 0); else
// element by element, synchronously (any alignment, any head_dim).
template <class C, int kRows, bool kVec>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* __restrict__ g,
                                          int64_t ld, int rows_valid, int head_dim) {
  constexpr int kChunks = C::D / 8;
  constexpr int kRowStep = C::kThreads / kChunks;
  static_assert(C::kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole passes");
  const int c = int(threadIdx.x) % kChunks;
  const int r0 = int(threadIdx.x) / kChunks;
  const bool column_ok = c * 8 < head_dim;
  // One pointer stepped down the rows: no 64-bit multiply per row (registers are scarce in
  // this kernel: see Config::kQInRegisters).
  const uint16_t* src = g + r0 * ld + c * 8;
  const int64_t step = kRowStep * ld;
#pragma unroll
  for (int n = 0; n < kRows / kRowStep; ++n, src += step) {
    const int r = r0 + n * kRowStep;
    uint16_t* dst = tile + chunk_offset<C::D, C::kSwizzle>(r, c);
    if constexpr (kVec) {
      const bool ok = column_ok && r < rows_valid;
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

// The first key query i does not see, clamped to [0, seq_k]: seq_k without the mask; with
// it, bottom-right aligned as in Problem::first_masked_key (host code): keys j <= i + seq_k -
// seq_q. 0 means the query sees no key at all (causal, seq_q > seq_k).
template <bool kCausal>
__device__ __forceinline__ int visible_end(const Problem& p, int i) {
  if (!kCausal) return p.seq_k;
  const int64_t end = int64_t(i) + (p.seq_k - p.seq_q) + 1;
  return int(end < 0 ? 0 : end > p.seq_k ? p.seq_k : end);
}

// Sets the scores of keys a row does not see to -inf, on one 16-row tile of S accumulators.
// Lane (g, t) holds rows g and g + 8 of the tile (row_end[0], row_end[1]: the first key each
// does not see), keys 8n + 2t and 8n + 2t + 1 of every 8-key block n (README, section 3).
template <class C>
__device__ __forceinline__ void apply_mask(float (&s)[C::kKeys / 8][4], int key0,
                                           const int (&row_end)[2], int lane) {
  const int key_lane = key0 + 2 * (lane & 3);
#pragma unroll
  for (int n = 0; n < C::kKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (key_lane + 8 * n + (e & 1) >= row_end[e >> 1]) s[n][e] = -INFINITY;
}

// The online softmax on one 16-row tile of S accumulators, in registers (module 03, section 1,
// in base-2 units). A row lives in the 4 lanes of a quad, so its max needs two xor-shuffles
// (1, 2). The row sum l stays a per-lane partial sum (the 4 lanes share m, so their partial
// sums rescale alike) and is reduced once at the end.
//   m_new = max(m, scale_log2 * rowmax(S));  alpha = 2^(m - m_new) rescales O and l;
//   p = 2^(scale_log2 * s - m_new): one FFMA and one MUFU.EX2 per score.
// A row that has seen only masked keys keeps m = -inf; it subtracts 0 instead, so p = 2^-inf
// = 0 and alpha = 0, never -inf - (-inf) = NaN (module 04, section 1).
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[C::kKeys / 8][4], float (&m)[2],
                                               float (&l)[2], float (&o)[C::D / 8][4],
                                               float scale_log2) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < C::kKeys / 8; ++n) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
  }
  float m_ref[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = device::group_max<4>(tile_max[r]);
    const float m_new = fmaxf(m[r], tile_max[r] * scale_log2);  // scale_log2 > 0
    m_ref[r] = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = fast_exp2(m[r] - m_ref[r]);
    m[r] = m_new;
    l[r] *= alpha;
#pragma unroll
    for (int n = 0; n < C::D / 8; ++n) {
      o[n][2 * r] *= alpha;
      o[n][2 * r + 1] *= alpha;
    }
  }
#pragma unroll
  for (int n = 0; n < C::kKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -m_ref[e >> 1]));
    l[0] += s[n][0] + s[n][1];
    l[1] += s[n][2] + s[n][3];
  }
}

// Where Warp::qk gets Q's A fragments: q.get(mt, kk, a) for row tile mt, k-step kk.
// In registers: loaded once with Warp::load_a, then handed out (the copy is free once inlined).
template <class Warp, class C, bool kInRegisters = C::kQInRegisters>
struct QFragments {
  uint32_t f[C::kRowTiles][C::D / 16][4];
  __device__ __forceinline__ void load(uint32_t sQ, int row0, int lane) {
#pragma unroll
    for (int mt = 0; mt < C::kRowTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < C::D / 16; ++kk)
        Warp::template load_a<C>(f[mt][kk], sQ, row0 + 16 * mt, kk, lane);
  }
  __device__ __forceinline__ void get(int mt, int kk, uint32_t (&a)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = f[mt][kk][i];
  }
};
// Re-read from the shared Q tile at every use: 4 registers live instead of kRowTiles * D / 4.
template <class Warp, class C>
struct QFragments<Warp, C, false> {
  uint32_t sQ;
  int row0, lane;
  __device__ __forceinline__ void load(uint32_t sQ_, int row0_, int lane_) {
    sQ = sQ_, row0 = row0_, lane = lane_;
  }
  __device__ __forceinline__ void get(int mt, int kk, uint32_t (&a)[4]) const {
    Warp::template load_a<C>(a, sQ, row0 + 16 * mt, kk, lane);
  }
};

// Which rows of Q, K, V and O belong to batch entry b. DenseBatch, the usual case: b's rows
// are at b's batch stride and every entry has p.seq_q queries and p.seq_k keys. Module 10
// runs the same kernel on packed variable-length batches with its own Batch type, whose
// kPacked is true and whose rows(batch, b) gives sequence b's first rows and lengths.
struct DenseBatch {
  static constexpr bool kPacked = false;
  struct Args {};
};

// Module 12 (modules/12_modifiers/modifier_hooks.cuh) adds score modifiers, masks and RoPE
// through a Mods type with hooks at the marked places (`Mods::kActive`); module 11 (SaveLse
// in modules/11_backward/entry_points.cuh) has the epilogue hand each row's statistics to
// Mods::store_lse (`Mods::kStoresLse`), the log-sum-exp its backward recomputes P from.
// NoModifiers, the default, compiles to the kernel without either.
struct NoModifiers {
  static constexpr bool kActive = false;
  static constexpr bool kStoresLse = false;
  struct Args {};
  template <class C>
  static constexpr int kExtraSmemBytes = 0;
};

template <class Warp, class T, class C, bool kCausal, bool kVec, class Batch = DenseBatch,
          class Mods = NoModifiers>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_tc_kernel(Problem p, float scale_log2, int query_blocks, const uint16_t* __restrict__ q,
                    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                    uint16_t* __restrict__ o, typename Batch::Args batch = {},
                    typename Mods::Args mods = {}) {
  constexpr int MT = C::kRowTiles, BC = C::kKeys, D = C::D;
  static_assert(!Mods::kActive || (!kCausal && C::kPipeline != Pipeline::sync),
                "module 12's hooks take the mask over and sit in the two_stage and fa2 pipelines");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* const q_tile = smem + C::kQOffset;  // also stages O at the end

  const int lane = int(threadIdx.x) % 32;
  const int warp = int(threadIdx.x) / 32;

  // One flat grid over (query block, batch x head): no 65535 limit. Query blocks are handed
  // out last first: with the causal mask the last block of a head visits the most keys, so
  // the heaviest blocks start first and the light ones fill the tail of the schedule.
  int query_block, bh;
  if constexpr (C::kQBlocksFast) {
    query_block = query_blocks - 1 - int(blockIdx.x % unsigned(query_blocks));
    bh = int(blockIdx.x / unsigned(query_blocks));
  } else {
    const unsigned bh_count = unsigned(p.batch) * unsigned(p.heads);
    query_block = query_blocks - 1 - int(blockIdx.x / bh_count);
    bh = int(blockIdx.x % bh_count);
  }
  const int b = bh / p.heads, h = bh % p.heads;
  const int q0 = query_block * C::kQueries;
  if constexpr (Batch::kPacked) {
    // A packed batch (p.*.batch strides are 0): move the base pointers to sequence b's first
    // rows and take its lengths. Query blocks past a short sequence's end have nothing to do;
    // the whole block leaves before its first barrier.
    const auto rows = Batch::rows(batch, b);
    if (q0 >= rows.q_len) return;
    p.seq_q = rows.q_len;
    p.seq_k = rows.k_len;
    q += rows.q_start * p.q.seq;
    o += rows.q_start * p.o.seq;
    k += rows.k_start * p.k.seq;
    v += rows.k_start * p.v.seq;
  }

  const uint16_t* q_head = q + Problem::offset(p.q, b, h, q0);
  const uint16_t* k_head = k + Problem::offset(p.k, b, p.kv_head(h), 0);
  const uint16_t* v_head = v + Problem::offset(p.v, b, p.kv_head(h), 0);

  // The key tiles the block loads: up to the last key its last query sees.
  const int q_last = min(q0 + C::kQueries, p.seq_q) - 1;
  int tiles = (visible_end<kCausal>(p, q_last) + BC - 1) / BC;  // 0: sees no key
  int first_tile = 0;
  if constexpr (Mods::kActive) Mods::block_tiles(mods, p, b, q0, q_last, BC, first_tile, tiles);
  // The keys this warp computes with: a tile is skipped by a warp none of whose queries sees
  // any of its keys (causal: the last tiles of a block, for its first warps), and needs the
  // mask only if it reaches past the keys the warp's first row sees.
  const int warp_q0 = q0 + warp * C::kWarpRows;
  const int warp_end =
      warp_q0 < p.seq_q
          ? visible_end<kCausal>(p, min(warp_q0 + C::kWarpRows, p.seq_q) - 1)
          : 0;
  const int warp_full = visible_end<kCausal>(p, warp_q0);

  // Per lane: rows g and g + 8 of each row tile; the first key each does not see. (Rows past
  // seq_q get some value: their outputs are never stored.)
  const int row_base = warp_q0 + lane / 4;
  int row_end[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) row_end[mt][r] = visible_end<kCausal>(p, row_base + 16 * mt + 8 * r);

  float acc[MT][D / 8][4];  // O, unnormalized, in the C layout
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  const uint32_t s_base = smem_u32(smem);
  constexpr int kTile = C::kTileElems;
  // Mods' own shared memory (module 12: the bias tiles) lies after the kernel's.
  [[maybe_unused]] char* const extra = reinterpret_cast<char*>(smem + C::kSmemElems);
  auto load_k = [&](uint16_t* dst, int t) {
    load_tile<C, BC, kVec>(dst, k_head + int64_t(t) * BC * p.k.seq, p.k.seq, p.seq_k - t * BC,
                           p.head_dim);
    if constexpr (Mods::kActive)  // in K's copy group: the bias tile t (two_stage: by stage)
      Mods::template load_extras<C>(mods, p, b, h, q0, t, extra, (t - first_tile) & 1);
  };
  auto load_v = [&](uint16_t* dst, int t) {
    load_tile<C, BC, kVec>(dst, v_head + int64_t(t) * BC * p.v.seq, p.v.seq, p.seq_k - t * BC,
                           p.head_dim);
  };
  QFragments<Warp, C> qf;

  // One K/V tile of math for this warp. `middle` is the fa2 pipeline's middle step (wait for
  // V(t), barrier, copy K(t + 1)), run after the softmax; every warp runs it, active or not.
  auto tile_math = [&](int t, uint32_t sK, uint32_t sV, auto&& middle) {
    const int key0 = t * BC;
    bool active = key0 < warp_end;  // the same for the whole warp: no divergence
    bool partial = key0 + BC > warp_full;
    if constexpr (Mods::kActive)  // module 12: the mask's class of this warp's tile
      Mods::classify(mods, p, b, warp_q0, key0, BC, C::kWarpRows, active, partial);
    float s[MT][BC / 8][4];
    uint32_t pa[MT][BC / 16][4];
    if (active) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      Warp::template qk<T, C>(s, qf, sK, lane);
      if constexpr (Mods::kActive) {  // module 12: the score modifier, then the mask
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          Mods::template score<C>(mods, p, b, h, row_base + 16 * mt, key0, lane, s[mt], extra,
                                  (t - first_tile) & 1, warp * C::kWarpRows + 16 * mt);
        if (partial) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            Mods::template mask<C>(mods, p, b, row_base + 16 * mt, key0, lane, s[mt]);
        }
      } else if (partial) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) apply_mask<C>(s[mt], key0, row_end[mt], lane);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) online_softmax<C>(s[mt], m[mt], l[mt], acc[mt], scale_log2);
      Warp::template pack_p<T, C>(pa, s);
    }
    middle();
    if (active) Warp::template pv<T, C>(acc, pa, sV, lane);
  };

  if constexpr (C::kPipeline == Pipeline::fa2) {
    // Groups in flight, in order: Q + K(0), then per tile V(t) and K(t + 1).
    uint16_t* const k_buf = smem;
    uint16_t* const v_buf = smem + kTile;
    load_tile<C, C::kQueries, kVec>(q_tile, q_head, p.q.seq, p.seq_q - q0, p.head_dim);
    if (tiles > first_tile) load_k(k_buf, first_tile);
    device::cp_async_commit();
    if constexpr (C::kQInRegisters) {  // Q is staged in the V buffer: into registers first
      device::cp_async_wait<0>();
      if constexpr (Mods::kActive) Mods::template rotate<C, C::kQueries>(mods, p, q_tile, q0, true);
      __syncthreads();
      qf.load(smem_u32(q_tile), warp * C::kWarpRows, lane);
    } else {
      qf.load(smem_u32(q_tile), warp * C::kWarpRows, lane);
    }
    for (int t = first_tile; t < tiles; ++t) {
      device::cp_async_wait<0>();  // K(t) has landed (own copies) ...
      if constexpr (Mods::kActive) {  // module 12: RoPE on this thread's own rows, in place
        if (!C::kQInRegisters && t == first_tile)
          Mods::template rotate<C, C::kQueries>(mods, p, q_tile, q0, true);
        Mods::template rotate<C, BC>(mods, p, k_buf, t * BC, false);
      }
      __syncthreads();     // ... everyone's; everyone is done with V(t - 1) (and staged Q)
      load_v(v_buf, t);
      device::cp_async_commit();
      tile_math(t, s_base, s_base + 2 * kTile, [&] {
        device::cp_async_wait<0>();  // V(t) has landed ...
        __syncthreads();     // ... everyone's; everyone is done with K(t)
        if (t + 1 < tiles) load_k(k_buf, t + 1);
        device::cp_async_commit();
      });
    }
  } else if constexpr (C::kPipeline == Pipeline::two_stage) {
    // At the top of iteration t, tile t is complete in stage t % 2 and nobody reads stage
    // (t + 1) % 2 any more (the barrier at the end of t - 1): tile t + 1 is copied there.
    load_tile<C, C::kQueries, kVec>(q_tile, q_head, p.q.seq, p.seq_q - q0, p.head_dim);
    if (tiles > first_tile) {
      load_k(smem, first_tile);
      load_v(smem + kTile, first_tile);
    }
    device::cp_async_commit();
    device::cp_async_wait<0>();
    if constexpr (Mods::kActive) {  // module 12: RoPE on this thread's own rows, in place
      Mods::template rotate<C, C::kQueries>(mods, p, q_tile, q0, true);
      Mods::template rotate<C, BC>(mods, p, smem, first_tile * BC, false);
    }
    __syncthreads();
    qf.load(smem_u32(q_tile), warp * C::kWarpRows, lane);
    if constexpr (C::kQStaged) __syncthreads();  // Q is in registers: stage 1 is free
    for (int t = first_tile; t < tiles; ++t) {
      const int stage = (t - first_tile) & 1;
      if (t + 1 < tiles) {
        load_k(smem + (stage ^ 1) * 2 * kTile, t + 1);
        load_v(smem + (stage ^ 1) * 2 * kTile + kTile, t + 1);
      }
      device::cp_async_commit();
      const uint32_t sK = s_base + stage * 4 * kTile;  // bytes: 2 per element
      tile_math(t, sK, sK + 2 * kTile, [] {});
      device::cp_async_wait<0>();  // tile t + 1 has landed (own copies) ...
      if constexpr (Mods::kActive)
        if (t + 1 < tiles) Mods::template rotate<C, BC>(mods, p, smem + (stage ^ 1) * 2 * kTile,
                                                        (t + 1) * BC, false);
      __syncthreads();     // ... everyone's; and nobody reads this stage any more
    }
  } else {  // sync: one buffer, every tile copied, waited for, then computed
    load_tile<C, C::kQueries, kVec>(q_tile, q_head, p.q.seq, p.seq_q - q0, p.head_dim);
    device::cp_async_commit();
    if constexpr (!C::kQInRegisters) qf.load(smem_u32(q_tile), warp * C::kWarpRows, lane);
    for (int t = 0; t < tiles; ++t) {
      load_k(smem, t);
      load_v(smem + kTile, t);
      device::cp_async_commit();
      device::cp_async_wait<0>();
      __syncthreads();
      if (C::kQInRegisters && t == 0) qf.load(smem_u32(q_tile), warp * C::kWarpRows, lane);
      tile_math(t, s_base, s_base + 2 * kTile, [] {});
      __syncthreads();  // everyone is done with this tile before the next copy
    }
  }
  // Every copy has landed and every warp is done with the K/V buffers, which the O staging
  // below may overlap (and a block that visits no tile still has its Q copy in flight).
  device::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: l summed over the quad, O / l rounded to 16 bits, staged through the warp's own
  // rows of the Q area, then written out as 16-byte row chunks (coalesced).
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = device::group_sum<4>(l[mt][r]);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;  // a row that saw no key: 0, not 0/0
      if constexpr (Mods::kStoresLse)  // module 11: m (base 2, scaled) and the row's sum
        if (tq == 0) Mods::store_lse(mods, p, b, h, q0 + warp * C::kWarpRows + 16 * mt + g + 8 * r,
                                     m[mt][r], sum);
    }
    const int row = warp * C::kWarpRows + 16 * mt + g;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(q_tile + chunk_offset<D, C::kSwizzle>(row, n) + 2 * tq) =
          Elem<T>::pack(acc[mt][n][0] * inv[0], acc[mt][n][1] * inv[0]);
      *reinterpret_cast<uint32_t*>(q_tile + chunk_offset<D, C::kSwizzle>(row + 8, n) + 2 * tq) =
          Elem<T>::pack(acc[mt][n][2] * inv[1], acc[mt][n][3] * inv[1]);
    }
  }
  __syncwarp();  // each warp reads back only its own rows
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = lane; i < C::kWarpRows * kChunks; i += 32) {
    const int r = warp * C::kWarpRows + i / kChunks, c = i % kChunks;
    if (q0 + r >= p.seq_q || c * 8 >= p.head_dim) continue;
    uint16_t* dst = o + Problem::offset(p.o, b, h, q0 + r) + c * 8;
    const uint16_t* src = q_tile + chunk_offset<D, C::kSwizzle>(r, c);
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && c * 8 + e < p.head_dim; ++e) dst[e] = src[e];
    }
  }
}

// Launches one configuration for p.dtype (T) and p.causal; picks 16-byte copies when every
// row of Q, K, V and O starts on a 16-byte boundary and head_dim % 8 == 0. Mods: a type
// without score hooks (kActive false), e.g. module 11's SaveLse.
template <class Warp, class T, class C, class Batch = DenseBatch, class Mods = NoModifiers>
Status launch_config(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream, typename Batch::Args batch = {},
                     typename Mods::Args mods = {}) {
  static_assert(!Mods::kActive, "module 12 launches its hooked kernels itself");
  // The kernels need sm_80 (mma_primitives.cuh); the course also builds for sm_75.
  if (Status s = require_sm80("module 07"); !s) return s;  // common/device.h
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 07: more than 2^31 - 1 blocks");
  const bool vec = p.head_dim % 8 == 0 && rows_aligned16(q, p.q, 2) &&
                   rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
                   rows_aligned16(o, p.o, 2);
  const float scale_log2 = p.softmax_scale() * kLog2e;
  using Kernel = void (*)(Problem, float, int, const uint16_t*, const uint16_t*,
                          const uint16_t*, uint16_t*, typename Batch::Args,
                          typename Mods::Args);
  // [causal][vec]
  static const Kernel kernels[2][2] = {
      {flash_tc_kernel<Warp, T, C, false, false, Batch, Mods>,
       flash_tc_kernel<Warp, T, C, false, true, Batch, Mods>},
      {flash_tc_kernel<Warp, T, C, true, false, Batch, Mods>,
       flash_tc_kernel<Warp, T, C, true, true, Batch, Mods>}};
  // Above 48 KB of shared memory a kernel must opt in, once per kernel.
  const cudaError_t opt_in = device::allow_shared_memory(
      C::kSmemBytes, kernels[0][0], kernels[0][1], kernels[1][0], kernels[1][1]);
  ATTN_CUDA_RETURN(opt_in);
  kernels[p.causal ? 1 : 0][vec ? 1 : 0]<<<unsigned(blocks), C::kThreads, C::kSmemBytes,
                                           stream>>>(
      p, scale_log2, int(query_blocks), static_cast<const uint16_t*>(q),
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), static_cast<uint16_t*>(o),
      batch, mods);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The production configurations, the fastest measured on the H100 (README, section 5):
// D = 64: 4 warps x 32 rows (every K and V fragment feeds 4 mma), 64-key tiles, Q in
//   registers, two stages, 2 blocks per SM, heads first.
// D = 128: 4 warps x 32 rows, 64-key tiles, Q re-read from shared memory (O and S take 192
//   registers), FlashAttention-2's copy order, 2 blocks per SM, heads first.
// Heads first (kQBlocksFast = false) at D = 64: the ladder measured it as fast as query blocks
// first without the mask and 6% faster with it (rung fa2_pipeline against qblocks_fast).
using Config64 = Config<64, 4, 2, 64, 2, true, Pipeline::two_stage, true, false>;
using Config128 = Config<128, 4, 2, 64, 2, true, Pipeline::fa2, false, false>;

template <class Warp, class C64, class C128>
Status launch_for_head_dim(const Problem& p, const void* q, const void* k, const void* v,
                           void* o, cudaStream_t stream) {
  static_assert(C64::D == 64 && C128::D == 128, "one configuration per compiled head dim");
  if (p.dtype == DType::f32)  // fp32 tensors take the TF32 kernels (tf32_kernel.cuh)
    return Status::error("module 07's 16-bit kernel takes f16 or bf16 tensors, not f32");
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) {
    using C = std::conditional_t<decltype(d)::value == 64, C64, C128>;
    if (p.dtype == DType::bf16)
      return launch_config<Warp, __nv_bfloat16, C>(p, q, k, v, o, stream);
    return launch_config<Warp, __half, C>(p, q, k, v, o, stream);
  });
}

// forward() of the exercise and the solution: the production configurations.
template <class Warp>
Status launch(const Problem& p, const void* q, const void* k, const void* v, void* o,
              cudaStream_t stream) {
  return launch_for_head_dim<Warp, Config64, Config128>(p, q, k, v, o, stream);
}

}  // namespace attn::m07
