// The device layer: the online softmax of one fp32 query row, a K/V tile at a time (module
// 03's README, section 1). Module 03's exercise writes the update; later modules take it
// from here.
//
// Per tile of kKeys scores s_j (base-2 units), with the running max m, the running sum l and
// the accumulator acc of this thread's slice of the row:
//   m_new = max(m, max_j s_j)         alpha = 2^(m - m_new)
//   l     = l * alpha + sum_j 2^(s_j - m_new)
//   acc   = acc * alpha + sum_j 2^(s_j - m_new) * v_j
// and at the end o = acc / l.
#pragma once

#include <cuda_runtime.h>

#include "common/device/fp32_tiles.cuh"

namespace attn::device {

// The largest score of the tile (-inf when every key of it is masked).
template <int kKeys>
__device__ __forceinline__ float tile_max(const float (&s)[kKeys]) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kKeys; ++j) mx = fmaxf(mx, s[j]);
  return mx;
}

// Adds the tile's keys, measured from m_ref: l += sum_j p_j, acc += sum_j p_j v_j with
// p_j = 2^(s_j - m_ref), V read from the tile in shared memory (this thread's columns).
template <class T>
__device__ __forceinline__ void accumulate_tile(float& l, float (&acc)[T::kSlice],
                                                const float (&s)[T::kKeys], const float* v_tile,
                                                int part, float m_ref) {
#pragma unroll
  for (int j = 0; j < T::kKeys; ++j) {
    const float pj = exp2f(s[j] - m_ref);  // in [0, 1]; 0 for masked keys
    l += pj;
    const float4* v_row = reinterpret_cast<const float4*>(v_tile + j * T::D) + part;
#pragma unroll
    for (int t = 0; t < T::kChunks; ++t) {
      const float4 vc = v_row[t * T::kSplit];
      acc[4 * t + 0] = fmaf(pj, vc.x, acc[4 * t + 0]);
      acc[4 * t + 1] = fmaf(pj, vc.y, acc[4 * t + 1]);
      acc[4 * t + 2] = fmaf(pj, vc.z, acc[4 * t + 2]);
      acc[4 * t + 3] = fmaf(pj, vc.w, acc[4 * t + 3]);
    }
  }
}

// The whole update for one tile: the recurrence above, once per tile (one alpha, one rescale
// of acc per kKeys keys).
template <class T>
__device__ __forceinline__ void online_softmax_update(float& m, float& l, float (&acc)[T::kSlice],
                                                      const float (&s)[T::kKeys],
                                                      const float* v_tile, int part) {
  const float m_new = fmaxf(m, tile_max(s));
  // While this row has seen no visible key (all masked so far), m_new is -inf and
  // s_j - m_new would be -inf - -inf = NaN. Measuring from 0 instead gives alpha = 2^-inf
  // = 0 and p = 0: l and acc stay 0. A tile fully masked for a row that has seen keys
  // changes nothing either: m_new = m, alpha = 1, p = 0.
  const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = exp2f(m - m_ref);  // 0 on the first tile (m = -inf), else in (0, 1]
  l *= alpha;
#pragma unroll
  for (int c = 0; c < T::kSlice; ++c) acc[c] *= alpha;
  accumulate_tile<T>(l, acc, s, v_tile, part, m_ref);
  m = m_new;
}

// Writes o = acc * inv_l for this thread's columns c < head_dim of the output row o_row.
// inv_l = 1 / l, computed once by the caller (0 for a row that saw no key).
template <class T>
__device__ __forceinline__ void store_row(float* o_row, const float (&acc)[T::kSlice],
                                          float inv_l, int part, int head_dim) {
#pragma unroll
  for (int t = 0; t < T::kChunks; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = T::column(t, part, e);
      if (c < head_dim) o_row[c] = acc[4 * t + e] * inv_l;
    }
}

}  // namespace attn::device
