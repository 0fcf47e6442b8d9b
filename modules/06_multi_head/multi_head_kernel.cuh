// Module 06, given: the fused multi-head FlashAttention forward in fp32, register-tiled,
// everything except the three pieces the exercise writes. The kernel is a template over
// `Step`, a struct with three static functions that the exercise (exercise.cu) and the
// solution (solutions/06_multi_head/solution.cu) provide (README, section 0):
//
//   Step::block_work(p, query_blocks)          which (query block, head, batch) this block
//                                              owns and which K/V head it reads (GQA/MQA)
//   Step::qk<T, smem_vec>(s, q_tile, k_tile,   S = Q K^T for the thread's rows x keys
//                         group, lane)
//   Step::pv<T, smem_vec>(acc, p_tile, v_tile, O += P V for the thread's rows x columns
//                         group, lane)
//
// One launch covers every (query block, head, batch). A block of 256 threads owns
// kQueries = 16 * kRowsPerThread consecutive queries of one (batch, head) and streams that
// head's K and V through shared memory in tiles of kKeys = 16 * kKeysPerThread keys.
//
// The 256 threads form 16 row groups (a half-warp each) x 16 lanes (README, section 3):
//
//               keys of the tile (kKeys)             head-dim columns (D)
//             lane 0  1  2 ..15  0  1 ..             lane 0..15 | 0..15 | ...
//   row grp 0  [S: kRowsPerThread x kKeysPerThread] [O: kRowsPerThread x D/16 per thread]
//   row grp 1   ...
//
// A thread owns kRowsPerThread query rows (rows group, group + 16, ...) and, of the score tile,
// the keys lane, lane + 16, ...; of the output, the columns lane*W .. lane*W + W-1 of every
// chunk of 16*W columns (W = 4 floats: one 16-byte vector). Per tile:
//   1. S = Q K^T for its rows x keys: every Q value read from shared memory is used for
//      kKeysPerThread products, every K value for kRowsPerThread (register tiling);
//   2. the online softmax (module 03) per row: the tile's row max is reduced over the 16
//      lanes of the half-warp with shuffles; the row sum l stays a per-thread partial sum
//      (all 16 lanes share m, so partial sums rescale alike) and is reduced once at the end;
//   3. P goes to shared memory, read back only by the same half-warp (a __syncwarp suffices);
//   4. O += P V: every P value is used for D/16 products, every V value for kRowsPerThread.
// Copies run in the background with cp.async (sm_80+, common/device/cp_async.cuh), in one of
// three schemes (README, section 3): K and V double-buffered (tile t+1 is copied while tile t
// is computed); or, when two buffers of each do not fit beside a large Q tile, one K and one
// V buffer, K(t+1) copied during P V and V(t+1) during the next Q K^T; or one K buffer and
// two V buffers. Q is
// multiplied by softmax_scale * log2(e) once, in shared memory, so the scores come out of
// Q K^T already in base-2 units. The tilings below are the fastest measured on the H100
// (README, section 4).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device/cp_async.cuh"
#include "common/device/head_dim.cuh"
#include "common/device/math.cuh"
#include "common/device/shared_memory.cuh"
#include "common/device/warp.cuh"
#include "common/problem.h"
#include "common/status.h"

