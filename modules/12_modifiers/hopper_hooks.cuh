// Module 12, given: the same ModifierSteps on module 09's Hopper kernel (wgmma, TMA, a producer
// warpgroup; modules/09_hopper/hopper_kernel.cuh, the places marked `Mods::kActive`). The
// hooks of modifier_hooks.cuh do the work; this file only adapts them to the wgmma
// accumulator and to the tiles a consumer warpgroup computes (README, section 5):
//   - a thread's scores of one K/V tile are s[kN / 2], 8-key chunk n in registers 4n .. 4n + 3
//     (rows lane / 4 and + 8, keys 2 (lane % 4) + {0, 1}): module 07's mma layout with the
//     chunks laid end to end, which the score and mask hooks read through score_at;
//   - a tile is classified for the warpgroup's 64 rows, because its four warps issue one wgmma
//     together: a tile fully visible to all 64 rows skips the mask, any other is masked score
//     by score; the block's range of tiles is narrowed for the producer and the consumers
//     alike (block_tiles), and each consumer warpgroup computes only the part of it that its
//     own 64 rows see (block_tiles again, for those rows: the kernel waits for the other
//     tiles and releases them);
//   - what a modifier reads from memory (the bias tile; T5's values by distance) each consumer
//     warp copies for its 16 rows of the next K/V tile into a buffer of its own (cp.async,
//     while this tile's softmax runs), and reads from shared memory: the bias with ldmatrix as
//     module 07's kernel does (add_bias_tile). Loaded from global memory per score instead,
//     the bias took 4-5x the time of the kernel without it
//     (docs/results/bench12_wgmma_first_h200.txt). A bias tile per ring slot, filled by the
//     producer, would not fit beside module 09's K/V ring at d = 128; 128-key tiles make room
//     for these.
// Documents (kDocuments) run here without a score modifier: their range of tiles is a search
// by a whole warp, so the producer's loop runs on a warp (kWarpRange), and each consumer warp
// searches for itself. RoPE (kRope, without a score modifier or documents): K arrives turned
// by the K pass, and each consumer warpgroup turns its rows of Q in shared memory (turn_q).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/device/convert.cuh"
#include "common/device/cp_async.cuh"
#include "common/problem.h"
#include "modules/09_hopper/hopper_kernel.cuh"
#include "modules/12_modifiers/modifier_hooks.cuh"

namespace attn::m12 {

template <class Steps, class T, ScoreMod kScore, bool kDocuments = false, bool kRope = false>
struct HopperHooks {
  static constexpr bool kActive = true;
  // The documents' range of tiles is a search by a whole warp (first_at_least).
  static constexpr bool kWarpRange = kDocuments;
  // The bias and T5's values are staged and added here (they are read from memory); ALiBi and
  // soft-capping by the hooks of module 07's kernel.
  static constexpr bool kStaged = kScore == ScoreMod::bias || kScore == ScoreMod::relative;
  static constexpr ScoreMod kHookScore = kStaged ? ScoreMod::none : kScore;
  using Mma = Hooks<Steps, T, kHookScore, RopeWhere::none, kDocuments>;
  struct Args {
    m12::Args mods;
    Problem p;
  };
  // What the hooks' templates read of a configuration: the keys of a tile.
  template <int kN>
  struct TileShape {
    static constexpr int kKeys = kN;
  };
  // Each consumer warp stages what its 16 rows x kBlockN keys of the next K/V tile read: the
  // bias tile (16-bit), or T5's values of the kBlockN + 15 distances j - i they span (float).
  template <class C>
  static constexpr int kWarpBytes = kScore == ScoreMod::bias ? 16 * C::kBlockN * 2
                                                             : (C::kBlockN + 16) * 4;
  template <class C>
  static constexpr int kExtraSmemBytes = kStaged ? 4 * C::kConsumers * kWarpBytes<C> : 0;

