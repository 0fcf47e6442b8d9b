// Module 11, given: the kernels around the backward's math, on the CUDA cores, for every
// element type T (float, __half, __nv_bfloat16; arithmetic in fp32):
//   forward_rows_kernel  O and the log-sum-exp, one thread per query (the fp32 forward);
//   prepare_rows_kernel  what every backward kernel reads per query row: D_i = dO_i . O_i and
//                        lse_i in base-2 units, padded to whole query tiles (README, section 2);
//   dkdv_rows_kernel     one thread per key: Steps::dkdv_for_key (the exercise);
//   dq_rows_kernel       one thread per query: Steps::dq_for_query (the exercise);
//   store_dq_kernel      the tensor-core kernel's fp32 dQ sums, scaled, rounded to T.
// A flat grid over (row block, batch x head) everywhere: no 65535 limit on batch x heads.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/device/convert.cuh"
#include "common/device/math.cuh"
#include "common/device/warp.cuh"
#include "common/problem.h"
#include "modules/11_backward/dq_layout.h"

namespace attn::m11 {

using device::from_float;
using device::kLog2e;
using device::to_float;

// Query rows of the per-row arrays (lse in base 2, D, the fp32 dQ sums) are padded to a
// multiple of this, so the tensor-core kernel loads whole tiles of them without bounds checks.
constexpr int kRowPad = 64;
inline int padded_rows(int seq_q) { return (seq_q + kRowPad - 1) / kRowPad * kRowPad; }

// Everything a backward kernel reads and writes. lse2 and delta are [batch * heads][rows_pad]:
// row (b, h, i) at (b * heads + h) * rows_pad + i; padded rows hold lse2 = +inf (P = 0) and
// D = 0, so they add nothing anywhere.
template <class T>
struct RowsArgs {
  Problem p;
  const T *q, *k, *v, *o, *dout;
  const float* lse2;   // log2 of the row's sum of 2^(scores in base 2) = lse / ln 2
  const float* delta;  // D_i = sum_d dO[i][d] O[i][d]
  T *dq, *dk, *dv;
  float scale;       // p.softmax_scale()
  float scale_log2;  // scale * log2(e): a score in base-2 units is q . k * scale_log2
  int rows_pad;
  __device__ __forceinline__ int64_t row(int b, int h, int i) const {
    return (int64_t(b) * p.heads + h) * rows_pad + i;
  }
};

// Row `row` of a tensor into registers as float, zeros past head_dim (the arrays are sized for
// the compiled head dim D >= head_dim, so a loop over D is unrolled and stays in registers).
template <int D, class T>
__device__ __forceinline__ void load_row(float (&x)[D], const T* row, int head_dim) {
#pragma unroll
  for (int d = 0; d < D; ++d) x[d] = d < head_dim ? to_float(row[d]) : 0.0f;
}
template <int D, class T>
__device__ __forceinline__ void store_row(T* row, const float (&x)[D], int head_dim,
                                          float factor = 1.0f) {
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < head_dim) row[d] = from_float<T>(x[d] * factor);
}

// The first key query i does not see (bottom-right causal mask, module 04): seq_k without
// the mask; 0 when the query sees no key.
__device__ __forceinline__ int visible_end(const Problem& p, int i) {
  if (!p.causal) return p.seq_k;
  const int end = i + (p.seq_k - p.seq_q) + 1;
  return end < 0 ? 0 : end > p.seq_k ? p.seq_k : end;
}
// The first query that sees key j: 0 without the mask (seq_q when no query sees it).
__device__ __forceinline__ int first_query(const Problem& p, int j) {
  if (!p.causal) return 0;
  const int first = j - (p.seq_k - p.seq_q);
  return first < 0 ? 0 : first > p.seq_q ? p.seq_q : first;
}

constexpr int kRowThreads = 128;

