// Module 09's given pipeline: a FlashAttention-3 style forward kernel for Hopper.
//
// A work tile is one block of query rows (kBlockM = 64 per consumer warpgroup) of one
// (batch, head). A thread block runs 1 + kConsumers warpgroups of 128 threads:
//   warpgroup 0, the producer: one thread issues every copy (TMA): the work tile's Q, then its
//                 K and V tiles into a ring of kStages shared-memory slots.
//   warpgroups 1 .. kConsumers: each owns 64 query rows and runs the online softmax of
//                 modules 03/07 on its wgmma accumulators, then stores its rows of O.
// A block does one work tile, or (Config::kPersistent) one block per SM walks the work tiles.
// Barriers in shared memory hand each ring slot back and forth (section 4 of the lesson):
//   full[s]:  completes when slot s's bytes have landed (the copy engine counts them);
//   empty[s]: completes when every consumer warp has finished reading slot s;
// and q_full / q_empty do the same for Q, once per work tile.
// Shared memory holds every tile as 64-column panels of 128-byte rows in the 128-byte
// swizzle, the layout both the copy engine and wgmma understand (hopper_ptx.cuh).
//
// What the learner writes (exercise.cu, HopperSteps): the two products with their matrix
// descriptors, and the producer's and consumers' side of the barrier protocol. Everything
// else (the schedule of the products, softmax, masks, tensor maps, the launch) is here.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (the types only: no libcuda link)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/device/math.cuh"
#include "common/device/shared_memory.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/09_hopper/hopper.h"
#include "modules/09_hopper/hopper_ptx.cuh"
#include "modules/09_hopper/tensor_maps.h"
#include "modules/09_hopper/wgmma_ops.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_M09_DEVICE_CODE 1  // this compilation pass targets sm_90a: wgmma and setmaxnreg exist
#else
#define ATTN_M09_DEVICE_CODE 0
#endif

namespace attn::m09 {

// ---- Tile shapes and the shared-memory plan ----------------------------------------------------

// The schedule of the consumers' work (README section 5):
//   serial:   S = Q K^T, wait, softmax, O += P V, wait: the tensor cores idle during softmax;
//   overlap:  S for tile j+1 is issued together with O += P V for tile j, and the softmax of
//             tile j+1 runs while the tensor cores do P V (FlashAttention-3's intra-warpgroup
//             overlap);
//   pingpong: overlap, and the consumer warpgroups take turns to issue their products (named
//             barriers), so one warpgroup's softmax runs under another's matrix products.
enum class Schedule { serial, overlap, pingpong };

template <int kHeadDim_, int kBlockN_ = 128, int kConsumers_ = 2,
          Schedule kSchedule_ = Schedule::pingpong, int kStages_ = 2, bool kPersistent_ = true,
          bool kHeadsFirst_ = false, bool kTimeline_ = false, bool kSeparateO_ = false,
          bool kDynamic_ = false>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;       // consumer warpgroups
  static constexpr int kRowsPerConsumer = 64;           // one wgmma is 64 rows tall
  static constexpr int kBlockM = kConsumers * kRowsPerConsumer;  // query rows per block
  static constexpr int kBlockN = kBlockN_;              // keys per K/V tile
  static constexpr int kStages = kStages_;              // K/V ring slots
  static constexpr Schedule kSchedule = kSchedule_;
  // Persistent: one block per SM walks the work tiles (the producer loads the next tile while
  // the consumers store the last one); otherwise one block per work tile.
  static constexpr bool kPersistent = kPersistent_;
  // The order of the work tiles. Query blocks first: neighbouring work tiles are the query
  // blocks of one head, which read the same K and V, so those come from L2 instead of memory.
  // Heads first: neighbouring work tiles are the same query block of different heads, so with
  // the causal mask all the longest tiles start first (better balance, less L2 reuse).
  static constexpr bool kHeadsFirst = kHeadsFirst_;
  // Records when each consumer of one block starts issuing, sees S, finishes the softmax and
  // sees P V complete (bench_09 --timeline draws it; off in forward()).
  static constexpr bool kTimeline = kTimeline_;
  // O staged in its own tile instead of Q's rows: Q is released as soon as the work tile's last
  // S = Q K^T has completed, so the next work tile's Q loads while this one finishes (worth it
  // with a persistent grid, where the next work tile follows in the same block).
  static constexpr bool kSeparateO = kSeparateO_;
  // A dynamic tile scheduler (with kPersistent): a block's first work tile is blockIdx.x, and
  // each next one is whichever comes next in a global counter that the producer advances with
  // an atomic add, so a block that drew short tiles simply draws more of them. Together with
  // kHeadsFirst (the longest causal tiles first) this is the longest-first greedy schedule; a
  // static round robin instead gives each block a fixed share, however long its tiles are.
  static constexpr bool kDynamic = kDynamic_;
  static_assert(!kDynamic || kPersistent, "the dynamic scheduler feeds a persistent grid");
  // A tile whose right half no row of a consumer may see (past its causal diagonal or past
  // seq_k) skips that half's exponentials. Measured (bench_09, both ways in one run): 1-3%
  // faster at d = 128, but 3-5% slower at d = 64 even where no half is hidden (most likely
  // the second copy of the softmax the skip needs, in consumers held to 160 registers).
  static constexpr bool kSkipHiddenHalf = kHeadDim >= 128;
  // Lazy rescaling (softmax_exponentials): the running maximum moves only when a tile's
  // exceeds it by more than 2^8, so most tiles skip O *= correction. Measured the same way:
  // 1-4% faster at d = 128, 1-3.5% slower at d = 64 (the same register story).
  static constexpr bool kLazyRescale = kHeadDim >= 128;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kPanelCols = 64;                 // 64 16-bit values = one 128-byte row
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = 128;
  static_assert(kHeadDim % kPanelCols == 0 && kBlockN % 16 == 0 && kBlockN <= 256, "tile shape");

  // Byte offsets inside the (1024-byte aligned) dynamic shared memory.
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 2;
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * 2;  // one K (or V) tile
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr uint32_t kOOffset = kVOffset + kStages * kKVBytes;  // if kSeparateO
  static constexpr uint32_t kBarrierOffset = kOOffset + (kSeparateO ? kQBytes : 0);
  // q_full, q_empty, k/v full/empty per slot, work_full
  static constexpr int kBarriers = 3 + 4 * kStages;
  static constexpr uint32_t kFlagOffset = kBarrierOffset + kBarriers * 8;  // the gave-up word
  // kDynamic: the work tile of each Q fill, two words (by the fill's parity), written by the
  // producer before its arrive on work_full (SharedPlan::set_work).
  static constexpr uint32_t kWorkOffset = kFlagOffset + 8;
  static constexpr uint32_t kSharedBytes = kWorkOffset + 8 + 1024;  // + alignment slack
  static_assert(kBlockN * kRowBytes % 1024 == 0, "every panel must start on a 1024-byte boundary");
  static_assert(kSharedBytes <= 227 * 1024, "more shared memory than an SM has");

