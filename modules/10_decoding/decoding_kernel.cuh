// Module 10, given: the decode pipeline, the combine kernel, the append kernel and the packed
// prefill, everything except the five steps the exercise writes (DecodeSteps, README
// sections 2, 3, 4 and 6):
//
//   Steps::query_row(prm, row)              GQA packing: which (query token, head of the
//                                           group) row `row` of a K/V head's tile holds
//   Steps::key_offset(prm, pages, key, kvh) paging: where key `key` of a sequence lives in
//                                           the cache, through its block-table row `pages`
//   Steps::split_keys(prm, split, seqlen)   split-KV: the keys split `split` reads
//   Steps::combine_weights(lse, n, w)       the log-sum-exp merge: each split's weight
//   Steps::sequence(cu_q, cu_k, b)          packed prefill: sequence b's rows and lengths
//
// The decode kernel. One block per (split, K/V head x 16-row tile, sequence). Its 16 rows are
// query rows that read the same K/V head (the group's heads, times the new tokens), so every
// K/V row fetched from memory feeds all of them: one tensor-core tile instead of `group`
// separate reads. The block streams its keys through a ring of kStages shared-memory stages
// of kKeys keys (cp.async, as in module 07); each of the 4 warps computes a 16-key slice of
// every tile with its own online softmax, and the warps' states are merged at the end with
// the same log-sum-exp rule the combine kernel applies across blocks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/cp_async.cuh"
#include "common/device/math.cuh"
#include "common/device/shared_memory.cuh"
#include "common/device/warp.cuh"
#include "common/paged.h"
#include "common/status.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"
#include "modules/10_decoding/decoding.h"

