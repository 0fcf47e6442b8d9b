// Module 04 solution: module 03's FlashAttention forward (fp32) with the causal mask.
//
// Everything of module 03 is unchanged (its README explains the tiling, the registers and
// the online softmax); module 04 adds, only when p.causal is set (README sections 1 to 3):
//  * the mask, bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q;
//  * tile skipping: a block stops after the last key its last query sees, so the key tiles
//    above the diagonal are never loaded or computed (about half of them);
//  * the element mask only on the diagonal tiles, those that some but not all of the
//    block's queries see whole; tiles below them are visible to every query of the block;
//  * rows that see no key at all (seq_q > seq_k) output exactly 0, never 0/0;
//  * the heaviest query blocks (the last ones, which see the most keys) start first.
// Non-causal problems take module 03's path: every tile is full but the last (keys past
// seq_k), and the query blocks of a head are neighbours in blockIdx.x.
#include <cstdint>

#include "common/cuda_check.h"
#include "modules/04_causal/causal.h"

namespace attn::m04::ATTN_IMPL {

namespace {

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = 2^(x * log2(e))

// The most head-dim columns one thread holds. A thread keeps its slice of q and acc and the
// tile's kKeysPerTile scores in registers: up to 64 + 64 + 16 floats, which fits 2 blocks
// (8 warps) per SM at <= 255 registers per thread, with no spills. Measured on the H100:
// 32 columns and 3 blocks per SM ran d = 128 at 14.8 TFLOP/s, 64 columns at 25.9 (and d = 64
// the same, 27.3-27.5): half the threads per row, half the shuffles and redundant exp2 per
// key, and each K/V tile shared by twice as many queries (section 3).
constexpr int kColumnsPerThread = 64;
constexpr int kMinBlocksPerSM = 2;

// Everything about one instantiation that follows from the padded head dim D (the smallest
// of 32, 64, 96, 128 that holds head_dim; the columns past head_dim are zeros).
template <int D>
struct Tiling {
  // Threads per query row: a power of two, so that the threads of a row are aligned groups
  // of lanes within a warp (D = 96 takes 2 threads of 48 columns).
  static constexpr int kSplit = D <= kColumnsPerThread ? 1 : D <= 2 * kColumnsPerThread ? 2 : 4;
  static constexpr int kSlice = D / kSplit;   // head-dim columns one thread owns
  static constexpr int kChunks = kSlice / 4;  // ... as float4 chunks
  static constexpr int kQueries = kThreadsPerBlock / kSplit;  // query rows per block
  static_assert(kSlice % 4 == 0 && kSlice <= kColumnsPerThread, "whole float4 chunks");
};

// The head-dim column of element e (0..3) of chunk t of the thread with slice `part`.
// Chunks are dealt round-robin to the kSplit threads of a query (chunk t*kSplit + part), so
// at any step the threads of a query read neighbouring 16-byte words of one K/V row:
// different shared-memory banks, no conflict (module 03's README, section 3).
template <int D>
__device__ __forceinline__ int column(int t, int part, int e) {
  return 4 * (t * Tiling<D>::kSplit + part) + e;
}

// Stages keys [kv_start, kv_start + kKeysPerTile) of one head of K and of V in shared
// memory (kKeysPerTile x D floats each, row-major). Keys >= seq_k and columns >= head_dim
// are filled with zeros: nothing out of bounds is read, and the padding adds 0 to every dot
// product. The threads of a warp read neighbouring words of a row (coalesced), 16 bytes
// each when `vec4` (rows 16-byte aligned, head_dim % 4 == 0), else 4 bytes.
// Each thread keeps one column for the whole tile and steps down the rows, so its addresses
// are one pointer plus a stride (cheap in registers). When the row's loads do not divide
// the block (D = 96), the few threads left over load nothing.
template <int D, bool vec4>
__device__ __forceinline__ void load_kv_tile(float* k_tile, float* v_tile,
                                             const float* __restrict__ k_head,
                                             const float* __restrict__ v_head, int64_t k_stride,
                                             int64_t v_stride, int kv_start, int seq_k,
                                             int head_dim) {
  constexpr int kWidth = vec4 ? 4 : 1;                           // floats per load
  constexpr int kLoadsPerRow = D / kWidth;
  constexpr int kRowsPerPass = kThreadsPerBlock / kLoadsPerRow;  // >= 1 (D / 4 <= 128)
  constexpr int kPasses = (kKeysPerTile + kRowsPerPass - 1) / kRowsPerPass;
  const int row = int(threadIdx.x) / kLoadsPerRow;  // first row of this thread
  const int c = int(threadIdx.x) % kLoadsPerRow * kWidth;
  if (row >= kRowsPerPass) return;  // left over (D = 96); no barrier in here
  const bool column_ok = c < head_dim;
  const float* k_src = k_head + int64_t(kv_start + row) * k_stride + c;
  const float* v_src = v_head + int64_t(kv_start + row) * v_stride + c;
  float* k_dst = k_tile + row * D + c;
  float* v_dst = v_tile + row * D + c;
#pragma unroll
  for (int n = 0; n < kPasses; ++n) {
    const int r = row + n * kRowsPerPass;  // row within the tile
    if (kPasses * kRowsPerPass > kKeysPerTile && r >= kKeysPerTile) break;
    const bool ok = column_ok && kv_start + r < seq_k;
    if constexpr (vec4) {
      float4 k_val = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v_val = k_val;
      if (ok) {
        k_val = *reinterpret_cast<const float4*>(k_src);
        v_val = *reinterpret_cast<const float4*>(v_src);
      }
      *reinterpret_cast<float4*>(k_dst) = k_val;
      *reinterpret_cast<float4*>(v_dst) = v_val;
    } else {
      float k_val = 0.0f, v_val = 0.0f;
      if (ok) {
        k_val = *k_src;
        v_val = *v_src;
      }
      *k_dst = k_val;
      *v_dst = v_val;
    }
    k_src += kRowsPerPass * k_stride;
    v_src += kRowsPerPass * v_stride;
    k_dst += kRowsPerPass * D;
    v_dst += kRowsPerPass * D;
  }
}

template <int D, bool vec4>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSM)
    flash_forward_kernel(Problem p, float q_scale, int query_blocks,
                         const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, float* __restrict__ o) {
  using T = Tiling<D>;
  __shared__ __align__(16) float k_tile[kKeysPerTile * D];
  __shared__ __align__(16) float v_tile[kKeysPerTile * D];

  // Which queries. Non-causal: blockIdx.x enumerates (head, query block) with the query
  // blocks of one head side by side, so blocks that run at the same time read the same K and
  // V (L2 hits). Causal: the query blocks differ in cost (block n sees about n + 1 blocks'
  // worth of keys), so blockIdx.x enumerates (query block, head) from the LAST query block
  // down: the first batch*heads blocks to start are the heaviest ones of every head, and the
  // light ones fill the gaps at the end (README, section 3).
  // One flat grid.x: batch*heads can pass grid.y's limit of 65535.
  const int heads_total = p.batch * p.heads;
  int query_block, bh;
  if (p.causal) {
    query_block = query_blocks - 1 - int(blockIdx.x / unsigned(heads_total));
    bh = int(blockIdx.x % unsigned(heads_total));
  } else {
    query_block = int(blockIdx.x % unsigned(query_blocks));
    bh = int(blockIdx.x / unsigned(query_blocks));
  }
  const int b = bh / p.heads, h = bh % p.heads;
  const int part = int(threadIdx.x) % T::kSplit;  // which slice of the row this thread holds
  const int first_query = query_block * T::kQueries;
  const int i = first_query + int(threadIdx.x) / T::kSplit;
  // Threads past the last query still load tiles and reach every barrier; they compute on
  // a zero query and write nothing.
  const bool has_row = i < p.seq_q;

  // The causal mask (README, section 1): query i sees keys j <= i + shift, shift =
  // seq_k - seq_q, so keys [0, i + shift + 1) clamped to [0, seq_k). Without the mask every
  // query sees [0, seq_k).
  const int shift = p.seq_k - p.seq_q;
  const auto visible_end = [&](int query) {  // first key `query` does not see
    return p.causal ? max(0, min(p.seq_k, query + shift + 1)) : p.seq_k;
  };
  const int last_query = min(first_query + T::kQueries, p.seq_q) - 1;
  // The tiles of the block (README, section 2): keys >= kv_end are masked for every query
  // of the block (skipped), keys < kv_full are visible to every query (no mask needed).
  const int kv_end = visible_end(last_query);
  const int kv_full = visible_end(first_query);
  const int row_end = visible_end(i);  // the first key this thread's row does not see

  // The query slice, pre-multiplied by softmax_scale * log2(e): then q . k is the score in
  // base-2 units and exp2f gives its exponential (module 03's README, section 2).
  float q_reg[T::kSlice], acc[T::kSlice];
  const float* q_row = q + Problem::offset(p.q, b, h, has_row ? i : 0);
#pragma unroll
  for (int t = 0; t < T::kChunks; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = column<D>(t, part, e);
      q_reg[4 * t + e] = (has_row && c < p.head_dim) ? q_row[c] * q_scale : 0.0f;
      acc[4 * t + e] = 0.0f;
    }
  float m = -INFINITY;  // running max of the scores seen so far (base-2 units)
  float l = 0.0f;       // running sum of 2^(s_j - m)

  const float* k_head = k + Problem::offset(p.k, b, h, 0);
  const float* v_head = v + Problem::offset(p.v, b, h, 0);

  for (int kv_start = 0; kv_start < kv_end; kv_start += kKeysPerTile) {
    load_kv_tile<D, vec4>(k_tile, v_tile, k_head, v_head, p.k.seq, p.v.seq, kv_start, p.seq_k,
                          p.head_dim);
    __syncthreads();  // the whole tile is in shared memory before anyone reads it

    // The tile's scores. All queries of a warp read the same K row: a broadcast.
    float s[kKeysPerTile];
#pragma unroll
    for (int j = 0; j < kKeysPerTile; ++j) {
      const float4* k_row = reinterpret_cast<const float4*>(k_tile + j * D) + part;
      float dot = 0.0f;
#pragma unroll
      for (int t = 0; t < T::kChunks; ++t) {
        const float4 kc = k_row[t * T::kSplit];
        dot = fmaf(q_reg[4 * t + 0], kc.x, dot);
        dot = fmaf(q_reg[4 * t + 1], kc.y, dot);
        dot = fmaf(q_reg[4 * t + 2], kc.z, dot);
        dot = fmaf(q_reg[4 * t + 3], kc.w, dot);
      }
      // The kSplit threads of a query are neighbouring lanes: sum their partial products
      // (butterfly: afterwards every one of them holds the full score).
#pragma unroll
      for (int lane_mask = 1; lane_mask < T::kSplit; lane_mask *= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, lane_mask);
      s[j] = dot;
    }
    // A diagonal tile (some of its keys are masked for some of the block's queries), or the
    // last tile sticking out past seq_k: mask per element. The full tiles below skip this.
    if (kv_start + kKeysPerTile > kv_full) {
#pragma unroll
      for (int j = 0; j < kKeysPerTile; ++j)
        if (kv_start + j >= row_end) s[j] = -INFINITY;
    }

    // The online-softmax update, once for the whole tile (module 03's README, section 1).
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeysPerTile; ++j) tile_max = fmaxf(tile_max, s[j]);
    const float m_new = fmaxf(m, tile_max);
    // While this row has seen no visible key (all masked so far), m_new is -inf and
    // s_j - m_new would be -inf - -inf = NaN. Measuring from 0 instead gives alpha = 2^-inf
    // = 0 and p = 0: l and acc stay 0. A tile fully masked for a row that has seen keys
    // changes nothing either: m_new = m, alpha = 1, p = 0 (README, section 1).
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - m_ref);  // 0 on the first tile (m = -inf), else in (0, 1]
    l *= alpha;
#pragma unroll
    for (int c = 0; c < T::kSlice; ++c) acc[c] *= alpha;
#pragma unroll
    for (int j = 0; j < kKeysPerTile; ++j) {
      const float pj = exp2f(s[j] - m_ref);  // in [0, 1]; 0 for masked keys
      l += pj;
      const float4* v_row = reinterpret_cast<const float4*>(v_tile + j * D) + part;
#pragma unroll
      for (int t = 0; t < T::kChunks; ++t) {
        const float4 vc = v_row[t * T::kSplit];
        acc[4 * t + 0] = fmaf(pj, vc.x, acc[4 * t + 0]);
        acc[4 * t + 1] = fmaf(pj, vc.y, acc[4 * t + 1]);
        acc[4 * t + 2] = fmaf(pj, vc.z, acc[4 * t + 2]);
        acc[4 * t + 3] = fmaf(pj, vc.w, acc[4 * t + 3]);
      }
    }
    m = m_new;
    __syncthreads();  // everyone is done with this tile before the next load overwrites it
  }

  if (has_row) {
    // l >= 1 if the row saw a key (its largest score contributes 2^0 = 1); l = 0 if it saw
    // none (seq_q > seq_k): the output of such a row is defined as 0, not 0/0 = NaN.
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    float* o_row = o + Problem::offset(p.o, b, h, i);
#pragma unroll
    for (int t = 0; t < T::kChunks; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = column<D>(t, part, e);
        if (c < p.head_dim) o_row[c] = acc[4 * t + e] * inv_l;
      }
  }
}