  // Registers per thread after setmaxnreg (the SM has 65536 = 128 x 512 per warpgroup-lane):
  // the producer keeps few, the consumers hold the S and O accumulators (kBlockN/2 +
  // kHeadDim/2 floats) and P. Two consumers: 128 x (24 + 2 x 240) = 64512; three:
  // 128 x (32 + 3 x 160) = 65536.
  static constexpr int kProducerRegisters = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
};

// The block's barriers. Q has two (full, empty: refilled for each work tile); each ring slot
// has four.
enum Barrier : int {
  q_full = 0, k_full = 1, k_empty = 2, v_full = 3, v_empty = 4, q_empty = 5,
  work_full = 6  // kDynamic: the next work tile's number is in shared memory
};
// (barrier_name() in hopper.h names them in this order.)
// Where one block's tiles and barriers live (shared-memory addresses, as wgmma and TMA take
// them), and the barrier operations by name: plan.wait(k_full, slot, phase).
template <class C>
struct SharedPlan {
  using Config = C;
  uint32_t base;
  HangReport* hang;  // where a stuck wait reports (mapped host memory)

  __device__ uint32_t q() const { return base + C::kQOffset; }
  __device__ uint32_t o() const { return base + (C::kSeparateO ? C::kOOffset : C::kQOffset); }
  __device__ uint32_t k(int slot) const { return base + C::kKOffset + slot * C::kKVBytes; }
  __device__ uint32_t v(int slot) const { return base + C::kVOffset + slot * C::kKVBytes; }
  __device__ uint32_t barrier(Barrier b, int slot = 0) const {
    const int index = b == q_full      ? 0
                      : b == q_empty   ? 1
                      : b == work_full ? C::kBarriers - 1
                                       : 2 + (b - 1) * C::kStages + slot;
    return base + C::kBarrierOffset + 8 * index;
  }
  __device__ void wait(Barrier b, int slot, uint32_t phase) const {
    mbarrier_wait(barrier(b, slot), phase, hang, b, slot, base + C::kFlagOffset);
  }
  // True once a wait of this block has given up (see mbarrier_wait).
  __device__ bool gave_up() const {
    uint32_t flag;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(flag) : "r"(base + C::kFlagOffset) : "memory");
    return flag != 0;
  }
  __device__ void arrive(Barrier b, int slot) const { mbarrier_arrive(barrier(b, slot)); }
  // kDynamic: the work tile of Q fill `fill` (-1: no more work). The producer writes it, then
  // arrives on work_full (an arrive releases the thread's earlier writes to the block); the
  // consumers read it after their wait on work_full (which acquires them). Two words, by the
  // fill's parity: the producer writes fill f + 2's word only after q_empty has told it that
  // the consumers are done with fill f + 1, so long after they read fill f's.
  // Both are atomic (an exchange; an OR with 0, by one lane of the warp, which hands the value
  // to the others) although the barriers order them: as ordinary shared-memory accesses,
  // compute-sanitizer's racecheck reported every rewrite of a word as a race with its last
  // reads (it does not count an mbarrier's arrive and wait as ordering them). One atomic per
  // warp: 384 on one word, one per consumer thread, made module 12's kernels 9% slower.
  __device__ void set_work(uint32_t fill, int work) const {
    int old;
    asm volatile("atom.shared.exch.b32 %0, [%1], %2;"
                 : "=r"(old)
                 : "r"(base + C::kWorkOffset + 4 * (fill & 1)), "r"(work)
                 : "memory");
  }
  __device__ int work(uint32_t fill) const {  // every lane of the warp calls it
    int w = 0;
    if (threadIdx.x % 32 == 0)
      asm volatile("atom.shared.or.b32 %0, [%1], 0;"
                   : "=r"(w)
                   : "r"(base + C::kWorkOffset + 4 * (fill & 1))
                   : "memory");
    return __shfl_sync(0xffffffffu, w, 0);
  }
  __device__ void arrive_expect_bytes(Barrier b, int slot, uint32_t bytes) const {
    mbarrier_arrive_expect_bytes(barrier(b, slot), bytes);
  }
};

// The four tensor maps (built on the host, passed by value as __grid_constant__ parameters:
// the copy engine reads them from the kernel's parameter space) and the problem's sizes.
struct TensorMaps {
  CUtensorMap q, k, v, o;
};

struct KernelArgs {
  int batch, heads, kv_heads, seq_q, seq_k;
  int m_blocks;      // ceil(seq_q / kBlockM)
  int work_tiles;    // m_blocks * heads * batch: the (query block, head, batch) tiles to do
  float scale_log2;  // softmax_scale * log2(e): scores in base-2 units
  HangReport* hang;  // mapped host memory: see hang_report()
  long long* timeline = nullptr;  // Config::kTimeline: clock64() stamps, see stamp()
  // Config::kDynamic: {next work tile - gridDim.x, blocks finished}, zero at launch; the last
  // block to finish sets both back to zero for the next launch (work_counter_buffer()).
  int* work_counter = nullptr;
  int timeline_block = 0;         // the block that records
};

// The timeline of one block (Config::kTimeline): for consumer c and loop step j < kTimelineSteps,
// four clock64() stamps (the SM's cycle counter: one clock for all warps of the block):
//   issue    the consumer starts issuing its products (after its turn, with ping-pong)
//   s_ready  S of the next tile has completed (the serial schedule: S of this tile)
//   softmax  the softmax of that tile is done
//   pv_done  P V has completed
enum TimelineEvent : int { issue = 0, s_ready = 1, softmax_done = 2, pv_done = 3 };
constexpr int kTimelineSteps = 64, kTimelineEvents = 4;

template <class C>
__device__ inline void stamp(const KernelArgs& a, int consumer, int step, TimelineEvent e) {
  if constexpr (C::kTimeline) {
    if (static_cast<int>(blockIdx.x) == a.timeline_block && threadIdx.x % 128 == 0 &&
        step < kTimelineSteps)
      a.timeline[(consumer * kTimelineSteps + step) * kTimelineEvents + e] = clock64();
  }
}

// The K/V tile j of this block lives in ring slot j % kStages; its `use`-th fill is
// j / kStages, and the barriers' phase parity for that fill is use % 2.
struct RingPosition {
  int slot;
  uint32_t phase;
  __device__ RingPosition(int tile, int stages) : slot(tile % stages), phase((tile / stages) & 1) {}
};

// Number of K/V tiles block `m_block` must visit: all of them, or with the causal mask up to
// the last key its last row may see (bottom-right alignment, as in module 04).
template <class C, bool kCausal>
__device__ inline int kv_tiles_for_block(const KernelArgs& a, int m_block) {
  int keys = a.seq_k;
  if (kCausal) {
    const int last_row = min(a.seq_q, (m_block + 1) * C::kBlockM) - 1;
    keys = min(a.seq_k, max(0, last_row + (a.seq_k - a.seq_q) + 1));
  }
  return (keys + C::kBlockN - 1) / C::kBlockN;
}