namespace attn::m10 {

using device::fast_exp2;
using device::kLog2e;
using device::smem_u32;
using m07::chunk_offset;
using m07::Elem;
using m07::ldmatrix_x4;
using m07::ldmatrix_x4_trans;

// The 16-bit pattern of x rounded to T (to nearest even), for a store to a uint16_t tensor.
template <class T>
__device__ __forceinline__ uint16_t to_bits(float x);
template <>
__device__ __forceinline__ uint16_t to_bits<__nv_bfloat16>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
template <>
__device__ __forceinline__ uint16_t to_bits<__half>(float x) {
  return __half_as_ushort(__float2half_rn(x));
}

// Everything the decode kernels need, by value in constant parameter space.
struct DecodeParams {
  const uint16_t* q = nullptr;        // [batch, seq_q, heads, head_dim]
  const uint16_t* k_cache = nullptr;  // [num_pages, page_size, kv_heads, head_dim]
  const uint16_t* v_cache = nullptr;
  const int32_t* block_table = nullptr;  // [batch, pages_per_seq]
  const int32_t* seqlens = nullptr;      // [batch]
  uint16_t* o = nullptr;                 // [batch, seq_q, heads, head_dim]: splits == 1
  float* partial_o = nullptr;    // [splits, batch, seq_q, heads, head_dim]: splits > 1
  float* partial_lse = nullptr;  // [splits, batch, seq_q, heads], base 2 (see store_rows)
  int batch = 0, heads = 0, kv_heads = 0, group = 0, seq_q = 0, head_dim = 0;
  int page_size = 0, page_shift = 0, pages_per_seq = 0;
  int row_tiles = 0;             // 16-row tiles per K/V head: ceil(group * seq_q / 16)
  int splits = 1, keys_per_split = 0;
  float scale_log2 = 0.f;        // softmax scale * log2(e): scores in base-2 units
};

// Row `row` (0 .. group * seq_q - 1) of a K/V head's rows: the query token and the head of
// the group it holds (query head = kv_head * group + head_in_group).
struct QueryRow {
  int token;
  int head_in_group;
};
// Keys [begin, end) of a sequence; empty when begin >= end.
struct KeyRange {
  int begin, end;
};
// Sequence b of a packed batch: its first query and key rows, and its lengths.
struct SequenceRows {
  int64_t q_start;
  int q_len;
  int64_t k_start;
  int k_len;
};

// One configuration of the decode kernel: D (head_dim padded to 64 or 128), the number of
// ring stages and of warps (a tile has 16 keys per warp).
template <int D_, int kStages_, int kWarps_ = 4>
struct DecodeConfig {
  static constexpr int D = D_;  // padding columns are zeros
  static constexpr int kStages = kStages_;
  static constexpr int kWarps = kWarps_;  // each computes a 16-key slice of every tile
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16;               // query rows per block: one mma row tile
  static constexpr int kKeys = 16 * kWarps;      // keys per tile: a 16-key slice per warp
  static constexpr int kTileElems = kKeys * D;
  static constexpr int kRingElems = kStages * 2 * kTileElems;  // [K0 V0 | K1 V1 | ...]
  static constexpr int kQOffset = kRingElems;
  static constexpr int kSmemBytes = 2 * (kRingElems + kRows * D);
  // Blocks per SM that shared memory allows (228 KB per SM, 1 KB of it reserved per block).
  static constexpr int kBlocksPerSm =
      (228 * 1024) / (kSmemBytes + 1024) < 8 ? (228 * 1024) / (kSmemBytes + 1024) : 8;
  static constexpr int kMinBlocks = kBlocksPerSm;
  // The end-of-block merge reuses the ring: per warp, O (padded rows: fewer bank conflicts
  // on the float2 stores), m and l.
  static constexpr int kMergeStride = D + 8;
  static constexpr int kMergeFloats = kWarps * kRows * (kMergeStride + 2);
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(4 * kMergeFloats <= 2 * kRingElems, "the merge fits in the ring");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

// The production configurations (README, section 7): about 100 KB of stages, two blocks per
// SM, and two tiles of K and V in flight per block.
using Decode64 = DecodeConfig<64, 6>;
using Decode128 = DecodeConfig<128, 3>;

// The first key a row does not see: the split's end, and with the causal mask the position of
// the row's token (bottom-right alignment: token i of seq_q sits at seqlen - seq_q + i).
template <bool kCausal>
__device__ __forceinline__ int row_end(int seqlen, int seq_q, int token, int split_end) {
  if (!kCausal) return split_end;
  return min(split_end, max(0, seqlen - seq_q + token + 1));
}

template <class Steps, class T, class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    decode_kernel(const DecodeParams prm) {
  constexpr int D = C::D;
  extern __shared__ __align__(128) uint16_t smem[];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
#if __CUDA_ARCH__ >= 900
  // The combine kernel may be launched once every block of this grid has started.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const int split = int(blockIdx.x);
  const int head_tile = int(blockIdx.y);
  const int kv_head = head_tile / prm.row_tiles;
  const int row0 = (head_tile % prm.row_tiles) * C::kRows;
  const int b = int(blockIdx.z);
  const int rows = prm.group * prm.seq_q;
  const int seqlen = prm.seqlens[b];
  const int32_t* pages = prm.block_table + int64_t(b) * prm.pages_per_seq;

  // The keys of this split, and the first key each of this lane's two rows (g, g + 8) does
  // not see. `load_end` bounds what is copied; `full_end` is where the first row stops, so
  // tiles below it need no mask.
  const KeyRange range = Steps::split_keys(prm, split, seqlen);
  const int begin = range.begin, split_end = min(range.end, seqlen);
  int my_end[2];
  int load_end = begin, full_end = split_end;
  for (int r = 0; r < C::kRows; ++r) {
    const int row = row0 + r;
    const int end = row < rows ? row_end<kCausal>(seqlen, prm.seq_q,
                                                  Steps::query_row(prm, row).token, split_end)
                               : begin;
    if (row < rows) load_end = max(load_end, end), full_end = min(full_end, end);
    if (r == lane / 4) my_end[0] = end;
    if (r == lane / 4 + 8) my_end[1] = end;
  }
  const int tiles = load_end > begin ? (load_end - begin + C::kKeys - 1) / C::kKeys : 0;

  // Copies tile t (keys begin + kKeys t ...) of K and V into stage `slot`: 16-byte pieces,
  // consecutive threads on consecutive pieces of a row. Keys the block does not read and
  // padding columns become zeros (a zero V row times p = 0 is 0; garbage could be NaN).
  auto load_tile = [&](int t, int slot) {
    uint16_t* sK = smem + slot * 2 * C::kTileElems;
    uint16_t* sV = sK + C::kTileElems;
    const int key0 = begin + t * C::kKeys;
#pragma unroll
    for (int i = tid; i < C::kKeys * (D / 8); i += C::kThreads) {
      const int r = i / (D / 8), c = i % (D / 8), key = key0 + r;
      const bool ok = key < load_end && c * 8 < prm.head_dim;
      const int64_t at = ok ? Steps::key_offset(prm, pages, key, kv_head) + c * 8 : 0;
      device::cp_async_16(sK + chunk_offset<D, true>(r, c), prm.k_cache + at, ok);
      device::cp_async_16(sV + chunk_offset<D, true>(r, c), prm.v_cache + at, ok);
    }
  };
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < tiles) load_tile(s, s);
    device::cp_async_commit();  // empty groups keep the wait counts uniform
  }
  // Q: the block's 16 rows into shared memory (zeros for rows past the group and columns
  // past head_dim), then into A fragments for the whole kernel. Loaded after the first K/V
  // copies are issued, so that its wait overlaps theirs.
  uint16_t* const q_tile = smem + C::kQOffset;
  for (int i = tid; i < C::kRows * (D / 8); i += C::kThreads) {
    const int r = i / (D / 8), c = i % (D / 8), row = row0 + r;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (row < rows && c * 8 < prm.head_dim) {
      const QueryRow qr = Steps::query_row(prm, row);
      const int head = kv_head * prm.group + qr.head_in_group;
      x = *reinterpret_cast<const uint4*>(
          prm.q + ((int64_t(b) * prm.seq_q + qr.token) * prm.heads + head) * prm.head_dim + c * 8);
    }
    *reinterpret_cast<uint4*>(q_tile + chunk_offset<D, true>(r, c)) = x;
  }