namespace attn::m06 {

constexpr int kThreads = 256;
constexpr int kLanes = 16;                     // lanes sharing a row group (a half-warp)
constexpr int kRowGroups = kThreads / kLanes;  // 16

// Everything that follows from the padded head dim D and the per-thread tile.
template <int D_, int kRowsPerThread_, int kKeysPerThread_, int kKBuffers_, int kVBuffers_,
          int kQKUnroll_ = 4, int kPVUnroll_ = 2>
struct Tiling {
  static constexpr int D = D_;  // the padded head dim: head_dim <= D
  static constexpr int kRowsPerThread = kRowsPerThread_;
  static constexpr int kKeysPerThread = kKeysPerThread_;
  // Shared-memory buffers for K tiles and for V tiles; the copy scheme follows from them
  // (modules/06_multi_head/NOTES.md, section 5):
  //   2 + 2  double-buffered: tile t+1 copied while tile t is computed; 1 barrier per tile.
  //   1 + 1  split: K(t+1) copied during P V of tile t, V(t+1) during the next Q K^T
  //          (FlashAttention-2's order); 4 barriers per tile, half the K/V memory.
  //   1 + 2  V double-buffered: V(t+1) copied during all of tile t, K(t+1) during P V;
  //          2 barriers per tile.
  static constexpr int kKBuffers = kKBuffers_;
  static constexpr int kVBuffers = kVBuffers_;
  static constexpr bool kDoubleBuffered = kKBuffers == 2 && kVBuffers == 2;
  static constexpr bool kSplit = kKBuffers == 1 && kVBuffers == 1;
  static constexpr bool kVDouble = kKBuffers == 1 && kVBuffers == 2;
  static_assert(kDoubleBuffered || kSplit || kVDouble, "one of the three copy schemes");
  // How many steps of the Q K^T loop (4 columns each) and of the P V loop (4 keys each) the
  // compiler unrolls: more lets it issue the next step's shared reads earlier, but costs
  // registers (docs/worklog/06_multi_head.md, "The steps").
  static constexpr int kQKUnroll = kQKUnroll_;
  static constexpr int kPVUnroll = kPVUnroll_;
  static_assert(kQKUnroll >= 1 && kPVUnroll >= 1, "unroll factors are step counts");
  static constexpr int kQueries = kRowGroups * kRowsPerThread;  // query rows per block
  static constexpr int kKeys = kLanes * kKeysPerThread;         // keys per tile
  // Shared-memory rows of Q, K, V are padded by 4 floats: lane t reads row t of K at the
  // same column as its neighbours, and the padding shifts each row by 4 banks, so the 8
  // lanes of one 16-byte access phase hit 8 different groups of 4 banks (no conflict).
  static constexpr int kRow = D + 4;
  // P rows: the two half-warps of a warp write two rows at once; a shift of 16 banks between
  // consecutive rows keeps their stores apart.
  static constexpr int kPRow = kKeys + 16;
  static constexpr int kWidth = D >= 64 ? 4 : 2;           // output columns per vector
  static constexpr int kChunks = D / (kLanes * kWidth);   // vectors per thread per row
  static constexpr int kCols = kChunks * kWidth;          // = D / 16 output columns
  static constexpr int kQFloats = kQueries * kRow;
  static constexpr int kKVFloats = kKeys * kRow;          // one K (or V) buffer
  static constexpr int kPFloats = kQueries * kPRow;
  static constexpr int kSmemBytes =
      int(sizeof(float)) * (kQFloats + (kKBuffers + kVBuffers) * kKVFloats + kPFloats);
  // Two blocks per SM when they fit in the 228 KB of shared memory (1 KB is reserved per
  // block): 16 warps to hide latency. Otherwise one block of 8 warps and more registers.
  static constexpr int kMinBlocks = kSmemBytes + 1024 <= 114 * 1024 ? 2 : 1;
  static_assert(D % (kLanes * kWidth) == 0, "whole vectors per lane");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

// Starts copying rows [row0, row0 + kTileRows) of one head (row stride `stride` elements)
// into a shared tile with kRow floats per row. Rows >= rows_valid and columns >= head_dim
// become zeros: padding keys add nothing, padding columns add 0 to every dot product.
// vec16: 16-byte copies (every row 16-byte aligned, head_dim % 4 == 0), else 4-byte copies.
template <int D, int kTileRows, bool vec16>
__device__ __forceinline__ void load_tile(float* tile, const float* __restrict__ head,
                                          int64_t stride, int row0, int rows_valid,
                                          int head_dim) {
  constexpr int kRow = D + 4;
  constexpr int kWidth = vec16 ? 4 : 1;
  constexpr int kPerRow = D / kWidth;                  // copies per row: 8 .. 128
  constexpr int kRowsPerPass = kThreads / kPerRow;     // consecutive threads: one row
  constexpr int kPasses = kTileRows / kRowsPerPass;
  static_assert(kThreads % kPerRow == 0 && kTileRows % kRowsPerPass == 0, "whole passes");
  // Each thread keeps one column and steps down the rows: one pointer plus a stride, which
  // keeps the address arithmetic (and the registers it needs) small.
  const int r = int(threadIdx.x) / kPerRow;
  const int c = int(threadIdx.x) % kPerRow * kWidth;
  const bool column_ok = c < head_dim;
  const float* src = head + int64_t(row0 + r) * stride + c;
  const int64_t step = int64_t(kRowsPerPass) * stride;
  float* dst = tile + r * kRow + c;
#pragma unroll
  for (int n = 0; n < kPasses; ++n) {
    const bool valid = column_ok && row0 + r + n * kRowsPerPass < rows_valid;
    // 16-byte copies bypass L1 (.cg); 4-byte copies go through it (.ca, the only kind).
    if constexpr (vec16)
      device::cp_async_16(dst + n * kRowsPerPass * kRow, valid ? src : head, valid);
    else
      device::cp_async_4(dst + n * kRowsPerPass * kRow, valid ? src : head, valid);
    src += step;
  }
}

// Multiplies by `scale` the elements of a tile that this thread copied with load_tile<D,
// kTileRows, vec16> (the same index mapping). After cp.async.wait_group a thread sees its own
// copies, so no barrier is needed before this; one is needed after it, before other threads
// read the tile.
template <int D, int kTileRows, bool vec16>
__device__ __forceinline__ void scale_tile(float* tile, float scale) {
  constexpr int kRow = D + 4;
  constexpr int kWidth = vec16 ? 4 : 1;
  constexpr int kPerRow = D / kWidth;
  constexpr int kRowsPerPass = kThreads / kPerRow;
  constexpr int kPasses = kTileRows / kRowsPerPass;
  float* x = tile + int(threadIdx.x) / kPerRow * kRow + int(threadIdx.x) % kPerRow * kWidth;
#pragma unroll
  for (int n = 0; n < kPasses; ++n, x += kRowsPerPass * kRow) {
    if constexpr (vec16) {
      float4 y = *reinterpret_cast<float4*>(x);
      y.x *= scale;
      y.y *= scale;
      y.z *= scale;
      y.w *= scale;
      *reinterpret_cast<float4*>(x) = y;
    } else {
      *x *= scale;
    }
  }
}

// Reads kN consecutive floats of shared memory: one 16-byte load when `vec` (the addresses
// here are 16-byte aligned), else kN 4-byte loads (docs/worklog/06_multi_head.md, step 1, measures both).
template <bool vec>
__device__ __forceinline__ float4 read4(const float* smem) {
  if constexpr (vec) return *reinterpret_cast<const float4*>(smem);
  return make_float4(smem[0], smem[1], smem[2], smem[3]);
}

// The first key query i does not see: seq_k without a mask; with the causal mask, aligned
// bottom-right as in Problem::first_masked_key (which is host code), clamped to [0, seq_k].
__device__ __forceinline__ int visible_end(const Problem& p, int i) {
  if (!p.causal) return p.seq_k;
  const int64_t end = int64_t(i) + (p.seq_k - p.seq_q) + 1;
  return int(end < 0 ? 0 : end > p.seq_k ? p.seq_k : end);
}

// The work of one block: query block `query_block` of query head h of batch b, which reads
// K/V head kvh (= h unless several query heads share one: GQA/MQA).
struct BlockWork {
  int query_block, b, h, kvh;
};

template <class Step, int D, class T, bool vec16, bool smem_vec>
__global__ void __launch_bounds__(kThreads, T::kMinBlocks)
    flash_forward_kernel(Problem p, float q_scale, int query_blocks,
                         const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, float* __restrict__ o) {
  constexpr int TM = T::kRowsPerThread, TN = T::kKeysPerThread;
  extern __shared__ __align__(16) float smem[];
  float* q_tile = smem;                                     // [kQueries][kRow]
  float* k_tiles = q_tile + T::kQFloats;                    // [kKBuffers][kKeys][kRow]
  float* v_tiles = k_tiles + T::kKBuffers * T::kKVFloats;   // [kVBuffers][kKeys][kRow]
  float* p_tile = v_tiles + T::kVBuffers * T::kKVFloats;    // [kQueries][kPRow]

  // Which queries: one flat grid.x over (batch, head, query block) (Step::block_work).
  const BlockWork w = Step::block_work(p, query_blocks);
  const int b = w.b, h = w.h, kvh = w.kvh;
  const int q_start = w.query_block * T::kQueries;

  const int lane = int(threadIdx.x) % kLanes;  // which keys and columns
  const int group = int(threadIdx.x) / kLanes;  // which rows: group, group + 16, ...

  // The keys this block needs: up to the last one its last query sees (causal), in tiles.
  // Keys below kv_full are visible to all its queries: those tiles need no mask.
  const int last_query = min(q_start + T::kQueries, p.seq_q) - 1;
  const int kv_end = visible_end(p, last_query);
  const int kv_full = visible_end(p, q_start);
  int row_end[TM];  // per row: the first key it does not see
#pragma unroll
  for (int i = 0; i < TM; ++i)
    row_end[i] = visible_end(p, min(q_start + group + kRowGroups * i, p.seq_q - 1));

  const float* q_head = q + Problem::offset(p.q, b, h, 0);
  const float* k_head = k + Problem::offset(p.k, b, kvh, 0);
  const float* v_head = v + Problem::offset(p.v, b, kvh, 0);

  // Q and the first K tile, then the first V tile: two groups of copies in flight.
  load_tile<D, T::kQueries, vec16>(q_tile, q_head, p.q.seq, q_start, p.seq_q, p.head_dim);
  const int tiles = (kv_end + T::kKeys - 1) / T::kKeys;  // 0 when no query sees a key
  if (tiles > 0) load_tile<D, T::kKeys, vec16>(k_tiles, k_head, p.k.seq, 0, p.seq_k, p.head_dim);
  device::cp_async_commit();
  if (tiles > 0) load_tile<D, T::kKeys, vec16>(v_tiles, v_head, p.v.seq, 0, p.seq_k, p.head_dim);
  device::cp_async_commit();
  // Q (with K(0)) has landed, for this thread's own copies: fold the softmax scale and
  // log2(e) into it once, instead of one multiply per score per key tile. The barrier at the
  // top of the first key tile publishes the scaled Q before any thread reads it.
  device::cp_async_wait<1>();
  scale_tile<D, T::kQueries, vec16>(q_tile, q_scale);

  float acc[TM][T::kCols];  // O rows x this thread's columns, unnormalized
  float m[TM], l[TM];       // running max (base-2 units), per-thread partial running sum
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < T::kCols; ++c) acc[i][c] = 0.0f;
  }