// Module 12 puts its score modifiers and masks into this kernel through a Mods type, with
// hooks at the places marked `Mods::kActive` (modules/12_modifiers/hopper_hooks.cuh):
//   block_tiles  the K/V tiles a work tile visits (a mask narrows them, as kCausal does);
//   start        a consumer's first K/V tile is next (what the tile reads is copied ahead);
//   turn_q       the consumer's rows of Q have landed (RoPE turns them in shared memory);
//   on_scores    a tile of S as the wgmma left it: the modifier on each score, the mask where
//                the tile needs it, before the online softmax;
//   kExtraSmemBytes<C>  shared memory of its own, after the kernel's (those copies);
//   kWarpRange   block_tiles needs a whole warp (the producer's loop then runs on one).
// Module 09 itself runs without: NoMods.
struct NoMods {
  static constexpr bool kActive = false;
  static constexpr bool kWarpRange = false;
  struct Args {};
  template <class C>
  static constexpr int kExtraSmemBytes = 0;
};

// The K/V tiles of one work tile: [first, first + count).
struct KvTiles {
  int first, count;
};
// Module 12: the K/V tiles that rows [q0, q0 + rows) see under its mask (the rows past seq_q
// left out; none if q0 is past it).
template <class C, class Mods>
__device__ inline KvTiles tiles_seen_by(const KernelArgs& a, const typename Mods::Args& mods,
                                        int batch, int q0, int rows) {
  int first = 0, end = 0;
  if (q0 < a.seq_q)
    Mods::block_tiles(mods, batch, q0, min(q0 + rows, a.seq_q) - 1, C::kBlockN, first, end);
  return {first, end - first};
}
template <class C, bool kCausal, class Mods>
__device__ inline KvTiles kv_tiles_of(const KernelArgs& a, const typename Mods::Args& mods,
                                      int m_block, int batch) {
  if constexpr (Mods::kActive) {
    return tiles_seen_by<C, Mods>(a, mods, batch, m_block * C::kBlockM, C::kBlockM);
  } else {
    return {0, kv_tiles_for_block<C, kCausal>(a, m_block)};
  }
}

// The rows of one tensor (Q, K or V) as the passes that prepare the FP8 and 3xTF32 rungs'
// tensors walk them (fp8_kernel.cuh, tf32_kernel.cuh): row r of batch * heads * seq rows, with
// the tensor's own strides.
struct RowWalk {
  const void* base;
  Strides s;
  int heads, seq;
  __device__ int64_t offset(int64_t row) const {
    const int i = static_cast<int>(row % seq);
    const int64_t bh = row / seq;
    return Problem::offset(s, static_cast<int>(bh / heads), static_cast<int>(bh % heads), i);
  }
};

// ---- Consumer helpers: the online softmax on wgmma accumulators --------------------------------
//
// A consumer thread holds, for each 8-column block j of a 64 x N accumulator, registers
// 4j..4j+3: rows row0 = 16*warp + lane/4 (r = 0, 1) and row0 + 8 (r = 2, 3), columns
// 8j + 2*(lane%4) + r%2. So each thread owns two rows, and the four threads of a quad
// (lanes 4i..4i+3) share them: row reductions are two shuffles.

__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <bool kBf16>
__device__ inline uint32_t pack_pair(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Sets the scores of keys this thread's rows may not see to -inf: keys past seq_k (the last
// tile is zero-filled by TMA, and a zero score is not "no key"), and with kCausal the keys
// after the diagonal. Register i holds key key0 + 2*(lane%4) + 8*(i/4) + i%2: the last part is
// a constant once the loop is unrolled, so each row gets one bound (the last visible key,
// counted from this thread's first column) and each score costs one compare and one select.
// (This matters at d = 64, where the softmax and not the tensor cores sets the pace.)
template <int kN, bool kCausal>
__device__ inline void mask_scores(float (&s)[kN / 2], const KernelArgs& a, int row0, int key0,
                                   int lane) {
  const int thread_key0 = key0 + 2 * (lane % 4);
  int last_visible[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int last = a.seq_k - 1;
    if (kCausal) last = min(last, row0 + 8 * r + (a.seq_k - a.seq_q));
    last_visible[r] = last - thread_key0;
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int column = 8 * (i / 4) + (i % 2);  // a compile-time constant
    if (column > last_visible[(i % 4) / 2]) s[i] = -INFINITY;
  }
}

constexpr float kMaxGrowthLog2 = 8.0f;  // kLazy: P < 2^8 = 256

// The online softmax step of module 03 for this thread's two rows, in two halves so that the
// first can run while the tensor cores still accumulate O:
//   softmax_exponentials: new running maxima, P = 2^(s*scale - m) in place of s, the running
//                         sums rescaled and increased; returns the factor O must be rescaled by;
//   rescale_and_pack:     O *= that factor, and P packed to 16 bits as wgmma's A fragments (the
//                         accumulator layout of two adjacent 8-column blocks IS the A layout of
//                         one k16 step, so P never leaves the registers).
//
// kLazy: the running maximum only has to bound the exponents, not be exact. It moves only
// when this tile's maximum exceeds it by more than kMaxGrowthLog2, so P = 2^(s*scale - m)
// stays below 2^kMaxGrowthLog2 (exact in fp32, and fine for P in bf16 or f16), O and the sum
// keep one common scale, and most tiles need no rescaling of O at all (correction 1).
//
// kLive: only the first kLive columns can hold a visible key (the kernel passes kN / 2 when
// the tile's right half lies past the causal diagonal or past seq_k for all 64 rows of the
// warpgroup): the rest are set to P = 0 without their exponentials.
template <int kN, bool kLazy, int kLive = kN>
__device__ inline void softmax_exponentials(float (&s)[kN / 2], float (&row_max)[2],
                                            float (&row_sum)[2], float (&correction)[2],
                                            float scale_log2) {
  static_assert(kLive % 8 == 0 && kLive <= kN, "whole 8-column blocks");
  constexpr int kLiveRegisters = kLive / 2;  // registers 0 .. kLive/2 - 1 hold columns < kLive
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < kLiveRegisters; ++i)
    tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (kLazy) {
      const float this_max = quad_max(tile_max[r]) * scale_log2;
      correction[r] = 1.0f;
      if (this_max > row_max[r] + kMaxGrowthLog2) {  // also the first visible key (max -inf)
        correction[r] = device::fast_exp2(row_max[r] - this_max);
        row_max[r] = this_max;
        row_sum[r] *= correction[r];
      }
      // A row that has seen only masked keys keeps max -inf; use 0 so that 2^(-inf - 0) = 0
      // instead of 2^(-inf + inf) = NaN.
      base[r] = row_max[r] == -INFINITY ? 0.0f : row_max[r];
    } else {
      const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]) * scale_log2);
      base[r] = new_max == -INFINITY ? 0.0f : new_max;  // as above
      correction[r] = device::fast_exp2(row_max[r] - base[r]);
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
  }