  __syncthreads();  // Q tile written

  uint32_t qa[D / 16][4];
  const uint32_t sQ = smem_u32(q_tile);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qa[kk], sQ + 2 * chunk_offset<D, true>(lane % 16, 2 * kk + lane / 16));

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int t = 0; t < tiles; ++t) {
    device::cp_async_wait<C::kStages - 2>();
    __syncthreads();  // tile t landed for every thread; stage (t - 1) % kStages is free
    if (t + C::kStages - 1 < tiles)
      load_tile(t + C::kStages - 1, (t + C::kStages - 1) % C::kStages);
    device::cp_async_commit();

    const int slot = t % C::kStages;
    const uint32_t sK = smem_u32(smem + slot * 2 * C::kTileElems);
    const uint32_t sV = sK + 2 * C::kTileElems;
    const int key0 = begin + t * C::kKeys + 16 * warp;  // this warp's 16 keys
    if (key0 >= load_end) continue;                       // warp-uniform: nothing to add

    // S (16 rows x 16 keys) = Q K^T: two 8-key n-tiles, D/16 k-steps.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];  // b0, b1 of keys 0-7, then of keys 8-15
      ldmatrix_x4(kb, sK + 2 * chunk_offset<D, true>(16 * warp + (lane / 16) * 8 + lane % 8,
                                                     2 * kk + (lane / 8) % 2));
      Elem<T>::mma(s[0], qa[kk], kb[0], kb[1]);
      Elem<T>::mma(s[1], qa[kk], kb[2], kb[3]);
    }
    if (key0 + 16 > full_end) {  // some key past some row's end
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 8 * n + 2 * (lane % 4) + (e & 1) >= my_end[e >> 1]) s[n][e] = -INFINITY;
    }

    // The online softmax of module 07 on the two rows this lane holds (base 2).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = device::group_max<4>(mx);
      const float m_new = fmaxf(m[r], mx * prm.scale_log2);
      const float m_ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: p = 0
      const float alpha = fast_exp2(m[r] - m_ref);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) acc[n][2 * r] *= alpha, acc[n][2 * r + 1] *= alpha;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][2 * r] = fast_exp2(fmaf(s[n][2 * r], prm.scale_log2, -m_ref));
        s[n][2 * r + 1] = fast_exp2(fmaf(s[n][2 * r + 1], prm.scale_log2, -m_ref));
        l[r] += s[n][2 * r] + s[n][2 * r + 1];
      }
    }
    // O += P V: P's C layout is the A layout of one 16-key k-step.
    const uint32_t pa[4] = {Elem<T>::pack(s[0][0], s[0][1]), Elem<T>::pack(s[0][2], s[0][3]),
                            Elem<T>::pack(s[1][0], s[1][1]), Elem<T>::pack(s[1][2], s[1][3])};