template <int D>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  using T = Tiling<D>;
  const int64_t query_blocks = (int64_t(p.seq_q) + T::kQueries - 1) / T::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;  // <= rows <= 2^31 - 1 (validate)
  const float q_scale = p.softmax_scale() * kLog2e;
  // 16-byte loads need every K and V row to start on a 16-byte boundary.
  const bool vec4 = p.head_dim % 4 == 0 && rows_aligned16(k, p.k) && rows_aligned16(v, p.v);
  if (vec4)
    flash_forward_kernel<D, true><<<unsigned(blocks), kThreadsPerBlock, 0, stream>>>(
        p, q_scale, int(query_blocks), q, k, v, o);
  else
    flash_forward_kernel<D, false><<<unsigned(blocks), kThreadsPerBlock, 0, stream>>>(
        p, q_scale, int(query_blocks), q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  // The head dim is a template parameter so that q and acc are register arrays (their size
  // and every index are known at compile time); head_dim is padded to the next instance.
  if (p.head_dim <= 32) return launch<32>(p, q, k, v, o, stream);
  if (p.head_dim <= 64) return launch<64>(p, q, k, v, o, stream);
  if (p.head_dim <= 96) return launch<96>(p, q, k, v, o, stream);
  return launch<128>(p, q, k, v, o, stream);
}

}  // namespace attn::m04::ATTN_IMPL
