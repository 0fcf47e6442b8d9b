// Module 12, given: the hooks that put score modifiers, masks and RoPE into module 07's kernel
// (modules/07_tensor_cores/tensor_core_kernel.cuh, the places marked `Mods::kActive`). The
// ideas are in ModifierSteps, which the exercise (exercise.cu) and the solution write; the
// plumbing around them (where the hooks run, the bias tile in shared memory, which thread
// rotates which 16-byte chunk) is here; hopper_hooks.cuh adapts the same hooks to module 09's
// kernel. The rules are stated once in common/modifiers.h.
//
// Per K/V tile, per warp (README, section 2):
//   1. classify   the warp's 32 rows x the tile's 64 keys: all masked (skip the tile), all
//                 visible (no per-score test), or partial; the block's key range is narrowed
//                 the same way once, before the loop (block_tiles);
//   2. score      the modifier on each score, before the running max (README, section 1);
//   3. mask       -inf for every key a row does not see, on partial tiles only.
// RoPE (README, section 3): every thread rotates the 16-byte chunks of Q it copied itself,
// right after its own cp.async wait and before the barrier that publishes them (no extra
// barrier); K is rotated once per call before the kernel (entry_points.cuh), or, in the fully
// fused rung, tile by tile the same way as Q.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/device/convert.cuh"
#include "common/device/cp_async.cuh"
#include "common/modifiers.h"
#include "common/problem.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"