#pragma unroll
    for (int c = 0; c < D / 8; c += 2) {
      uint32_t vb[4];  // b0, b1 of columns 8c .. 8c + 7, then of the next 8
      ldmatrix_x4_trans(vb, sV + 2 * chunk_offset<D, true>(16 * warp + ((lane / 8) % 2) * 8 +
                                                               lane % 8,
                                                           c + lane / 16));
      Elem<T>::mma(acc[c], pa, vb[0], vb[1]);
      Elem<T>::mma(acc[c + 1], pa, vb[2], vb[3]);
    }
  }
  device::cp_async_wait_all();
  __syncthreads();  // every warp is done with the ring: it becomes the merge area

  // Merge the 4 warps' states: each wrote m, l (row sums, quad-reduced) and O unnormalized.
  float* merge = reinterpret_cast<float*>(smem);
  float* mo = merge + warp * C::kRows * C::kMergeStride;
  float* mm = merge + C::kWarps * C::kRows * C::kMergeStride;
  float* ml = mm + C::kWarps * C::kRows;
  const int g = lane / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = device::group_sum<4>(l[r]);
    if (lane % 4 == 0) mm[warp * C::kRows + g + 8 * r] = m[r], ml[warp * C::kRows + g + 8 * r] = l[r];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(mo + (g + 8 * r) * C::kMergeStride + 8 * n + 2 * (lane % 4)) =
          make_float2(acc[n][2 * r], acc[n][2 * r + 1]);
  }
  __syncthreads();

  for (int i = tid; i < C::kRows * D; i += C::kThreads) {
    const int r = i / D, col = i % D, row = row0 + r;
    if (row >= rows || col >= prm.head_dim) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) mx = fmaxf(mx, mm[w * C::kRows + r]);
    float sum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float weight = fast_exp2(mm[w * C::kRows + r] - mx);  // 0 for a warp with no key
        sum += weight * ml[w * C::kRows + r];
        o += weight * merge[(w * C::kRows + r) * C::kMergeStride + col];
      }
    }
    const QueryRow qr = Steps::query_row(prm, row);
    const int64_t out_row =
        (int64_t(b) * prm.seq_q + qr.token) * prm.heads + kv_head * prm.group + qr.head_in_group;
    const float value = sum > 0.f ? o / sum : 0.f;  // a row that saw no key outputs 0
    if (prm.splits == 1) {
      prm.o[out_row * prm.head_dim + col] = to_bits<T>(value);
    } else {
      // The split's output normalized by its own sum, and log2 of that sum measured in the
      // scores' base-2 units: lse = m + log2(l), -inf when the split saw no key.
      const int64_t rows_total = int64_t(prm.batch) * prm.seq_q * prm.heads;
      prm.partial_o[(split * rows_total + out_row) * prm.head_dim + col] = value;
      if (col == 0) prm.partial_lse[split * rows_total + out_row] = sum > 0.f ? mx + log2f(sum) : -INFINITY;
    }
  }
}

