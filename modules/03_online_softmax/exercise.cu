// Module 03 exercise: FlashAttention forward in fp32, one pass over the keys.
// Read modules/03_online_softmax/README.md first. Run: ./course run 03   Grade: ./course grade 03
//
// Given (modules/03_online_softmax/online_softmax_kernel.cuh): the whole kernel except the
// online softmax -- the block and thread mapping, the K and V tiles in shared memory, the
// scores of a tile and the tile max. Given from the device layer (common/device/
// fp32_tiles.cuh): the tiling, the tile loader, the scores. Your part, the five functions of
// OnlineSoftmax below, which the kernel calls in this order for every tile (1 to 4) and once
// at the end (5):
//   TODO 1  update_max:      the new running max and alpha, guarded against -inf - -inf;
//   TODO 2  rescale:         l and acc moved onto the new max;
//   TODO 3  accumulate_tile: the tile's keys added to l and acc;
//   TODO 4  finish_tile:     what must happen before the next tile is loaded;
//   TODO 5  write_output:    the output row.
//
// Each query row lives in registers, spread over T::kSplit neighbouring threads: this thread
// holds T::kSlice of its columns of acc (README, section 3). Scores are in base-2 units: q
// was multiplied by softmax_scale * log2(e) on loading, so 2^s is the exp of the true score
// and the kernel uses exp2f (README, section 2).
#include "modules/03_online_softmax/online_softmax.h"
#include "modules/03_online_softmax/online_softmax_kernel.cuh"

namespace attn::m03::ATTN_IMPL {

struct OnlineSoftmax {
  // TODO(1): the new running max, and the factor alpha that moves l and acc onto it
  //   (README, section 1, the recurrence per tile). Which m does alpha need, the old or the
  //   new one? A row that has seen no key yet has m = -inf: what would -inf - -inf give
  //   (README, section 5, the guard)? Return m_ref, the max that the tile's exponentials
  //   are measured from; leave the new max in m.
  static __device__ __forceinline__ float update_max(float& m, float tile_max, float& alpha) {
    (void)m;
    (void)tile_max;
    alpha = 1.0f;  // replace with the alpha of TODO(1)
    return 0.0f;   // replace with the m_ref of TODO(1)
  }

  // TODO(2): every term summed into l and acc so far was measured from the old max
  //   (README, section 1, why it is exact). Move them onto the new one, once per tile.
  template <int kSlice>
  static __device__ __forceinline__ void rescale(float& l, float (&acc)[kSlice], float alpha) {
    (void)l;
    (void)acc;
    (void)alpha;
  }

  // TODO(3): add the tile's T::kKeys keys to l and to this thread's columns of acc, each
  //   weighted by its exponential measured from m_ref (README, section 1). Row j of the V
  //   tile starts at v_tile + j * T::D; which of its columns are this thread's, and how to
  //   read them 16 bytes at a time, is README section 3 ("Which columns"). Loops with
  //   compile-time trip counts, fully unrolled: acc must stay in registers.
  template <class T>
  static __device__ __forceinline__ void accumulate_tile(float& l, float (&acc)[T::kSlice],
                                                         const float (&s)[T::kKeys],
                                                         const float* v_tile, int part,
                                                         float m_ref) {
    (void)l;
    (void)acc;
    (void)s;
    (void)v_tile;
    (void)part;
    (void)m_ref;
  }

  // TODO(4): the next iteration's load overwrites k_tile and v_tile. What must every
  //   thread have finished first, and which call makes sure of it? (README, section 5)
  static __device__ __forceinline__ void finish_tile() {}

  // TODO(5): the output (README, section 1). The kernel calls this for a thread that has a
  //   query row, after the last tile. Write this thread's columns of the row (those below
  //   head_dim: T::column maps acc's index to the column, README section 3) at o_row.
  template <class T>
  static __device__ __forceinline__ void write_output(float* o_row, const float (&acc)[T::kSlice],
                                                      float l, int part, int head_dim) {
    (void)o_row;
    (void)acc;
    (void)l;
    (void)part;
    (void)head_dim;
  }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<OnlineSoftmax>(p, q, k, v, o, stream);
}

}  // namespace attn::m03::ATTN_IMPL