namespace attn::m12 {

enum class TileClass { masked, partial, full };

// Where RoPE turns the rows (README, section 3): nowhere; Q in the kernel and K once per call
// before it (rotate_keys_kernel, entry_points.cuh); or Q and every K tile in the kernel, as
// each block loads them (the fully fused rung, which bench_12 measures: every block turns
// every key it reads, seq_q / 128 times per key).
enum class RopeWhere { none, q, q_and_k };

// The causal-like rules of common/modifiers.h, as the kernel reads them (positions i' are
// bottom-right aligned: i' = i + seq_k - seq_q).
struct MaskRules {
  int causal = 0;  // key j needs j <= i' (or j < prefix)
  int prefix = 0;  // keys j < prefix are seen by every query (prefix-LM)
  int window = 0;  // > 0: key j needs j > i' - window (sliding window)
};

// The keys a query sees under the rules: [begin, end). Each rule gives an interval (causal and
// prefix an end, the window a beginning), so their AND is one. end may pass seq_k and begin
// may be negative: the kernel clips them.
struct KeySpan {
  int begin, end;
};

// RoPE: feature f turns together with feature `partner` by the angle pos * base^(-2m / d).
struct RopePair {
  int partner;
  int m;
  bool first;  // x_a of the pair: x_a' = x_a cos - x_b sin; else x_b: x_b' = x_a sin + x_b cos
};

// Everything the hooks read, passed to the kernel by value.
struct Args {
  MaskRules rules;
  const int32_t* seg_q = nullptr;  // [batch][seq_q], nondecreasing
  const int32_t* seg_k = nullptr;  // [batch][seq_k]
  float inv_scale = 1.0f;          // 1 / p.softmax_scale(): score() divides by the scale
  // Soft-capping: the cap (the launch's exponent scale) and scale / cap (score()).
  float softcap = 0.0f, inv_softcap = 0.0f;
  const uint16_t* bias = nullptr;  // p.dtype bits
  int64_t bias_batch_stride = 0, bias_head_stride = 0;
  int bias_vec = 0;  // rows of the bias move in 16-byte pieces (seq_k % 8 == 0, aligned)
  const float* rel_bias = nullptr;  // [heads][seq_q + seq_k - 1], by distance j - i'
  RopeStyle rope = RopeStyle::none;
  const float4* rope_table = nullptr;  // kMaxRopeFrequencies entries
  // Module 09's kernel turns Q as the K pass turns K (hopper_hooks.cuh): the angles in the
  // lanes' order (rope_feature_table).
  const float2* rope_features = nullptr;
};

// RoPE's table, per frequency m: x, y = base^(-2m / head_dim) / (2 pi) turns per position as
// a float pair (hi, lo) whose sum holds the double (the angle of position 16000 must be right
// to ~1e-6 turns, more than one float's 24 bits give at that size); z, w = cos and sin of the
// angle between two rows a thread rotates (kRowStep positions apart), to step from one row to
// the next with four FMAs instead of two MUFU instructions. Built on the host (rope_table in
// entry_points.cuh), read through Args::rope_table.
constexpr int kMaxRopeFrequencies = 64;  // head_dim / 2

template <class T>
__device__ __forceinline__ float bits_to_float(uint16_t x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(x));
  else return __bfloat162float(__ushort_as_bfloat16(x));
}
template <class T>
__device__ __forceinline__ uint16_t float_to_bits(float x) {
  if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(__float2half_rn(x));
  else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// cos and sin of turns * 2 pi, turns = pos * (hi + lo): the whole turns are removed in float
// with one rounding (fmaf of the exact product), so what reaches __sincosf is within half a
// turn, where its error is ~2^-21.
__device__ __forceinline__ void rope_cos_sin(int pos, float2 f, float& c, float& s) {
  const float x = float(pos);  // exact below 2^24
  const float whole = rintf(x * f.x);
  const float turns = fmaf(x, f.x, -whole) + x * f.y;
  __sincosf(turns * 6.28318530717958647692f, &s, &c);
}
__device__ __forceinline__ void rope_cos_sin(int pos, float4 f, float& c, float& s) {
  rope_cos_sin(pos, make_float2(f.x, f.y), c, s);
}

// A 16-byte chunk of eight 16-bit values as floats, and back (rounded to nearest), a 32-bit
// word (two values) at a time: a bf16 pair unpacks by two integer instructions, and one
// instruction converts and packs a pair back (device::pair_to_float2, m07::Elem::pack).
template <class T>
__device__ __forceinline__ void unpack_chunk(const uint4& v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = device::pair_to_float2<T>(w[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}
template <class T>
__device__ __forceinline__ uint4 pack_chunk(const float (&x)[8]) {
  using E = m07::Elem<T>;
  return make_uint4(E::pack(x[0], x[1]), E::pack(x[2], x[3]), E::pack(x[4], x[5]),
                    E::pack(x[6], x[7]));
}

// RoPE on a row's chunk c (features 8c .. 8c + 7), a chunk whose features lead their pairs
// (Steps::rope_pair), and its partner chunk pc, in place: the half-split partner is another
// chunk (`other`, at the same place in it), the interleaved one the next feature of this
// chunk (pc == c, `other` unused). One angle turns both features of a pair, x_a' = x_a cos -
// x_b sin and x_b' = x_a sin + x_b cos: one cos and sin per pair. cos_sin(e, cos, sin) gives
// the angle of feature 8c + e's pair at the row's position. Used by the K pass, module 09's Q
// tiles, the projection's split pass and its epilogue: each thread turns whole pairs.
template <class Steps, class CosSin>
__device__ __forceinline__ void turn_lead_chunk(RopeStyle style, int head_dim, int c, int pc,
                                                CosSin&& cos_sin, float (&own)[8],
                                                float (&other)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const RopePair pr = Steps::rope_pair(style, 8 * c + e, head_dim);
    if (!pr.first) continue;  // turned with its pair's first feature
    // Constant indices (the same place of the other chunk, or next door) keep the chunks in
    // registers.
    const bool same_place = pr.partner - 8 * pc == e;
    const float self = own[e], mate = same_place ? other[e] : own[e ^ 1];
    float cs, sn;
    cos_sin(e, cs, sn);
    const float turned_mate = self * sn + mate * cs;
    own[e] = self * cs - mate * sn;
    if (same_place)
      other[e] = turned_mate;
    else
      own[e ^ 1] = turned_mate;
  }
}

// turn_lead_chunk on chunks held packed (the K pass, Q's tiles, the projection's split pass):
// unpacked to floats, turned, packed back, so each value is rounded once.
template <class Steps, class T, class CosSin>
__device__ __forceinline__ void turn_packed_chunk(RopeStyle style, int head_dim, int c, int pc,
                                                  CosSin&& cos_sin, uint4& own, uint4& other) {
  float x[8], y[8];
  unpack_chunk<T>(own, x);
  unpack_chunk<T>(other, y);
  turn_lead_chunk<Steps>(style, head_dim, c, pc, cos_sin, x, y);
  own = pack_chunk<T>(x);
  other = pack_chunk<T>(y);
}

// The first indices of the nondecreasing ids seg[0 .. n) whose id is at least id[0] and id[1]
// (n if none), found by the 32 lanes of a warp together. Each step, every lane reads one of
// 32 evenly spaced ids of the range left, a ballot counts those below the id (a prefix of the
// lanes: the ids never decrease), and the range shrinks to one 32nd: 16384 keys take 3 steps
// of one load each. A binary search takes 14 dependent loads, each a trip to L2, on the path
// before the block's first copy. The two searches share each step's latency. Every lane of
// the warp calls it, with the same arguments (the ballot).
__device__ __forceinline__ void first_at_least(const int32_t* seg, int n, const int (&id)[2],
                                               int (&at)[2]) {
  const int lane = int(threadIdx.x) % 32;
  int lo[2] = {0, 0}, hi[2] = {n, n}, step[2];  // the answer lies in [lo, hi]
  while (lo[0] < hi[0] || lo[1] < hi[1]) {
    int probe[2], value[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // both loads first, then both ballots
      step[s] = (hi[s] - lo[s] + 31) / 32;
      probe[s] = lo[s] + lane * step[s];
      value[s] = probe[s] < hi[s] ? __ldg(seg + probe[s]) : 0;
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int below = __popc(__ballot_sync(0xffffffffu, probe[s] < hi[s] && value[s] < id[s]));
      if (below > 0) {  // the answer is past the last probe below it, and not past the next
        const int last = lo[s] + (below - 1) * step[s];
        lo[s] = last + 1;
        hi[s] = min(hi[s], last + step[s]);
      } else {  // the range's first id is not below: it is the answer (or the range is empty)
        hi[s] = lo[s];
      }
    }
  }
  at[0] = lo[0];
  at[1] = lo[1];
}

// A thread's scores of one K/V tile, 8-key chunk n, slot c (row lane / 4 + 8 (c / 2), key
// 8 n + 2 (lane % 4) + c % 2): module 07's mma tiles hold them as float[n][c], module 09's
// wgmma accumulator as float[4 n + c] (hopper_hooks.cuh). The hooks below read either.
template <int kChunks>
__device__ __forceinline__ float& score_at(float (&s)[kChunks][4], int n, int c) {
  return s[n][c];
}
template <int kRegisters>
__device__ __forceinline__ float& score_at(float (&s)[kRegisters], int n, int c) {
  return s[4 * n + c];
}

// The bias of one 16-row tile of scores added to them, over the softmax scale (the units of
// Hooks::score): `rows` holds the tile's 16 rows of kKeys 16-bit values, in 16-byte chunks
// swizzled chunk ^ row % 8, so the 8 rows an ldmatrix reads hit 32 banks. One ldmatrix.x4 per
// two 8-key chunks hands each lane the pairs of its own scores (row lane / 4 (+ 8), keys
// 2 (lane % 4) + {0, 1} of each chunk): the layout of the accumulator. Lanes 8m .. 8m + 7
// point at row 8 (m % 2) + lane % 8 of chunk n + m / 2. Both kernels' bias tiles are read so
// (Hooks::load_extras, hopper_hooks.cuh's copy_bias).
template <class T, int kKeys, class Scores>
__device__ __forceinline__ void add_bias_tile(const uint16_t* rows, int lane, float inv_scale,
                                              Scores& s) {
  const int m = lane / 8, row8 = lane % 8, half = m / 2;
  const uint32_t base = device::smem_u32(rows + (8 * (m % 2) + row8) * kKeys);
  uint32_t pairs[4];
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) {
    if (n % 2 == 0) m07::ldmatrix_x4(pairs, base + (((n + half) ^ row8) << 4));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float2 xy = device::pair_to_float2<T>(pairs[2 * (n % 2) + r]);
      score_at(s, n, 2 * r) = fmaf(xy.x, inv_scale, score_at(s, n, 2 * r));
      score_at(s, n, 2 * r + 1) = fmaf(xy.y, inv_scale, score_at(s, n, 2 * r + 1));
    }
  }
}