// The combine kernel: one block per output row (b, token, head). The row's log-sum-exps go
// to shared memory, one thread turns them into weights (Steps::combine_weights), and the
// threads sum the weighted partials, one column each: the loads of the splits are independent,
// so they are in flight together.
template <class Steps, class T>
__global__ void __launch_bounds__(128) combine_kernel(const DecodeParams prm) {
  __shared__ float lse[kMaxSplits];
  __shared__ float weight[kMaxSplits];
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the partials are written
#endif
  const int64_t rows_total = int64_t(prm.batch) * prm.seq_q * prm.heads;
  const int64_t row = blockIdx.x;
  for (int s = int(threadIdx.x); s < prm.splits; s += int(blockDim.x))
    lse[s] = prm.partial_lse[s * rows_total + row];
  __syncthreads();
  if (threadIdx.x == 0) Steps::combine_weights(lse, prm.splits, weight);
  __syncthreads();
  const int64_t stride = rows_total * prm.head_dim;
  for (int col = int(threadIdx.x); col < prm.head_dim; col += int(blockDim.x)) {
    const float* o = prm.partial_o + row * prm.head_dim + col;
    float acc = 0.f;
#pragma unroll 8
    for (int s = 0; s < prm.splits; ++s) acc += weight[s] * o[s * stride];
    prm.o[row * prm.head_dim + col] = to_bits<T>(acc);
  }
}

// The append kernel: one thread per 16-byte piece of a new K or V row.
template <class Steps>
__global__ void append_kernel(const DecodeParams prm, const uint16_t* __restrict__ k_new,
                              const uint16_t* __restrict__ v_new, uint16_t* k_cache,
                              uint16_t* v_cache) {
  const int chunks = prm.head_dim / 8;
  const int64_t pieces = int64_t(prm.batch) * prm.seq_q * prm.kv_heads * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pieces;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % chunks);
    const int64_t new_row = i / chunks;  // (b, token, kv_head)
    const int kv_head = int(new_row % prm.kv_heads);
    const int token = int((new_row / prm.kv_heads) % prm.seq_q);
    const int b = int(new_row / (int64_t(prm.kv_heads) * prm.seq_q));
    const int key = prm.seqlens[b] - prm.seq_q + token;  // the new token's cache position
    if (key < 0) continue;
    const int64_t at = Steps::key_offset(prm, prm.block_table + int64_t(b) * prm.pages_per_seq,
                                         key, kv_head) + c * 8;
    *reinterpret_cast<uint4*>(k_cache + at) =
        *reinterpret_cast<const uint4*>(k_new + new_row * prm.head_dim + c * 8);
    *reinterpret_cast<uint4*>(v_cache + at) =
        *reinterpret_cast<const uint4*>(v_new + new_row * prm.head_dim + c * 8);
  }
}

// ---- Host side ------------------------------------------------------------------------------