  // The V double-buffered scheme (1 + 2 buffers) commits its copy groups, per thread, as
  //   {Q, K(0)}, {V(0)} | {V(1)}, {K(1)} | {V(2)}, {K(2)} | ...
  //      prologue         tile 0           tile 1
  // one {V(t+1)} and one {K(t+1)} group per tile (empty on the last tile, so that the counts
  // below hold on every tile). Tile t uses V buffer t & 1:
  //   wait for K(t) (on tile 0 {V(0)} may still pend; later K(t) is the newest group and V(t)
  //     an older one, so both have landed); barrier A: K(t) visible to all, and everyone is
  //     done with P V of tile t-1, so the V buffer that held V(t-1), and P, are free;
  //   copy V(t+1) into that buffer (it runs during all of tile t); S, softmax, P;
  //   wait for V(t) (only {V(t+1)} may pend); barrier B: V(t) visible to all, everyone is
  //     done with K(t); copy K(t+1) into the K buffer (it runs during P V); O += P V.
  for (int t = 0; t < tiles; ++t) {
    const int kv_start = t * T::kKeys;
    const int k_stage = T::kKBuffers == 2 ? t & 1 : 0;
    const int v_stage = T::kVBuffers == 2 ? t & 1 : 0;
    if constexpr (T::kDoubleBuffered) {
      // Tile t has landed (our own copies), and after the barrier everyone's copies have,
      // and everyone is done with tile t-1, whose buffers the prefetch below overwrites.
      device::cp_async_wait_all();
      __syncthreads();
      if (t + 1 < tiles) {  // prefetch tile t+1 while computing tile t
        load_tile<D, T::kKeys, vec16>(k_tiles + (k_stage ^ 1) * T::kKVFloats, k_head, p.k.seq,
                                      kv_start + T::kKeys, p.seq_k, p.head_dim);
        load_tile<D, T::kKeys, vec16>(v_tiles + (v_stage ^ 1) * T::kKVFloats, v_head, p.v.seq,
                                      kv_start + T::kKeys, p.seq_k, p.head_dim);
        device::cp_async_commit();
      }
    } else if constexpr (T::kSplit) {
      // In flight: K(t) (with Q on the first tile), then V(t). Wait for K(t) only.
      device::cp_async_wait<1>();
      __syncthreads();
    } else {  // kVDouble
      if (t == 0)
        device::cp_async_wait<1>();
      else
        device::cp_async_wait<0>();
      __syncthreads();  // barrier A
      if (t + 1 < tiles)
        load_tile<D, T::kKeys, vec16>(v_tiles + (v_stage ^ 1) * T::kKVFloats, v_head, p.v.seq,
                                      kv_start + T::kKeys, p.seq_k, p.head_dim);
      device::cp_async_commit();  // empty on the last tile
    }
    const float* k_tile = k_tiles + k_stage * T::kKVFloats;
    const float* v_tile = v_tiles + v_stage * T::kKVFloats;

    // 1. S = Q K^T for rows group + 16i, keys lane + 16j (Step::qk).
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.0f;
    Step::template qk<T, smem_vec>(s, q_tile, k_tile, group, lane);

    // 2. The online softmax per row (module 03, section 1), in base-2 units (Q is scaled).
    const bool needs_mask = kv_start + T::kKeys > kv_full;  // diagonal or past seq_k
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        if (needs_mask && kv_start + lane + kLanes * j >= row_end[i]) s[i][j] = -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      // The row's 16 lanes are lanes 0-15 or 16-31 of the warp: xor 1, 2, 4, 8 stays inside.
      tile_max = device::group_max<kLanes>(tile_max);
      const float m_new = fmaxf(m[i], tile_max);
      // A row that has seen no visible key yet: measure from 0, so alpha = 2^-inf = 0 and
      // p = 0 instead of -inf - -inf = NaN (module 04, section 1).
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[i] - m_ref);
      m[i] = m_new;
      l[i] *= alpha;
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) acc[i][c] *= alpha;
      float* p_row = p_tile + (group + kRowGroups * i) * T::kPRow;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float pj = exp2f(s[i][j] - m_ref);
        l[i] += pj;
        p_row[lane + kLanes * j] = pj;
      }
    }
    if constexpr (T::kDoubleBuffered) {
      // P rows are written and read by the same 16 lanes (one half-warp): a warp barrier.
      __syncwarp();
    } else if constexpr (T::kSplit) {
      __syncthreads();  // everyone is done with K(t): copy K(t+1) into its buffer
      if (t + 1 < tiles) {
        load_tile<D, T::kKeys, vec16>(k_tiles, k_head, p.k.seq, kv_start + T::kKeys, p.seq_k,
                                      p.head_dim);
        device::cp_async_commit();
        device::cp_async_wait<1>();  // V(t) has landed; K(t+1) may still be in flight
      } else {
        device::cp_async_wait<0>();
      }
      __syncthreads();  // V(t) has landed for everyone (and P is written)
    } else {  // kVDouble
      device::cp_async_wait<1>();  // V(t) has landed (own copies); only {V(t+1)} may pend
      __syncthreads();             // barrier B: V(t) visible to all; everyone is done with K(t)
      if (t + 1 < tiles)
        load_tile<D, T::kKeys, vec16>(k_tiles, k_head, p.k.seq, kv_start + T::kKeys, p.seq_k,
                                      p.head_dim);
      device::cp_async_commit();  // empty on the last tile
    }

    // 3. O += P V for rows group + 16i, columns (chunk, lane) (Step::pv).
    Step::template pv<T, smem_vec>(acc, p_tile, v_tile, group, lane);
    if constexpr (T::kSplit) {
      __syncthreads();  // everyone is done with V(t): copy V(t+1) into its buffer
      if (t + 1 < tiles) {
        load_tile<D, T::kKeys, vec16>(v_tiles, v_head, p.v.seq, kv_start + T::kKeys, p.seq_k,
                                      p.head_dim);
        device::cp_async_commit();
      }
    }
    // The next iteration's barrier (top of the loop) protects p_tile too: it is rewritten
    // only after every half-warp has passed it (and, in the V double-buffered scheme, the
    // V buffer of tile t, which V(t+2) overwrites after that barrier).
  }
  // A block whose queries see no key still has its Q copy in flight.
  device::cp_async_wait_all();

  // Normalize and store: the 16 lanes of a row add up their partial sums first.
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = q_start + group + kRowGroups * i;
    const float sum = device::group_sum<kLanes>(l[i]);
    if (row >= p.seq_q) continue;
    // sum >= 1 if the row saw a key; 0 if it saw none (causal, seq_q > seq_k): output 0.
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* o_row = o + Problem::offset(p.o, b, h, row);
#pragma unroll
    for (int ch = 0; ch < T::kChunks; ++ch) {
      const int col = ch * kLanes * T::kWidth + lane * T::kWidth;
      if (vec16 && T::kWidth == 4 && col + 4 <= p.head_dim) {
        *reinterpret_cast<float4*>(o_row + col) =
            make_float4(acc[i][4 * ch] * inv, acc[i][4 * ch + 1] * inv,
                        acc[i][4 * ch + 2] * inv, acc[i][4 * ch + 3] * inv);
      } else {
#pragma unroll
        for (int e = 0; e < T::kWidth; ++e)
          if (col + e < p.head_dim) o_row[col + e] = acc[i][T::kWidth * ch + e] * inv;
      }
    }
  }
}