// kScore, kRope and kDocuments are compile-time: a kernel carries only the code of the
// modifiers it runs (module 07's kernel at D = 128 already uses all 255 registers; every extra
// live value in the loop would spill).
template <class Steps, class T, ScoreMod kScore, RopeWhere kRope, bool kDocuments>
struct Hooks {
  static constexpr bool kActive = true;
  static constexpr bool kStoresLse = false;
  using Args = m12::Args;
  // The bias tile has one buffer per K stage (two_stage: 2, fa2: 1): it travels with K.
  template <class C>
  static constexpr int kStages = C::kPipeline == m07::Pipeline::two_stage ? 2 : 1;
  template <class C>
  static constexpr int kBiasTileElems = C::kQueries * C::kKeys;
  template <class C>
  static constexpr int kExtraSmemBytes =
      kScore == ScoreMod::bias ? kStages<C> * kBiasTileElems<C> * 2 : 0;

  // The keys [first_tile * BC, end_tile * BC) the block visits: outside them every key is
  // masked for every query of the block. An empty range leaves first = end (output 0).
  static __device__ __forceinline__ void block_tiles(const Args& a, const Problem& p, int b,
                                                     int q0, int q_last, int BC,
                                                     int& first_tile, int& end_tile) {
    const int off = p.seq_k - p.seq_q;
    int lo = 0, hi = p.seq_k;
    if (a.rules.causal) hi = min(hi, max(max(q_last + off + 1, a.rules.prefix), 0));
    if (a.rules.window > 0) lo = max(lo, q0 + off - a.rules.window + 1);
    if constexpr (kDocuments) {
      const int32_t* sq = a.seg_q + int64_t(b) * p.seq_q;
      const int32_t* sk = a.seg_k + int64_t(b) * p.seq_k;
      const int ids[2] = {__ldg(sq + q0), __ldg(sq + q_last) + 1};
      int at[2];
      first_at_least(sk, p.seq_k, ids, at);
      lo = max(lo, at[0]);
      hi = min(hi, at[1]);
    }
    first_tile = hi > lo ? lo / BC : 0;
    end_tile = hi > lo ? (hi + BC - 1) / BC : 0;
  }