#pragma unroll
  for (int i = 0; i < kLiveRegisters; ++i) {
    s[i] = device::fast_exp2(fmaf(s[i], scale_log2, -base[(i % 4) / 2]));
    row_sum[(i % 4) / 2] += s[i];  // this thread's part; the quad's parts are added at the end
  }
#pragma unroll
  for (int i = kLiveRegisters; i < kN / 2; ++i) s[i] = 0.0f;
}

template <int kN, int kD, bool kBf16, bool kLazy>
__device__ inline void rescale_and_pack(const float (&s)[kN / 2], float (&o)[kD / 2],
                                        const float (&correction)[2], uint32_t (&p)[kN / 16][4]) {
  // kLazy: a warp-uniform test skips the multiplies when no row of the warp moved its maximum.
  if (!kLazy || __any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] *= correction[(i % 4) / 2];
  }
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack_pair<kBf16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// Ping-pong: consumer c may issue its products once barrier kTurnBarrier + c has been reached
// by its own 128 threads (bar.sync) and the 128 of the consumer before it (bar.arrive, after
// that one issued). The turn passes in a ring 0 -> 1 -> ... -> 0, and the ring runs on from
// one work tile to the next: every consumer of a block has the same issue phases (the same
// K/V tiles plus one), so consumer 0 may start the next work tile as soon as the last consumer
// has issued its last P V, instead of after its output store. The last consumer hands the
// first its first turn when the block starts (first_turn), and consumer 0 takes the last
// consumer's final pass when the block ends (last_turn), so no arrival is left over.
constexpr int kTurnBarrier = 4;  // named barriers 4, 5, 6 (1..3 are the output stores')

template <class C>
__device__ inline void wait_for_turn(int consumer) {
  if constexpr (C::kSchedule == Schedule::pingpong) named_barrier_sync(kTurnBarrier + consumer, 256);
}
template <class C>
__device__ inline void pass_turn(int consumer) {
  if constexpr (C::kSchedule == Schedule::pingpong)
    asm volatile("bar.arrive %0, 256;" ::"r"(kTurnBarrier + (consumer + 1) % C::kConsumers)
                 : "memory");
}
template <class C>
__device__ inline void first_turn(int consumer) {
  if (consumer == C::kConsumers - 1) pass_turn<C>(consumer);
}
template <class C>
__device__ inline void last_turn(int consumer) {
  if (consumer == 0) wait_for_turn<C>(consumer);
}

// Writes this warpgroup's normalised O rows into its 64 rows of the Q tile (Q is no longer
// read), in the 128-byte swizzle the O tensor map expects; the TMA store takes it from there.
template <class C, bool kBf16>
__device__ inline void stage_output(const float (&o)[C::kHeadDim / 2], const float (&inv_sum)[2],
                                    uint32_t rows_base, int warp, int lane) {
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; i += 2) {
    const int row = 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    const int panel = col / C::kPanelCols;
    const int chunk = (col % C::kPanelCols) / 8;
    const uint32_t address = rows_base + panel * C::kBlockM * C::kRowBytes + row * C::kRowBytes +
                             ((chunk ^ (row % 8)) * 16) + (col % 8) * 2;
    const float inv = inv_sum[(i % 4) / 2];
    const uint32_t packed = pack_pair<kBf16>(o[i] * inv, o[i + 1] * inv);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(packed) : "memory");
  }
}