template <class Step, int D, class T, bool smem_vec = true>
Status launch_tiling(const Problem& p, const float* q, const float* k, const float* v,
                     float* o, cudaStream_t stream, bool allow_vec16 = true) {
  const int64_t query_blocks = (int64_t(p.seq_q) + T::kQueries - 1) / T::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;  // <= rows <= 2^31 - 1 (validate)
  const float q_scale = p.softmax_scale() * device::kLog2e;
  // 16-byte copies need every row of Q, K, V and O to start on a 16-byte boundary.
  const bool vec16 = allow_vec16 && p.head_dim % 4 == 0 && rows_aligned16(q, p.q) &&
                     rows_aligned16(k, p.k) && rows_aligned16(v, p.v) && rows_aligned16(o, p.o);
  auto kernel = vec16 ? flash_forward_kernel<Step, D, T, true, smem_vec>
                      : flash_forward_kernel<Step, D, T, false, smem_vec>;
  // Above 48 KB of shared memory a kernel must opt in, once per kernel.
  const cudaError_t opt_in = device::allow_shared_memory(
      T::kSmemBytes, flash_forward_kernel<Step, D, T, false, smem_vec>,
      flash_forward_kernel<Step, D, T, true, smem_vec>);
  ATTN_CUDA_RETURN(opt_in);
  kernel<<<unsigned(blocks), kThreads, T::kSmemBytes, stream>>>(p, q_scale, int(query_blocks),
                                                                q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The tile shapes, measured on the H100 (README, section 4, docs/results/worklog06_h100.txt):
// rows x keys per thread, K buffers, V buffers, unrolling. D = 64 and 128: 128 queries x 64
// keys per block. D = 64, split (one K, one V buffer): 108 KiB of shared memory, two blocks
// per SM, capped at 128 registers (ptxas spills ~200 bytes, yet it measured fastest).
// D = 128, V double-buffered: 205 KiB, one block (8 warps) per SM, up to 255 registers, and
// the loops unrolled further. D = 32 (not tuned): 64 x 64, double-buffered.
using Tiling32 = Tiling<32, 4, 4, 2, 2>;
using Tiling64 = Tiling<64, 8, 4, 1, 1>;
using Tiling128 = Tiling<128, 8, 4, 1, 2, 8, 4>;
template <int D>
using TunedTiling =
    std::conditional_t<D == 32, Tiling32, std::conditional_t<D == 64, Tiling64, Tiling128>>;

// forward() of the exercise and the solution: head_dim is padded to the next instance (the
// padding columns are zeros in shared memory).
template <class Step>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  return device::dispatch_head_dim<32, 64, 128>(p.head_dim, [&](auto d) {
    constexpr int D = decltype(d)::value;
    return launch_tiling<Step, D, TunedTiling<D>>(p, q, k, v, o, stream);
  });
}

}  // namespace attn::m06