  // The warp's rows [warp_q0, warp_q0 + rows) x keys [key0, key0 + BC): skip it (active =
  // false), or compute it with (partial) or without the per-score mask. Keys past seq_k
  // always need the mask. The same for every lane: no divergence.
  static __device__ __forceinline__ void classify(const Args& a, const Problem& p, int b,
                                                  int warp_q0, int key0, int BC, int rows,
                                                  bool& active, bool& partial) {
    if (warp_q0 >= p.seq_q) {
      active = partial = false;
      return;
    }
    const int off = p.seq_k - p.seq_q;
    const int r_hi = min(warp_q0 + rows, p.seq_q) - 1;
    const int k_hi = min(key0 + BC, p.seq_k) - 1;
    TileClass c = Steps::classify(a.rules, warp_q0 + off, r_hi + off, key0, k_hi);
    if (kDocuments && c != TileClass::masked) {
      const int32_t* sq = a.seg_q + int64_t(b) * p.seq_q;
      const int32_t* sk = a.seg_k + int64_t(b) * p.seq_k;
      const TileClass d = Steps::classify_documents(__ldg(sq + warp_q0), __ldg(sq + r_hi),
                                                    __ldg(sk + key0), __ldg(sk + k_hi));
      if (d != TileClass::full) c = d;  // the AND: masked or partial wins over full
    }
    active = c != TileClass::masked;
    partial = c != TileClass::full || key0 + BC > p.seq_k;
  }