// The readable forward with the log-sum-exp (the fp32 rung): one thread per query, the online
// softmax of module 03 in base-2 units over every key it sees, K and V rows read straight from
// global memory (the threads of a warp read the same key at the same time: one broadcast).
template <class Steps, class T, int D>
__global__ void __launch_bounds__(kRowThreads)
    forward_rows_kernel(RowsArgs<T> a, T* __restrict__ out, float* __restrict__ lse,
                        int row_blocks) {
  const Problem& p = a.p;
  const int bh = int(blockIdx.x / unsigned(row_blocks));
  const int b = bh / p.heads, h = bh % p.heads;
  const int i = int(blockIdx.x % unsigned(row_blocks)) * kRowThreads + int(threadIdx.x);
  if (i >= p.seq_q) return;
  float q[D], o[D];
  load_row<D>(q, a.q + Problem::offset(p.q, b, h, i), p.head_dim);
#pragma unroll
  for (int d = 0; d < D; ++d) q[d] *= a.scale_log2, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int g = p.kv_head(h), end = visible_end(p, i);
  for (int j = 0; j < end; ++j) {
    const T* k = a.k + Problem::offset(p.k, b, g, j);
    const T* v = a.v + Problem::offset(p.v, b, g, j);
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d)
      if (d < p.head_dim) s += q[d] * to_float(k[d]);
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new), w = exp2f(s - m_new);  // m = -inf at first: 0
    l = l * alpha + w;
#pragma unroll
    for (int d = 0; d < D; ++d)
      if (d < p.head_dim) o[d] = o[d] * alpha + w * to_float(v[d]);
    m = m_new;
  }
  store_row<D>(out + Problem::offset(p.o, b, h, i), o, p.head_dim, l > 0.0f ? 1.0f / l : 0.0f);
  lse[(int64_t(b) * p.heads + h) * p.seq_q + i] = Steps::log_sum_exp(m, l);
}

// D_i and lse_i / ln 2 for every (padded) query row. A group of kLanes threads per row, each
// thread 16 bytes of O and dO (kVec: one 16-byte load each; else element by element, for rows
// that are not 16-byte aligned), the group's partial sums added by shuffles. These two small
// kernels move only memory (O and dO in; the fp32 dQ sums in, dQ out), so their time is their
// bytes over the bandwidth when every load and store is 16 bytes wide: with one element per
// thread and the index math per element they measured far slower (README, section 5), a large
// share of the backward at short sequences. A flat grid of kPrepareBlock-thread blocks:
// row_blocks blocks of rows per (batch, head), rows_pad rows each.
constexpr int kPrepareBlock = 256;
template <class T, int D>
struct RowChunks {
  static constexpr int kElems = 16 / int(sizeof(T));  // elements of one 16-byte chunk
  static constexpr int kLanes = D / kElems;           // threads per row
  static constexpr int kRowsPerBlock = kPrepareBlock / kLanes;
  static_assert(kRowPad % kRowsPerBlock == 0, "a block's rows lie in one head's padded rows");
  static int row_blocks(int rows_pad) { return rows_pad / kRowsPerBlock; }
};

// The elements [d0, d0 + n) of a row (n = kElems: one 16-byte load; else up to head_dim).
template <class T, int kElems, bool kVec>
__device__ __forceinline__ void load_chunk(const T* row, int d0, int head_dim, float (&x)[kElems]) {
  if constexpr (kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + d0);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kElems; ++j) x[j] = to_float(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kElems; ++j) x[j] = d0 + j < head_dim ? to_float(row[d0 + j]) : 0.0f;
  }
}

template <class T, int D, bool kVec>
__global__ void __launch_bounds__(kPrepareBlock)
    prepare_rows_kernel(RowsArgs<T> a, const float* __restrict__ lse, int row_blocks) {
  using Rows = RowChunks<T, D>;
  const Problem& p = a.p;
  const int bh = int(blockIdx.x / unsigned(row_blocks));
  const int i = int(blockIdx.x % unsigned(row_blocks)) * Rows::kRowsPerBlock +
                int(threadIdx.x) / Rows::kLanes;
  const int d0 = (int(threadIdx.x) % Rows::kLanes) * Rows::kElems;
  const int64_t r = int64_t(bh) * a.rows_pad + i;
  const bool first = int(threadIdx.x) % Rows::kLanes == 0, real = i < p.seq_q;
  const int b = bh / p.heads, h = bh % p.heads;
  float sum = 0.0f;
  if (real && d0 < p.head_dim) {
    float o[Rows::kElems], dout[Rows::kElems];
    load_chunk<T, Rows::kElems, kVec>(a.o + Problem::offset(p.o, b, h, i), d0, p.head_dim, o);
    load_chunk<T, Rows::kElems, kVec>(a.dout + Problem::offset(p.o, b, h, i), d0, p.head_dim,
                                      dout);
#pragma unroll
    for (int j = 0; j < Rows::kElems; ++j) sum += dout[j] * o[j];
  }
  // Every lane of the warp shuffles (the groups are adjacent, aligned lanes); no early exit.
  sum = device::group_sum<Rows::kLanes>(sum);
  if (first) {
    // Padding rows: P = 2^(s - inf) = 0 and D = 0. A row's lse of +inf stays +inf.
    const_cast<float*>(a.lse2)[r] = real ? lse[int64_t(bh) * p.seq_q + i] * kLog2e : INFINITY;
    const_cast<float*>(a.delta)[r] = sum;
  }
}

