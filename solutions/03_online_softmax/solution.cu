// Module 03 solution: FlashAttention forward in fp32, one pass over the keys.
// The kernel around these functions (the tiles of K and V in shared memory, the scores, the
// tile max) is given in modules/03_online_softmax/online_softmax_kernel.cuh.
//
// For every tile of kKeysPerTile keys a thread computes its query's scores, then performs the
// online-softmax update once for the whole tile (README, section 1):
//   m_new = max(m, max_j s_j)         alpha = 2^(m - m_new)
//   l     = l * alpha + sum_j 2^(s_j - m_new)
//   acc   = acc * alpha + sum_j 2^(s_j - m_new) * v_j
// and at the end o = acc / l. Scores are in base-2 units: q was multiplied by
// softmax_scale * log2(e) on loading, so 2^s is the exp of the true score (section 2).
#include "modules/03_online_softmax/online_softmax.h"
#include "modules/03_online_softmax/online_softmax_kernel.cuh"

namespace attn::m03::ATTN_IMPL {

struct OnlineSoftmax {
  // The new running max m_new and alpha, the factor that moves l and acc onto it. Returns
  // m_ref, the max that the tile's exponentials 2^(s_j - m_ref) are measured from.
  static __device__ __forceinline__ float update_max(float& m, float tile_max, float& alpha) {
    const float m_new = fmaxf(m, tile_max);
    // While no key has been seen, m_new is -inf and s_j - m_new would be -inf - -inf = NaN.
    // Measuring from 0 instead gives alpha = 2^-inf = 0 and p = 0: l and acc stay 0. (Here
    // every tile holds a visible key, so m_new is finite from the first tile on; module 04's
    // masked rows rely on this guard.)
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    alpha = exp2f(m - m_ref);  // from the old m: 0 on the first tile (m = -inf), else in (0, 1]
    m = m_new;
    return m_ref;
  }

  // Once per tile, before the tile's keys are added: every term summed so far was measured
  // from the old max; alpha moves them all onto the new one.
  template <int kSlice>
  static __device__ __forceinline__ void rescale(float& l, float (&acc)[kSlice], float alpha) {
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) acc[c] *= alpha;
  }

  // Adds the tile's keys, measured from m_ref: l += sum_j p_j, acc += sum_j p_j v_j with
  // p_j = 2^(s_j - m_ref). This thread's columns of a V row are float4 chunks part,
  // part + kSplit, ... (T::column): one 16-byte shared-memory load feeds four FMAs, and all
  // threads of a warp read the same row j (a broadcast). Fully unrolled, so acc stays in
  // registers.
  template <class T>
  static __device__ __forceinline__ void accumulate_tile(float& l, float (&acc)[T::kSlice],
                                                         const float (&s)[T::kKeys],
                                                         const float* v_tile, int part,
                                                         float m_ref) {
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

  // Everyone is done with this tile before the next load overwrites it.
  static __device__ __forceinline__ void finish_tile() { __syncthreads(); }

  // o = acc / l for this thread's columns. l >= 1: the key with the largest score
  // contributes 2^0 = 1.
  template <class T>
  static __device__ __forceinline__ void write_output(float* o_row, const float (&acc)[T::kSlice],
                                                      float l, int part, int head_dim) {
    const float inv_l = 1.0f / l;
#pragma unroll
    for (int t = 0; t < T::kChunks; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = T::column(t, part, e);
        if (c < head_dim) o_row[c] = acc[4 * t + e] * inv_l;
      }
  }

};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<OnlineSoftmax>(p, q, k, v, o, stream);
}

}  // namespace attn::m03::ATTN_IMPL