inline int log2_exact(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

// The parameters of p with its split plan (choose_splits, decoding.h).
inline DecodeParams make_params(const PagedProblem& p, const SplitPlan& plan) {
  DecodeParams prm;
  prm.batch = p.batch, prm.heads = p.heads, prm.kv_heads = p.kv_heads, prm.group = p.group();
  prm.seq_q = p.seq_q, prm.head_dim = p.head_dim;
  prm.page_size = p.page_size, prm.page_shift = log2_exact(p.page_size);
  prm.pages_per_seq = p.pages_per_seq;
  prm.row_tiles = row_tiles(p);
  prm.splits = plan.splits, prm.keys_per_split = plan.keys_per_split;
  prm.scale_log2 = p.softmax_scale() * kLog2e;
  return prm;
}


template <class Steps, class T, class C>
Status launch_decode(const PagedProblem& p, const PagedDevicePtrs& t, const SplitPlan& plan,
                     cudaStream_t stream) {
  DecodeParams prm = make_params(p, plan);
  prm.q = static_cast<const uint16_t*>(t.q);
  prm.k_cache = static_cast<const uint16_t*>(t.k_cache);
  prm.v_cache = static_cast<const uint16_t*>(t.v_cache);
  prm.block_table = t.block_table;
  prm.seqlens = t.seqlens_k;
  prm.o = static_cast<uint16_t*>(t.o);
  if (plan.splits > 1) {
    if (t.workspace_bytes < workspace_bytes(p, plan))
      return Status::error("module 10: the decode workspace is smaller than "
                           "decode_workspace_bytes() asks for");
    prm.partial_o = static_cast<float*>(t.workspace);
    prm.partial_lse = prm.partial_o + int64_t(plan.splits) * p.q_elements();
  }
  using Kernel = void (*)(DecodeParams);
  static const Kernel kernels[2] = {decode_kernel<Steps, T, C, false>,
                                    decode_kernel<Steps, T, C, true>};
  const cudaError_t opt_in =
      device::allow_shared_memory(C::kSmemBytes, kernels[0], kernels[1]);
  ATTN_CUDA_RETURN(opt_in);
  const dim3 grid(unsigned(plan.splits), unsigned(p.kv_heads * prm.row_tiles), unsigned(p.batch));
  kernels[p.causal ? 1 : 0]<<<grid, C::kThreads, C::kSmemBytes, stream>>>(prm);
  ATTN_CUDA_RETURN(cudaGetLastError());
  if (plan.splits > 1) {
    const int64_t rows_total = int64_t(p.batch) * p.seq_q * p.heads;
    // On Hopper the combine is a programmatic dependent launch: the GPU prepares it while the
    // decode kernel's last blocks run, instead of after they end; its griddepcontrol.wait
    // then waits for the decode kernel's writes (README, section 2).
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(rows_total));
    config.blockDim = dim3(128);
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = current_compute_capability() >= 90 ? 1 : 0;
    ATTN_CUDA_RETURN(cudaLaunchKernelEx(&config, combine_kernel<Steps, T>, prm));
  }
  return Status::ok();
}

// decode() with a given split plan and configurations (the benchmark tries others).
template <class Steps, class C64 = Decode64, class C128 = Decode128>
Status decode_with(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream,
                   SplitPlan plan) {
  if (Status s = supports(p); !s) return s;
  if (Status s = require_sm80("module 10"); !s) return s;  // common/device.h
  if (p.batch == 0) return Status::ok();
  if (plan.splits > kMaxSplits)
    return Status::error("module 10: a split plan of more than " + std::to_string(kMaxSplits) +
                         " splits");
  const bool bf16 = p.dtype == DType::bf16;
  if (p.head_dim <= 64)
    return bf16 ? launch_decode<Steps, __nv_bfloat16, C64>(p, t, plan, stream)
                : launch_decode<Steps, __half, C64>(p, t, plan, stream);
  return bf16 ? launch_decode<Steps, __nv_bfloat16, C128>(p, t, plan, stream)
              : launch_decode<Steps, __half, C128>(p, t, plan, stream);
}

// decode() of the exercise and the solution: the split plan for this GPU.
template <class Steps>
Status decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream) {
  return decode_with<Steps>(p, t, stream, choose_splits(p, sm_count()));
}

template <class Steps>
Status append_kv(const PagedProblem& p, const void* k_new, const void* v_new, void* k_cache,
                 void* v_cache, const int32_t* block_table, const int32_t* seqlens_k,
                 cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  if (Status s = require_sm80("module 10"); !s) return s;  // common/device.h
  DecodeParams prm = make_params(p, SplitPlan{});
  prm.block_table = block_table;
  prm.seqlens = seqlens_k;
  const int64_t pieces = int64_t(p.batch) * p.seq_q * p.kv_heads * (p.head_dim / 8);
  if (pieces == 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((pieces + 255) / 256, 65535);
  append_kernel<Steps><<<unsigned(blocks), 256, 0, stream>>>(
      prm, static_cast<const uint16_t*>(k_new), static_cast<const uint16_t*>(v_new),
      static_cast<uint16_t*>(k_cache), static_cast<uint16_t*>(v_cache));
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace attn::m10