// One work tile of one consumer warpgroup: 64 query rows, the online softmax on wgmma
// accumulators, then the output through shared memory and a TMA store. `first_kv` counts the
// K/V tiles this block's ring has carried before this work tile (ring positions continue from
// one work tile to the next), `q_phase` is the parity of this work tile's Q fill.
template <class C, class Steps, bool kBf16, bool kCausal, class Mods>
__device__ __forceinline__ void consumer_work_tile(const TensorMaps& maps, const KernelArgs& a,
                                                   const typename Mods::Args& mods,
                                                   const SharedPlan<C>& plan, int consumer,
                                                   int m_block, int head, int batch,
                                                   KvTiles range, int first_kv,
                                                   uint32_t q_phase, char* mods_smem) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_in_group = warp % 4;
  const int first_row = m_block * C::kBlockM + consumer * C::kRowsPerConsumer;
  // The K/V tiles this warpgroup computes: the block's range, or with module 12's mask the part
  // of it that its own 64 rows see (a window of W keys shows 64 rows about W + 64 keys, the
  // block's rows W + kBlockM). The `lead` tiles before that part and the ones after it are
  // only waited for and released (pass_tile), with a turn each, so that the consumers' turns
  // still add up.
  int lead = 0, tiles = range.count;
  if constexpr (Mods::kActive) {
    const KvTiles own = tiles_seen_by<C, Mods>(a, mods, batch, first_row, C::kRowsPerConsumer);
    const int first = max(own.first, range.first);
    const int end = min(own.first + own.count, range.first + range.count);
    lead = first < end ? first - range.first : 0;
    tiles = first < end ? end - first : 0;
  }
  auto pass_tile = [&](int j) {
    const RingPosition ring(first_kv + j, C::kStages);
    Steps::wait_k(plan, ring);
    Steps::release_k(plan, ring, lane);
    Steps::wait_v(plan, ring);
    Steps::release_v(plan, ring, lane);
    wait_for_turn<C>(consumer);
    pass_turn<C>(consumer);
  };
  first_kv += lead;                           // from here on the warpgroup's own tiles
  const int own_first = range.first + lead;   // the first of them
  const int row0 = first_row + 16 * warp_in_group + lane / 4;  // this thread's first row
  // This consumer's 64 rows of the Q tile and of the O tile (the same rows unless kSeparateO),
  // in every panel.
  const uint32_t my_rows = plan.q() + consumer * C::kRowsPerConsumer * C::kRowBytes;
  const uint32_t my_out_rows = plan.o() + consumer * C::kRowsPerConsumer * C::kRowBytes;
  // kSeparateO: once the work tile's last S has completed, each warp releases Q.
  auto release_q_if_last = [&](int tile_of_s) {
    if constexpr (C::kSeparateO)
      if (tile_of_s == tiles - 1 && lane == 0) plan.arrive(q_empty, 0);
  };

  float o[C::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

  float s[C::kBlockN / 2];
  uint32_t p[C::kBlockN / 16][4];
  float correction[2];

  // The scores of K/V tile `tile` to probabilities: masked only where needed (tiles that reach
  // past seq_k or cross this warpgroup's diagonal), then the online softmax. The last key any
  // of the 64 rows may see is `last_key`; when the tile's right half lies beyond it (the far
  // side of the diagonal: half of the diagonal tile of the first consumer, whose rows end
  // halfway along it), that half's exponentials are skipped (Config::kSkipHiddenHalf).
  const int last_key = kCausal ? min(a.seq_k - 1, first_row + C::kRowsPerConsumer - 1 +
                                                      (a.seq_k - a.seq_q))
                               : a.seq_k - 1;
  if constexpr (Mods::kActive)
    if (tiles > 0)
      Mods::template start<C>(mods, batch, head, first_row, own_first * C::kBlockN, mods_smem);
  auto softmax_of_tile = [&](int tile) {  // on s, in place
    const int key0 = (own_first + tile) * C::kBlockN;
    if constexpr (Mods::kActive) {  // module 12: its modifier and mask instead of the above
      const int next_key0 = tile + 1 < tiles ? key0 + C::kBlockN : -1;
      Mods::template on_scores<C>(mods, batch, head, first_row, row0, key0, next_key0, lane, s,
                                  mods_smem);
      softmax_exponentials<C::kBlockN, C::kLazyRescale>(s, row_max, row_sum, correction,
                                                        a.scale_log2);
      return;
    }
    const bool tail = key0 + C::kBlockN > a.seq_k;
    const bool diagonal = kCausal && key0 + C::kBlockN - 1 > first_row + (a.seq_k - a.seq_q);
    if (tail || diagonal) mask_scores<C::kBlockN, kCausal>(s, a, row0, key0, lane);
    // The condition is the same for the whole warpgroup: no divergence.
    if (C::kSkipHiddenHalf && key0 + C::kBlockN / 2 > last_key)
      softmax_exponentials<C::kBlockN, C::kLazyRescale, C::kBlockN / 2>(
          s, row_max, row_sum, correction, a.scale_log2);
    else
      softmax_exponentials<C::kBlockN, C::kLazyRescale>(s, row_max, row_sum, correction,
                                                        a.scale_log2);
  };

  // Q has landed; module 12's RoPE turns this warpgroup's rows of it before any S reads them.
  auto wait_q = [&]() {
    Steps::wait_q(plan, q_phase);
    if constexpr (Mods::kActive) Mods::template turn_q<C>(mods, first_row, my_rows, consumer);
  };
  if constexpr (Mods::kActive)
    for (int j = -lead; j < 0; ++j) pass_tile(j);
  if constexpr (C::kSchedule == Schedule::serial) {
    wait_q();
    for (int j = 0; j < tiles; ++j) {
      const RingPosition ring(first_kv + j, C::kStages);
      Steps::wait_k(plan, ring);
      stamp<C>(a, consumer, j, issue);
      Steps::template issue_scores<C, kBf16>(s, my_rows, plan.k(ring.slot));
      wgmma_wait<0>();
      fence_registers(s);
      stamp<C>(a, consumer, j, s_ready);
      Steps::release_k(plan, ring, lane);
      release_q_if_last(j);
      softmax_of_tile(j);
      rescale_and_pack<C::kBlockN, C::kHeadDim, kBf16, C::kLazyRescale>(s, o, correction, p);
      stamp<C>(a, consumer, j, softmax_done);
      Steps::wait_v(plan, ring);
      Steps::template issue_pv<C, kBf16>(o, p, plan.v(ring.slot));
      wgmma_wait<0>();
      fence_registers(o);
      stamp<C>(a, consumer, j, pv_done);
      Steps::release_v(plan, ring, lane);
    }
  } else if (tiles == 0) {
    Steps::wait_q(plan, q_phase);  // nothing to compute, but O is staged where Q lands
    if constexpr (C::kSeparateO)
      if (lane == 0) plan.arrive(q_empty, 0);
  } else {
    // The first tile's scores and softmax on their own; then each step issues S for tile j+1
    // and O += P V for tile j back to back, and computes the softmax of j+1 while P V runs.
    // With ping-pong the consumers' issue phases take turns (the ring of turns runs on from
    // the last work tile: first_turn, last_turn).
    wait_q();
    {
      const RingPosition ring(first_kv, C::kStages);
      Steps::wait_k(plan, ring);
      wait_for_turn<C>(consumer);
      Steps::template issue_scores<C, kBf16>(s, my_rows, plan.k(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<0>();
      fence_registers(s);
      Steps::release_k(plan, ring, lane);
      release_q_if_last(0);
      softmax_of_tile(0);
      rescale_and_pack<C::kBlockN, C::kHeadDim, kBf16, C::kLazyRescale>(s, o, correction, p);
    }
    // The steady state: every step commits two groups (S of tile j+1, then P V of tile j), so
    // wgmma_wait<1> always means "S is done". The last tile, with only P V, is peeled off
    // below: a group that is committed on some steps only would leave the compiler unable to
    // tell which registers are still in flight, and it would serialise every wgmma.
    for (int j = 0; j + 1 < tiles; ++j) {
      const RingPosition ring(first_kv + j, C::kStages), next(first_kv + j + 1, C::kStages);
      Steps::wait_k(plan, next);
      Steps::wait_v(plan, ring);
      wait_for_turn<C>(consumer);
      stamp<C>(a, consumer, j, issue);
      Steps::template issue_scores<C, kBf16>(s, my_rows, plan.k(next.slot));
      Steps::template issue_pv<C, kBf16>(o, p, plan.v(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<1>();  // S of tile j+1 is done (P V of tile j may still run)
      fence_registers(s);
      stamp<C>(a, consumer, j, s_ready);
      Steps::release_k(plan, next, lane);
      release_q_if_last(j + 1);
      softmax_of_tile(j + 1);
      stamp<C>(a, consumer, j, softmax_done);
      wgmma_wait<0>();  // O += P V of tile j is done: O and P may change now
      fence_registers(o);
      stamp<C>(a, consumer, j, pv_done);
      Steps::release_v(plan, ring, lane);
      rescale_and_pack<C::kBlockN, C::kHeadDim, kBf16, C::kLazyRescale>(s, o, correction, p);
    }
    {
      const RingPosition ring(first_kv + tiles - 1, C::kStages);
      Steps::wait_v(plan, ring);
      wait_for_turn<C>(consumer);
      Steps::template issue_pv<C, kBf16>(o, p, plan.v(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<0>();
      fence_registers(o);
      Steps::release_v(plan, ring, lane);
    }
  }
  if constexpr (Mods::kActive) {
    for (int j = tiles; j < range.count - lead; ++j) pass_tile(j);
    // The pipeline above takes one turn more than it has tiles.
    if (tiles == 0 && range.count > 0) {
      wait_for_turn<C>(consumer);
      pass_turn<C>(consumer);
    }
  }

  // O = O / rowsum; rows that saw no key (causal, seq_q > seq_k) have sum 0 and output 0.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    inv_sum[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
  if constexpr (C::kSeparateO) {
    // The previous work tile's store may still read the O tile: its thread waits for that,
    // then the warpgroup may overwrite it.
    if (threadIdx.x % 128 == 0) tma_store_wait_read();
    named_barrier_sync(1 + consumer, 128);
  }
  stage_output<C, kBf16>(o, inv_sum, my_out_rows, warp_in_group, lane);
  fence_shared_for_async_proxy();         // the copy engine reads what st.shared wrote
  named_barrier_sync(1 + consumer, 128);  // all 128 threads of this warpgroup have written
  if (threadIdx.x % 128 == 0) {
    if (first_row < a.seq_q) {
      for (int panel = 0; panel < C::kPanels; ++panel)
        tma_store_4d(&maps.o, my_out_rows + panel * C::kBlockM * C::kRowBytes,
                     panel * C::kPanelCols, first_row, head, batch);
      tma_store_commit();
      // With O in Q's rows the next Q may land only once the copy has read them; with its own
      // tile the wait moves to the next work tile's output (or the block's end).
      if constexpr (!C::kSeparateO) tma_store_wait_read();
    }
    if constexpr (!C::kSeparateO) plan.arrive(q_empty, 0);
  }
}

// ---- The kernel ---------------------------------------------------------------------------------

template <class C, class Steps, bool kBf16, bool kCausal, class Mods = NoMods>
__global__ void __launch_bounds__(C::kThreads, 1)
    hopper_attention_kernel(const __grid_constant__ TensorMaps maps, const KernelArgs a,
                            const __grid_constant__ typename Mods::Args mods) {
#if ATTN_M09_DEVICE_CODE
  extern __shared__ __align__(1024) unsigned char shared_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: every tile must start on such a boundary.
  const SharedPlan<C> plan{(shared_address(shared_raw) + 1023u) & ~1023u, a.hang};
  // Module 12's shared memory (Mods::kExtraSmemBytes), 128-byte aligned after the kernel's.
  char* const mods_smem = reinterpret_cast<char*>(shared_raw) +
                          (((plan.base + C::kWorkOffset + 8 + 127u) & ~127u) -
                           shared_address(shared_raw));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The same for all 32 lanes, and the compiler can see it (a shuffle from lane 0): each role
  // below is then a branch whole warps take, which register reallocation (setmaxnreg) needs.
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0);

  if (threadIdx.x == 0) {
    asm volatile("st.shared.u32 [%0], 0;" ::"r"(plan.base + C::kFlagOffset) : "memory");
    mbarrier_init(plan.barrier(q_full), 1);                // the producer's arrive_expect_bytes
    // Q is released by each consumer's storing thread, or (kSeparateO) by every consumer warp.
    mbarrier_init(plan.barrier(q_empty), C::kSeparateO ? 4 * C::kConsumers : C::kConsumers);
    mbarrier_init(plan.barrier(work_full), 1);  // the producer's arrive (kDynamic)
    for (int s = 0; s < C::kStages; ++s) {
      mbarrier_init(plan.barrier(k_full, s), 1);
      mbarrier_init(plan.barrier(v_full, s), 1);
      mbarrier_init(plan.barrier(k_empty, s), 4 * C::kConsumers);  // one arrival per consumer warp
      mbarrier_init(plan.barrier(v_empty, s), 4 * C::kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  // A persistent grid: one block per SM walks the work tiles blockIdx.x, + gridDim.x, ...
  // (or, not persistent, one block per work tile). Query blocks run backwards, so with the
  // causal mask the longest work tiles of a head come first (C::kHeadsFirst: of all heads).
  const int bh_count = a.batch * a.heads;
  auto decode = [&](int work, int& m_block, int& head, int& batch) {
    int bh;
    if constexpr (C::kHeadsFirst) {
      m_block = a.m_blocks - 1 - work / bh_count;
      bh = work % bh_count;
    } else {
      m_block = a.m_blocks - 1 - work % a.m_blocks;
      bh = work / a.m_blocks;
    }
    head = bh % a.heads;
    batch = bh / a.heads;
  };

  if (warpgroup == 0) {
    // The producer: one thread issues every copy; the warpgroup gives most of its registers to
    // the consumers. With module 12's hooks the whole warp runs the loop, since a mask's range
    // of tiles may take a search by the warp (Mods::kWarpRange: documents); lane 0 still issues
    // every copy and arrive.
    registers_release<C::kProducerRegisters>();
    constexpr bool kWarpLoop = Mods::kActive && Mods::kWarpRange;
    const bool leader = !kWarpLoop || lane == 0;  // the thread that issues (true: a constant)
    if (warp == 0 && (kWarpLoop || lane == 0)) {
      int kv_count = 0;
      uint32_t fill = 0;
      for (int work = blockIdx.x;; ++fill) {
        plan.wait(q_empty, 0, (fill & 1) ^ 1);  // the consumers are done with the last Q
        // (With the warp: the same answer for every lane.)
        if (kWarpLoop ? __any_sync(0xffffffffu, plan.gave_up()) != 0 : plan.gave_up()) break;
        if (work >= a.work_tiles) {
          if constexpr (C::kDynamic) {  // tell the consumers there is no more work
            if (leader) {
              plan.set_work(fill, -1);
              plan.arrive(work_full, 0);
            }
          }
          break;
        }
        int m_block, head, batch;
        decode(work, m_block, head, batch);
        const int kv_head = head / (a.heads / a.kv_heads);
        const KvTiles range = kv_tiles_of<C, kCausal, Mods>(a, mods, m_block, batch);
        if (leader) {
          if constexpr (C::kDynamic) {
            plan.set_work(fill, work);
            plan.arrive(work_full, 0);
          }
          Steps::load_q(plan, &maps.q, m_block * C::kBlockM, head, batch);
          for (int j = 0; j < range.count && !plan.gave_up(); ++j)
            Steps::load_kv_tile(plan, &maps.k, &maps.v, RingPosition(kv_count + j, C::kStages),
                                (range.first + j) * C::kBlockN, kv_head, batch);
        }
        kv_count += range.count;
        // The next work tile. The producer runs ahead of the consumers (its last copies were
        // issued as ring slots freed up), so the atomic's round trip to L2 overlaps their work.
        if constexpr (C::kDynamic) {
          if (leader) work = static_cast<int>(gridDim.x) + atomicAdd(a.work_counter, 1);
          if constexpr (kWarpLoop) work = __shfl_sync(0xffffffffu, work, 0);
        } else {
          work += static_cast<int>(gridDim.x);
        }
      }
      if constexpr (kWarpLoop)
        if (!leader) return;  // as the producer warpgroup's other threads
      if constexpr (C::kDynamic) {
        // Every block draws from the counter until it passes the last tile, then counts itself
        // out; the last one out resets the counter for the next launch on this stream.
        if (atomicAdd(a.work_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
          a.work_counter[0] = 0;
          a.work_counter[1] = 0;
        }
      }
      // After a wait gave up, copies may still be in flight: keep the block alive until they
      // have landed (a block's shared memory is freed when its last thread exits).
      if (plan.gave_up()) {
        const uint64_t until = global_timer_ns() + 2 * kHangCheckNs;
        while (global_timer_ns() < until) {
        }
      }
    }
  } else {
    registers_claim<C::kConsumerRegisters>();
    first_turn<C>(warpgroup - 1);
    int kv_count = 0;
    uint32_t fill = 0;
    for (int work = blockIdx.x;; work += gridDim.x, ++fill) {
      if constexpr (C::kDynamic) {
        // The producer names each work tile (work_full completes once per work tile, so its
        // parity for this one is fill's).
        plan.wait(work_full, 0, fill & 1);
        if (plan.gave_up()) break;
        work = plan.work(fill);
        if (work < 0) break;
      } else if (work >= a.work_tiles) {
        break;
      }
      int m_block, head, batch;
      decode(work, m_block, head, batch);
      const KvTiles range = kv_tiles_of<C, kCausal, Mods>(a, mods, m_block, batch);
      consumer_work_tile<C, Steps, kBf16, kCausal, Mods>(maps, a, mods, plan, warpgroup - 1,
                                                         m_block, head, batch, range, kv_count,
                                                         fill & 1, mods_smem);
      kv_count += range.count;
    }
    // (A block whose wait gave up stops where it is: the turns may not add up then.)
    if (!plan.gave_up()) last_turn<C>(warpgroup - 1);
    // Shared memory must outlive the last output copy's reads.
    if (C::kSeparateO && threadIdx.x % 128 == 0) tma_store_wait_read();
  }
#endif
}

// ---- Host side: tensor maps and the launch ------------------------------------------------------

// The number of SMs of the current device (asked once per device).
inline int multiprocessor_count() {
  int device = 0, count = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
  return count > 0 ? count : 1;
}

// Whether this build carries sm_90a code for module 09 (a build for other GPUs compiles the
// kernel with an empty body): asked once of the device. (A template, so that the exercise and
// the solution can both include this header.)
template <int kUnused = 0>
__global__ void probe_sm90a_code(int* has_code) {
  *has_code = ATTN_M09_DEVICE_CODE;
}

// Module 09 runs only on compute capability 9.x, from a build that compiled it for sm_90a.
inline Status check_device_and_build() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return Status::error("module 09: cannot query the GPU");
  if (major != 9)
    return Status::error("module 09 needs a Hopper GPU (compute capability 9.x: H100, H200, "
                         "GH200); this GPU is compute capability " + std::to_string(major) +
                         "." + std::to_string(minor));
  static int has_code = -1;  // asked once per process
  if (has_code < 0) {
    int* flag = nullptr;
    has_code = 0;
    if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
      probe_sm90a_code<<<1, 1>>>(flag);
      int value = 0;
      if (cudaGetLastError() == cudaSuccess &&
          cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess)
        has_code = value;
      cudaFree(flag);
      cudaGetLastError();  // a missing kernel image is an answer here, not an error to keep
    }
  }
  if (!has_code)
    return Status::error("module 09: this build has no sm_90a code; configure with "
                         "-DCMAKE_CUDA_ARCHITECTURES=90 (the module then compiles with "
                         "-gencode=arch=compute_90a,code=sm_90a)");
  return Status::ok();
}

// The dynamic scheduler's two counters (KernelArgs::work_counter), zeroed once; every launch
// leaves them at zero again (its last block resets them), so launches that use them must run
// one after another (one stream), as the course's programs do. A launch whose barrier wait
// gave up resets them too (every producer still counts itself out); the host zeroes them
// once more before the next dynamic launch after such a report.
inline int* work_counter_buffer() {
  static int* buffer = [] {
    int* b = nullptr;
    if (cudaMalloc(&b, 2 * sizeof(int)) != cudaSuccess) return static_cast<int*>(nullptr);
    if (cudaMemset(b, 0, 2 * sizeof(int)) != cudaSuccess) {
      cudaFree(b);
      return static_cast<int*>(nullptr);
    }
    return b;
  }();
  return buffer;
}

// Mods, mods: module 12's hooks and what they read; exponent_scale (0: the softmax scale) is
// what the scores are multiplied by in the exponent (module 12's soft-capping puts its cap
// there).
template <class C, class Steps, bool kBf16, bool kCausal, class Mods = NoMods>
Status launch_config(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream, long long* timeline = nullptr,
                     const typename Mods::Args& mods = {}, double exponent_scale = 0.0) {
  TensorMaps maps;
  if (Status s = make_tensor_map(&maps.q, p.dtype, q, C::kHeadDim, p.seq_q, p.heads, p.batch,
                                 p.q, C::kBlockM, "Q");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.k, p.dtype, k, C::kHeadDim, p.seq_k, p.kv_heads, p.batch,
                                 p.k, C::kBlockN, "K");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.v, p.dtype, v, C::kHeadDim, p.seq_k, p.kv_heads, p.batch,
                                 p.v, C::kBlockN, "V");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.o, p.dtype, o, C::kHeadDim, p.seq_q, p.heads, p.batch,
                                 p.o, C::kRowsPerConsumer, "O");
      !s)
    return s;
  KernelArgs a{};
  a.batch = p.batch;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.m_blocks = (p.seq_q + C::kBlockM - 1) / C::kBlockM;
  a.scale_log2 = float(exponent_scale > 0 ? exponent_scale : p.softmax_scale()) * device::kLog2e;
  a.timeline = timeline;
  a.hang = hang_report_buffer();
  if (!a.hang) return Status::error("module 09: cannot allocate the mapped hang-report buffer");
  const bool after_hang = a.hang->hung != 0;
  if (after_hang) *a.hang = HangReport{};  // an earlier launch's report has been read by now
  if constexpr (C::kDynamic) {
    a.work_counter = work_counter_buffer();
    if (!a.work_counter)
      return Status::error("module 09: cannot allocate the tile scheduler's counter");
    if (after_hang) cudaMemsetAsync(a.work_counter, 0, 2 * sizeof(int), stream);
  }
  const int64_t work = static_cast<int64_t>(a.m_blocks) * p.heads * p.batch;
  // Work tile numbers are ints, and a block's next number may run past the last tile by up to
  // two grids' worth before the block stops.
  if (work > 0x7fffffff - (1 << 20))
    return Status::error("module 09: " + std::to_string(work) +
                         " work tiles exceed the 2^31 - 2^20 this kernel counts with int");
  a.work_tiles = static_cast<int>(work);
  // Persistent: one block per SM (the shared memory and registers allow no more), each walking
  // the work tiles.
  const int blocks = C::kPersistent
                         ? static_cast<int>(std::min<int64_t>(work, multiprocessor_count()))
                         : a.work_tiles;
  auto kernel = hopper_attention_kernel<C, Steps, kBf16, kCausal, Mods>;
  constexpr int kExtra = Mods::template kExtraSmemBytes<C>;
  constexpr int kSmem = C::kSharedBytes + (kExtra > 0 ? kExtra + 128 : 0);
  static_assert(kSmem <= 227 * 1024, "module 12's shared memory does not fit beside the kernel's");
  if (cudaError_t e = device::allow_shared_memory(kSmem, kernel); e != cudaSuccess)
    return Status::error(std::string("module 09: cannot give the kernel ") +
                         std::to_string(kSmem) + " bytes of shared memory: " +
                         cudaGetErrorString(e));
  kernel<<<blocks, C::kThreads, kSmem, stream>>>(maps, a, mods);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("module 09: launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

// The checks every launch makes: a Hopper GPU with this build's sm_90a code, and tensors whose
// rows TMA can read.
inline Status check_launch(const Problem& p, const void* q, const void* k, const void* v,
                           const void* o) {
  if (p.dtype == DType::f32)
    return Status::error("module 09's forward() takes f16 or bf16 tensors; fp32 tensors run "
                         "forward_3xtf32() (attn run --module 9 --dtype f32)");
  if (Status s = check_device_and_build(); !s) return s;
  if (!tma_compatible(q, p.q) || !tma_compatible(k, p.k) || !tma_compatible(v, p.v) ||
      !tma_compatible(o, p.o))
    return Status::error("module 09 loads tiles with TMA, which needs every row to start on a "
                         "16-byte boundary (aligned base pointers and strides that are "
                         "multiples of 8 elements); module 07 runs this layout");
  return Status::ok();
}

// Configuration C with the mask of p and its dtype (the checks made by the caller).
template <class Steps, class C, bool kCausal>
Status launch_dtype(const Problem& p, const void* q, const void* k, const void* v, void* o,
                    cudaStream_t stream) {
  return p.dtype == DType::bf16 ? launch_config<C, Steps, true, kCausal>(p, q, k, v, o, stream)
                                : launch_config<C, Steps, false, kCausal>(p, q, k, v, o, stream);
}

// Checks, then the configuration for this head_dim (C64 or C128; C64Causal, C128Causal with
// the causal mask), dtype and mask.
template <class Steps, class C64, class C128, class C64Causal = C64, class C128Causal = C128>
Status launch_with(const Problem& p, const void* q, const void* k, const void* v, void* o,
                   cudaStream_t stream) {
  if (Status s = check_launch(p, q, k, v, o); !s) return s;
  if (p.causal)
    return p.head_dim == 64 ? launch_dtype<Steps, C64Causal, true>(p, q, k, v, o, stream)
                            : launch_dtype<Steps, C128Causal, true>(p, q, k, v, o, stream);
  return p.head_dim == 64 ? launch_dtype<Steps, C64, false>(p, q, k, v, o, stream)
                          : launch_dtype<Steps, C128, false>(p, q, k, v, o, stream);
}

// The production configurations (bench/09_hopper measures them beside the alternatives; the
// choices below follow its rows at N = 512 ... 16384, ladder09_*_h100.json).
//
// d = 64: the softmax, not the tensor cores, limits d = 64, so three consumer warpgroups
// (192 query rows per block) add softmax throughput. A persistent grid with the dynamic tile
// scheduler and O staged in its own tile (the next work tile's Q loads while this one
// finishes); the work tiles query blocks first, so the blocks of one head run side by side
// and share K and V in L2. With the causal mask and seq_k <= 1024 two consumers do better:
// a 192-row block wastes up to a third of its products on the far side of the diagonal, and
// at these lengths the diagonal is most of the work.
//
// d = 128: without the mask and up to kShortKeys, 128-key tiles with a persistent grid and O
// in its own tile (the start of each work tile shows at these lengths, and this configuration
// overlaps it best); up to kMidKeys, and with the mask beyond kShortCausalKeys, 160-key tiles
// with the dynamic scheduler, the widest that fit beside the separate O tile; beyond kMidKeys
// without the mask, 192-key tiles (fewer barrier round trips and O rescales per key) and one
// block per work tile, query blocks first. With the mask up to kShortCausalKeys, 128-key tiles
// with the dynamic scheduler (a block that drew short tiles draws more).
constexpr bool kPersistentGrid = true, kBlockPerTile = false;
constexpr bool kQueryBlocksFirst = false, kNoTimeline = false, kSeparateO = true,
               kDynamicTiles = true;
using Production64 = Config<64, 128, 3, Schedule::pingpong, 3, kPersistentGrid,
                            kQueryBlocksFirst, kNoTimeline, kSeparateO, kDynamicTiles>;
using Production64ShortCausal = Config<64, 128, 2, Schedule::pingpong, 2, kPersistentGrid,
                                       kQueryBlocksFirst, kNoTimeline, kSeparateO,
                                       kDynamicTiles>;
using Production128 = Config<128, 192, 2, Schedule::pingpong, 2, kBlockPerTile>;
using Production128Short = Config<128, 128, 2, Schedule::pingpong, 2, kPersistentGrid,
                                  kQueryBlocksFirst, kNoTimeline, kSeparateO>;
using Production128ShortCausal = Config<128, 128, 2, Schedule::pingpong, 2, kPersistentGrid,
                                        kQueryBlocksFirst, kNoTimeline, kSeparateO,
                                        kDynamicTiles>;
using Production128Wide = Config<128, 160, 2, Schedule::pingpong, 2, kPersistentGrid,
                                 kQueryBlocksFirst, kNoTimeline, kSeparateO, kDynamicTiles>;
constexpr int kShortCausalKeys64 = 1024, kShortKeys = 1024, kMidKeys = 4096,
              kShortCausalKeys = 2048;

// forward() of exercise and solution.
template <class Steps>
Status launch(const Problem& p, const void* q, const void* k, const void* v, void* o,
              cudaStream_t stream) {
  if (Status s = check_launch(p, q, k, v, o); !s) return s;
  if (p.head_dim == 64) {
    if (!p.causal) return launch_dtype<Steps, Production64, false>(p, q, k, v, o, stream);
    return p.seq_k <= kShortCausalKeys64
               ? launch_dtype<Steps, Production64ShortCausal, true>(p, q, k, v, o, stream)
               : launch_dtype<Steps, Production64, true>(p, q, k, v, o, stream);
  }
  if (!p.causal) {
    if (p.seq_k <= kShortKeys)
      return launch_dtype<Steps, Production128Short, false>(p, q, k, v, o, stream);
    return p.seq_k <= kMidKeys
               ? launch_dtype<Steps, Production128Wide, false>(p, q, k, v, o, stream)
               : launch_dtype<Steps, Production128, false>(p, q, k, v, o, stream);
  }
  return p.seq_k <= kShortCausalKeys
             ? launch_dtype<Steps, Production128ShortCausal, true>(p, q, k, v, o, stream)
             : launch_dtype<Steps, Production128Wide, true>(p, q, k, v, o, stream);
}

}  // namespace attn::m09
