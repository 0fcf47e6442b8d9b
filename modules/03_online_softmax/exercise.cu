// Module 03 exercise: FlashAttention forward in fp32, one pass over the keys.
// Read modules/03_online_softmax/README.md first. Run: ./course run 03   Grade: ./course grade 03
//
// Given (modules/03_online_softmax/online_softmax_kernel.cuh): the whole kernel except the
// online softmax -- the block and thread mapping, the K and V tiles in shared memory, the
// scores of a tile, the tile max, the sum of the tile's p_j and p_j v_j from the max you
// choose. Given from the device layer (common/device/fp32_tiles.cuh, online_softmax.cuh):
// the tiling, the tile loader and those tile loops, shared with the later modules. Your part,
// the four functions of OnlineSoftmax below, which the kernel calls once per tile (1, 2, 4)
// and once at the end (3):
//   TODO 1  update_max:   the new running max and alpha, guarded against -inf - -inf;
//   TODO 2  rescale:      l and acc moved onto the new max;
//   TODO 3  write_output: o = acc / l;
//   TODO 4  finish_tile:  what must happen before the next tile is loaded.
//
// Each query row lives in registers, spread over T::kSplit neighbouring threads: this thread
// holds T::kSlice of its columns of acc (README, section 3). Scores are in base-2 units: q
// was multiplied by softmax_scale * log2(e) on loading, so 2^s is the exp of the true score
// and the kernel uses exp2f (README, section 2).
#include "modules/03_online_softmax/online_softmax.h"
#include "modules/03_online_softmax/online_softmax_kernel.cuh"

namespace attn::m03::ATTN_IMPL {

struct OnlineSoftmax {
  // TODO(1): the new running max and the factor that moves l and acc onto it
  //   (README, section 1):
  //     m_new = max(m, tile_max)
  //     alpha = 2^(m - m_new)         from the OLD m: alpha is 0 on the first tile
  //   While no key has been seen, m_new is -inf and s_j - m_new = -inf - -inf = NaN
  //   (README, section 5): measure from m_ref = (m_new == -inf ? 0 : m_new) instead, in
  //   alpha and in the exponentials of the tile (the kernel computes 2^(s_j - m_ref) with the
  //   m_ref you return). Set alpha, then m = m_new, and return m_ref.
  static __device__ __forceinline__ float update_max(float& m, float tile_max, float& alpha) {
    (void)m;
    (void)tile_max;
    alpha = 1.0f;  // replace with the alpha of TODO(1)
    return 0.0f;   // replace with the m_ref of TODO(1)
  }

  // TODO(2): rescale the running sum l and the accumulator acc[0 .. kSlice) by alpha, once
  //   for the whole tile, before the tile's keys are added (README, section 1).
  template <int kSlice>
  static __device__ __forceinline__ void rescale(float& l, float (&acc)[kSlice], float alpha) {
    (void)l;
    (void)acc;
    (void)alpha;
  }

  // TODO(3): the output (README, section 1). The kernel calls this for a thread that has a
  //   query row, after the last tile: write o = acc / l for each of its columns
  //   c = T::column(t, part, e) (t < T::kChunks, e < 4; acc[4 * t + e]) with c < head_dim,
  //   at o_row[c]. Compute 1 / l once.
  template <class T>
  static __device__ __forceinline__ void write_output(float* o_row, const float (&acc)[T::kSlice],
                                                      float l, int part, int head_dim) {
    (void)o_row;
    (void)acc;
    (void)l;
    (void)part;
    (void)head_dim;
  }

  // TODO(4): the next iteration's load overwrites k_tile and v_tile. What must every
  //   thread have finished first, and which call makes sure of it? (README, section 5)
  static __device__ __forceinline__ void finish_tile() {}
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<OnlineSoftmax>(p, q, k, v, o, stream);
}

}  // namespace attn::m03::ATTN_IMPL