  // RoPE on this consumer warpgroup's 64 rows of the Q tile, in shared memory, once TMA has
  // landed it and before the first wgmma reads it; K arrives turned (the K pass,
  // entry_points.cuh). The tile is 64-column panels (kBlockM rows of 128 bytes each) in the
  // 128-byte swizzle: chunk c (features 8c .. 8c + 7) of row r lies in panel c / 8 at
  // r * 128 + ((c % 8) ^ (r % 8)) * 16. As in the K pass, a thread takes a chunk that leads its
  // pairs with its partner chunk (half-split: c + head_dim / 16, at d = 128 in the other panel
  // at the same place; interleaved: the chunk itself), one angle per pair (turn_lead_chunk),
  // and the convention is a template. The lead chunks are a row's first kLeads (head_dim / 8
  // interleaved, head_dim / 16 half: forward() sends a rope_pair with other lead chunks to
  // module 07's kernel), so the 128 threads take rows r0, r0 + 128 / kLeads, ..., kLeads / 2
  // rows each, a count known at compile time: a thread loads all its chunks, turns them (the
  // angles stepped from row to row), then stores them, so the rows' latencies overlap (a loop
  // over rows would wait on each row's load, sincos and store in turn, while the warpgroup's
  // tensor cores have nothing to do). Query row i turns at position i + seq_k - seq_q
  // (bottom-right aligned, as module 07's hooks and the reference do). Then each thread fences
  // (wgmma reads shared memory through the async proxy, which must see these generic stores)
  // and the warpgroup synchronises.
  template <class C>
  static __device__ __forceinline__ void turn_q(const Args& a, int first_row, uint32_t rows,
                                                int consumer) {
    if constexpr (kRope) {
      // The convention a compile-time constant: rope_pair then folds to constants per feature.
      if (a.mods.rope == RopeStyle::interleaved)
        turn_q_rows<C, RopeStyle::interleaved>(a, first_row, rows);
      else
        turn_q_rows<C, RopeStyle::half>(a, first_row, rows);
      m09::fence_shared_for_async_proxy();
      m09::named_barrier_sync(1 + consumer, 128);
    }
  }
  template <class C, RopeStyle kStyle>
  static __device__ __forceinline__ void turn_q_rows(const Args& a, int first_row,
                                                     uint32_t rows) {
    constexpr int kChunks = C::kHeadDim / 8;
    constexpr int kLeads = kStyle == RopeStyle::interleaved ? kChunks : kChunks / 2;
    constexpr int kStep = 128 / kLeads;
    constexpr int kRows = C::kRowsPerConsumer / kStep;  // rows per thread
    static_assert(128 % kLeads == 0 && C::kRowsPerConsumer % kStep == 0, "rows per thread");
    const int t = int(threadIdx.x) % 128, c = t % kLeads, r0 = t / kLeads;
    const int pc = Steps::rope_pair(kStyle, 8 * c, C::kHeadDim).partner / 8;
    float2 f[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = __ldg(a.mods.rope_features + e * kChunks + c);
    // Chunk `chunk` of row r0 + n kStep, in its panel, swizzled.
    const auto chunk_address = [&](int n, int chunk) {
      const int r = r0 + n * kStep;
      return rows + uint32_t((chunk / 8) * C::kBlockM * C::kRowBytes + r * C::kRowBytes +
                             (((chunk % 8) ^ (r % 8)) * 16));
    };
    uint4 own[kRows], other[kRows];
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(own[n].x), "=r"(own[n].y), "=r"(own[n].z), "=r"(own[n].w)
                   : "r"(chunk_address(n, c)));
      other[n] = own[n];  // interleaved: the partners are in this chunk
      if constexpr (kStyle == RopeStyle::half)
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(other[n].x), "=r"(other[n].y), "=r"(other[n].z), "=r"(other[n].w)
                     : "r"(chunk_address(n, pc)));
    }
    const int pos0 = first_row + r0 + a.p.seq_k - a.p.seq_q;
    // The first row's angles from sincos, each next row's from the last turned by kStep
    // positions (cos(a + b) = cos a cos b - sin a sin b, sin(a + b) = sin a cos b + cos a sin b):
    // four multiply-adds instead of two MUFU instructions, on the unit the softmax's exp2 needs.
    float cs[8], sn[8], step_c[8], step_s[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (!Steps::rope_pair(kStyle, 8 * c + e, C::kHeadDim).first) continue;
      rope_cos_sin(pos0, f[e], cs[e], sn[e]);
      rope_cos_sin(kStep, f[e], step_c[e], step_s[e]);
    }
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
      turn_packed_chunk<Steps, T>(
          kStyle, C::kHeadDim, c, pc,
          [&](int e, float& c_e, float& s_e) { c_e = cs[e], s_e = sn[e]; }, own[n], other[n]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (!Steps::rope_pair(kStyle, 8 * c + e, C::kHeadDim).first) continue;
        const float next_c = cs[e] * step_c[e] - sn[e] * step_s[e];
        sn[e] = sn[e] * step_c[e] + cs[e] * step_s[e];
        cs[e] = next_c;
      }
    }
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
      const uint32_t own_at = chunk_address(n, c), other_at = chunk_address(n, pc);
      if (kStyle == RopeStyle::half && pc != c)
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(other_at),
                     "r"(other[n].x), "r"(other[n].y), "r"(other[n].z), "r"(other[n].w)
                     : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(own_at), "r"(own[n].x),
                   "r"(own[n].y), "r"(own[n].z), "r"(own[n].w)
                   : "memory");
    }
  }

  static __device__ __forceinline__ void block_tiles(const Args& a, int b, int q0, int q_last,
                                                     int BN, int& first_tile, int& end_tile) {
    Mma::block_tiles(a.mods, a.p, b, q0, q_last, BN, first_tile, end_tile);
  }

  // This consumer warp's buffer (its 16 rows of the consumer's 64).
  template <class C>
  static __device__ __forceinline__ char* warp_buffer(char* smem) {
    return smem + (int(threadIdx.x) / 32 - 4) * kWarpBytes<C>;
  }

  // Copies what the K/V tile of key key0 reads into the warp's buffer, for rows warp_row0 ..
  // warp_row0 + 15.
  template <class C>
  static __device__ __forceinline__ void stage(const Args& a, int b, int h, int warp_row0,
                                               int key0, char* buffer) {
    if constexpr (kScore == ScoreMod::bias)
      copy_bias<C>(a, b, h, warp_row0, key0, reinterpret_cast<uint16_t*>(buffer));
    if constexpr (kScore == ScoreMod::relative)
      copy_distances<C>(a, h, warp_row0, key0, reinterpret_cast<float*>(buffer));
  }

  // The consumer's work tile starts with the K/V tile of key key0: stage its values.
  template <class C>
  static __device__ __forceinline__ void start(const Args& a, int b, int h, int first_row,
                                               int key0, char* smem) {
    if constexpr (kStaged)
      stage<C>(a, b, h, first_row + 16 * (int(threadIdx.x) / 32 % 4), key0, warp_buffer<C>(smem));
  }

  // One K/V tile of S for this thread's rows row0 and row0 + 8 (consumer rows first_row ..
  // first_row + 63): the modifier, then the mask. Every branch is the same for the warpgroup.
  // next_key0: the next tile's first key (-1: none), whose values are staged now.
  template <class C>
  static __device__ __forceinline__ void on_scores(const Args& a, int b, int h, int first_row,
                                                   int row0, int key0, int next_key0, int lane,
                                                   float (&s)[C::kBlockN / 2], char* smem) {
    constexpr int kN = C::kBlockN;
    bool active = true, partial = true;
    Mma::classify(a.mods, a.p, b, first_row, key0, kN, 64, active, partial);
    // A tile masked for all 64 rows goes through the mask, which sets every score to -inf. A
    // branch of its own that writes -inf costs more: the scores then take different registers
    // on the two paths while the products of P V still hold O and P, and ptxas spills (530 to
    // 720 bytes of stores a thread, compiled for sm_90a).
    if (!active) partial = true;
    if constexpr (kStaged) {
      char* buffer = warp_buffer<C>(smem);
      device::cp_async_wait_all();
      __syncwarp();  // every lane's copies have landed
      if constexpr (kScore == ScoreMod::bias)
        add_bias_tile<T, kN>(reinterpret_cast<const uint16_t*>(buffer), lane, a.mods.inv_scale, s);
      else
        add_distances<kN>(a, lane, reinterpret_cast<const float*>(buffer), s);
      if (next_key0 >= 0) stage<C>(a, b, h, row0 - lane / 4, next_key0, buffer);
    }
    Mma::template score<TileShape<kN>>(a.mods, a.p, b, h, row0, key0, lane, s, nullptr, 0, 0);
    if (partial) Mma::template mask<TileShape<kN>>(a.mods, a.p, b, row0, key0, lane, s);
  }

  // The bias of rows warp_row0 .. + 15 x keys key0 .. key0 + kN - 1 into the warp's buffer,
  // 16-byte chunks swizzled as the K tiles of module 07 are (chunk ^ row % 8: the 8 rows an
  // ldmatrix reads hit 32 banks); cp.async when rows move in 16-byte pieces, else element
  // loads. Zeros past seq_q and seq_k (the mask hides those keys; those rows are not stored).
  // Each warp copies and reads only its own rows: __syncwarp orders the two.
  template <class C>
  static __device__ __forceinline__ void copy_bias(const Args& a, int b, int h, int warp_row0,
                                                   int key0, uint16_t* tile) {
    constexpr int kN = C::kBlockN, kChunks = kN / 8, kRowStep = 32 / kChunks;
    static_assert(32 % kChunks == 0, "a row's chunks are copied by lanes of one warp");
    const Problem& p = a.p;
    const int lane = int(threadIdx.x) % 32, c = lane % kChunks, r0 = lane / kChunks;
    const int j = key0 + 8 * c;  // a lane copies chunk c of rows r0, r0 + kRowStep, ...
    const uint16_t* g = a.mods.bias + b * a.mods.bias_batch_stride + h * a.mods.bias_head_stride;
    const uint16_t* src = g + int64_t(warp_row0 + r0) * p.seq_k + j;
    const int64_t src_step = int64_t(kRowStep) * p.seq_k;
    __syncwarp();  // every lane has read the buffer's last tile
#pragma unroll
    for (int i = 0; i < 16 / kRowStep; ++i) {
      const int r = r0 + kRowStep * i, row = warp_row0 + r;
      uint16_t* dst = tile + r * kN + ((c ^ (r & 7)) << 3);
      if (a.mods.bias_vec) {
        const bool ok = row < p.seq_q && j < p.seq_k;
        device::cp_async_16(dst, ok ? src + i * src_step : g, ok);
      } else {
        uint16_t x[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = row < p.seq_q && j + e < p.seq_k ? src[i * src_step + e] : uint16_t(0);
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(x);
      }
    }
    device::cp_async_commit();
  }

  // T5: the values of distances j - i = key0 - warp_row0 - 15 + t, t = 0 .. kN + 14, for the
  // warp's 16 rows x kN keys (each row reads kN of them, shifted by its row), 4-byte cp.async.
  // The table is indexed as Hooks::score indexes it, clamped for rows past seq_q.
  template <class C>
  static __device__ __forceinline__ void copy_distances(const Args& a, int h, int warp_row0,
                                                        int key0, float* values) {
    constexpr int kValues = C::kBlockN + 15;
    const Problem& p = a.p;
    const int lane = int(threadIdx.x) % 32, last = p.seq_q + p.seq_k - 2;
    const float* table = a.mods.rel_bias + int64_t(h) * (last + 1);
    const int first = key0 - warp_row0 - 15 + p.seq_q - 1;  // the table index of t = 0
    __syncwarp();  // every lane has read the buffer's last tile
#pragma unroll
    for (int i = 0; i < (kValues + 31) / 32; ++i) {
      const int t = lane + 32 * i;
      if (t < kValues) device::cp_async_4(values + t, table + min(max(first + t, 0), last), true);
    }
    device::cp_async_commit();
  }

  // T5's value / scale added to each score: the score of row row0 + 8 r (row0 = warp_row0 +
  // lane / 4) and key key0 + 2 (lane % 4) + 8 n + e has t = 15 + 2 (lane % 4) - lane / 4 +
  // 8 (n - r) + e: one shared load at a constant offset from the lane's base, shared by the
  // two rows wherever n - r agrees.
  template <int kN>
  static __device__ __forceinline__ void add_distances(const Args& a, int lane,
                                                       const float* values, float (&s)[kN / 2]) {
    const float* base = values + 15 + 2 * (lane & 3) - lane / 4;
#pragma unroll
    for (int n = 0; n < kN / 8; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          score_at(s, n, 2 * r + e) =
              fmaf(base[8 * (n - r) + e], a.mods.inv_scale, score_at(s, n, 2 * r + e));
  }
};

}  // namespace attn::m12