  // -inf for the keys rows row0 and row0 + 8 do not see, in one 16-row tile of S (the lane
  // layout of module 07: keys key0 + 8n + 2 (lane % 4) + {0, 1}). Each row's span is computed
  // once, relative to the lane's first key: a score then costs two compares with the constant
  // 8n + e and a select, as module 07's causal mask (one compare) does, whatever the rules.
  template <class C, class Scores>
  static __device__ __forceinline__ void mask(const Args& a, const Problem& p, int b, int row0,
                                              int key0, int lane, Scores& s) {
    const int off = p.seq_k - p.seq_q;
    const int key_lane = key0 + 2 * (lane & 3);
    int lo[2], hi[2], seg_row[2] = {0, 0};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const KeySpan span = Steps::visible_keys(a.rules, row0 + 8 * r + off);
      lo[r] = max(span.begin, 0) - key_lane;
      hi[r] = min(span.end, p.seq_k) - key_lane;
      if constexpr (kDocuments)
        seg_row[r] = __ldg(a.seg_q + int64_t(b) * p.seq_q + min(row0 + 8 * r, p.seq_q - 1));
    }
    const int32_t* sk = a.seg_k + int64_t(b) * p.seq_k;
#pragma unroll
    for (int n = 0; n < C::kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int dj = 8 * n + e;  // the key's offset from key_lane: a constant
        const int seg_j =
            kDocuments && key_lane + dj < p.seq_k ? __ldg(sk + key_lane + dj) : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const bool seen = dj >= lo[r] && dj < hi[r] && (!kDocuments || seg_j == seg_row[r]);
          if (!seen) score_at(s, n, 2 * r + e) = -INFINITY;
        }
      }
  }

  // The score modifier on one 16-row tile of S: raw q.k in, the modified logit divided by the
  // softmax scale out, so that the softmax keeps the scale in its exponent's FFMA as module 07
  // does (README, section 1): ALiBi's slope, the bias and T5's values are divided by the
  // scale. Soft-capping hands out tanh(scale s / cap) alone: cap * tanh, the logit, is that
  // times cap, and the launch puts cap (not the scale) into the exponent. tile_row: the tile's
  // first row in the block (for the bias tile in shared memory).
  template <class C, class Scores>
  static __device__ __forceinline__ void score(const Args& a, const Problem& p, int b, int h,
                                               int row0, int key0, int lane, Scores& s,
                                               char* extra, int stage, int tile_row) {
    if constexpr (kScore == ScoreMod::none) return;
    const int off = p.seq_k - p.seq_q;
    const int key_lane = key0 + 2 * (lane & 3);
    [[maybe_unused]] float slope = 0.f;  // in raw q.k units: slope / scale
    if constexpr (kScore == ScoreMod::alibi) slope = Steps::alibi_slope(h, p.heads) * a.inv_scale;
    [[maybe_unused]] const float* rel = a.rel_bias + int64_t(h) * (p.seq_q + p.seq_k - 1);
    if constexpr (kScore == ScoreMod::bias) {  // tile_row % 16 == 0: rows keep their swizzle
      add_bias_tile<T, C::kKeys>(reinterpret_cast<const uint16_t*>(extra) +
                                     (stage % kStages<C>) * kBiasTileElems<C> +
                                     tile_row * C::kKeys,
                                 lane, a.inv_scale, s);
    } else {
#pragma unroll
      for (int n = 0; n < C::kKeys / 8; ++n) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = row0 + 8 * r;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = key_lane + 8 * n + e;
            float x = score_at(s, n, 2 * r + e);
            if constexpr (kScore == ScoreMod::alibi) x = Steps::alibi(x, slope, i + off - j);
            if constexpr (kScore == ScoreMod::softcap)  // the literal 1: no multiply by the cap
              x = Steps::softcap(x, 1.0f, a.inv_softcap);
            if constexpr (kScore == ScoreMod::relative)  // clamped: padding rows and keys
              x = fmaf(__ldg(rel + min(max(j - i + p.seq_q - 1, 0), p.seq_q + p.seq_k - 2)),
                       a.inv_scale, x);
            score_at(s, n, 2 * r + e) = x;
          }
        }
      }
    }
  }

  // Starts the copy of the bias rows of the block's queries x keys of tile t into stage
  // `stage`'s buffer (16-byte cp.async, or element loads when the rows are not aligned),
  // swizzled as the K tiles are (chunk ^ row % 8): the 8 rows an ldmatrix reads in score()
  // hit 32 banks. A thread copies one chunk column c of rows r0, r0 + kRowStep, ...: the
  // count is a constant (the loop unrolls) and, kRowStep being a multiple of 8, every row of
  // the thread has the same swizzled place: one address, stepped by a constant.
  template <class C>
  static __device__ __forceinline__ void load_extras(const Args& a, const Problem& p, int b,
                                                     int h, int q0, int t, char* extra,
                                                     int stage) {
    if constexpr (kScore != ScoreMod::bias) return;
    constexpr int BC = C::kKeys, kChunks = BC / 8, kRowStep = C::kThreads / kChunks;
    static_assert(kChunks == 8, "the swizzle permutes 8 chunks per row");
    static_assert(kRowStep % 8 == 0 && C::kQueries % kRowStep == 0,
                  "a thread's rows share row % 8, and the rows split evenly over the threads");
    uint16_t* tile = reinterpret_cast<uint16_t*>(extra) + (stage % kStages<C>) * kBiasTileElems<C>;
    const uint16_t* g = a.bias + b * a.bias_batch_stride + h * a.bias_head_stride;
    const int c = int(threadIdx.x) % kChunks, r0 = int(threadIdx.x) / kChunks;
    const int j = t * BC + 8 * c;
    uint16_t* dst = tile + r0 * BC + ((c ^ (r0 & 7)) << 3);
    const uint16_t* src = g + int64_t(q0 + r0) * p.seq_k + j;
    const int64_t src_step = int64_t(kRowStep) * p.seq_k;
    if (a.bias_vec) {
#pragma unroll
      for (int n = 0; n < C::kQueries / kRowStep; ++n) {
        const bool ok = q0 + r0 + n * kRowStep < p.seq_q && j < p.seq_k;
        device::cp_async_16(dst + n * kRowStep * BC, ok ? src + n * src_step : g, ok);
      }
    } else {
#pragma unroll 1
      for (int n = 0; n < C::kQueries / kRowStep; ++n) {
        const bool row_ok = q0 + r0 + n * kRowStep < p.seq_q;
        uint16_t x[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = row_ok && j + e < p.seq_k ? src[n * src_step + e] : uint16_t(0);
        *reinterpret_cast<uint4*>(dst + n * kRowStep * BC) = *reinterpret_cast<const uint4*>(x);
      }
    }
  }

  // RoPE on the rows of a Q or K tile that this thread copied (module 07's load_tile: chunk
  // threadIdx % (D/8) of rows threadIdx / (D/8) + n * kRowStep), in place. Row r of the tile
  // is at position pos_first + r (+ seq_k - seq_q for Q). The half-split pairs a chunk with
  // another lane's chunk of the same row: all lanes read, __syncwarp, then write. The angles
  // of the first row come from sincos; each next row's from the previous one turned by
  // kRowStep positions (the table's step): the special-function unit is the softmax's.
  template <class C, int kRows>
  static __device__ __forceinline__ void rotate(const Args& a, const Problem& p, uint16_t* tile,
                                                int pos_first, bool is_q) {
    if constexpr (kRope == RopeWhere::none) return;
    if (kRope == RopeWhere::q && !is_q) return;
    constexpr int kChunks = C::D / 8, kRowStep = C::kThreads / kChunks;
    const int c = int(threadIdx.x) % kChunks, r0 = int(threadIdx.x) / kChunks;
    const int pos0 = pos_first + r0 + (is_q ? p.seq_k - p.seq_q : 0);
    const bool mine = c * 8 < p.head_dim;
    const int pc = mine ? Steps::rope_pair(a.rope, 8 * c, p.head_dim).partner / 8 : c;
    float cs[8], sn[8], step_c[8], step_s[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float4 f =
          __ldg(a.rope_table + (mine ? Steps::rope_pair(a.rope, 8 * c + e, p.head_dim).m : 0));
      rope_cos_sin(pos0, f, cs[e], sn[e]);
      step_c[e] = f.z, step_s[e] = f.w;
    }
    __syncwarp();  // the partner lanes' own copies have landed (their waits came first)
#pragma unroll 1
    for (int n = 0; n < kRows / kRowStep; ++n) {
      const int r = r0 + n * kRowStep;
      uint16_t* own_ptr = tile + m07::chunk_offset<C::D, C::kSwizzle>(r, c);
      const uint4 own = *reinterpret_cast<const uint4*>(own_ptr);
      const uint4 other =
          *reinterpret_cast<const uint4*>(tile + m07::chunk_offset<C::D, C::kSwizzle>(r, pc));
      __syncwarp();  // every lane has read its partner's chunk before any lane writes
      const uint16_t* x = reinterpret_cast<const uint16_t*>(&own);
      const uint16_t* y = reinterpret_cast<const uint16_t*>(&other);
      uint16_t out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const RopePair pr = Steps::rope_pair(a.rope, 8 * c + e, p.head_dim);
        // The partner sits at the same place of the other chunk (half) or next door in this
        // one (interleaved): two constant indices keep x and y in registers.
        const float self = bits_to_float<T>(x[e]);
        const float mate = bits_to_float<T>(pr.partner - 8 * pc == e ? y[e] : y[e ^ 1]);
        out[e] = float_to_bits<T>(pr.first ? self * cs[e] - mate * sn[e]
                                           : mate * sn[e] + self * cs[e]);
        const float next_c = cs[e] * step_c[e] - sn[e] * step_s[e];
        sn[e] = sn[e] * step_c[e] + cs[e] * step_s[e];
        cs[e] = next_c;
      }
      if (mine) *reinterpret_cast<uint4*>(own_ptr) = *reinterpret_cast<const uint4*>(out);
    }
  }
};

}  // namespace attn::m12