// One thread per key j of K/V head g: Steps::dkdv_for_key writes dK[j] and dV[j].
template <class Steps, class T, int D>
__global__ void __launch_bounds__(kRowThreads) dkdv_rows_kernel(RowsArgs<T> a, int row_blocks) {
  const int bg = int(blockIdx.x / unsigned(row_blocks));
  const int j = int(blockIdx.x % unsigned(row_blocks)) * kRowThreads + int(threadIdx.x);
  if (j >= a.p.seq_k) return;
  Steps::template dkdv_for_key<T, D>(a, bg / a.p.kv_heads, bg % a.p.kv_heads, j);
}

// One thread per query i of head h: Steps::dq_for_query writes dQ[i].
template <class Steps, class T, int D>
__global__ void __launch_bounds__(kRowThreads) dq_rows_kernel(RowsArgs<T> a, int row_blocks) {
  const int bh = int(blockIdx.x / unsigned(row_blocks));
  const int i = int(blockIdx.x % unsigned(row_blocks)) * kRowThreads + int(threadIdx.x);
  if (i >= a.p.seq_q) return;
  Steps::template dq_for_query<T, D>(a, bh / a.p.heads, bh % a.p.heads, i);
}

// dQ = scale * (the fp32 sums of dS K the tensor-core kernel added up, [bh][rows_pad][D], row
// by row, or kBlocked: in the wgmma kernel's 64 x 64 blocks, dq_layout.h), rounded to T. One
// thread per 8 columns of a row: the 8 sums are contiguous in both layouts (two 16-byte
// loads), and kVec writes the 8 results with one 16-byte store. The same flat grid of rows as
// prepare_rows_kernel, D / 8 threads per row.
template <class T, int D, bool kBlocked, bool kVec>
__global__ void __launch_bounds__(kPrepareBlock)
    store_dq_kernel(RowsArgs<T> a, const float* __restrict__ dq_sum, int row_blocks) {
  static_assert(!kBlocked || (D % 64 == 0 && kRowPad % 64 == 0), "whole 64 x 64 blocks");
  using Rows = RowChunks<T, D>;
  static_assert(Rows::kElems == 8, "16-bit T: a thread's 8 columns are one 16-byte chunk");
  const Problem& p = a.p;
  const int bh = int(blockIdx.x / unsigned(row_blocks));
  const int i = int(blockIdx.x % unsigned(row_blocks)) * Rows::kRowsPerBlock +
                int(threadIdx.x) / Rows::kLanes;
  const int d0 = (int(threadIdx.x) % Rows::kLanes) * 8;
  if (i >= p.seq_q || d0 >= p.head_dim) return;
  const int64_t at = kBlocked ? dq_blocked_index(bh, a.rows_pad, D, i, d0)
                              : (int64_t(bh) * a.rows_pad + i) * D + d0;
  const float4 lo = *reinterpret_cast<const float4*>(dq_sum + at);
  const float4 hi = *reinterpret_cast<const float4*>(dq_sum + at + 4);
  const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int b = bh / p.heads, h = bh % p.heads;
  T* dst = a.dq + Problem::offset(p.q, b, h, i) + d0;
  if constexpr (kVec) {
    alignas(16) T out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = from_float<T>(x[j] * a.scale);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
  } else {
    for (int j = 0; j < 8 && d0 + j < p.head_dim; ++j) dst[j] = from_float<T>(x[j] * a.scale);
  }
}

}  // namespace attn::m11
