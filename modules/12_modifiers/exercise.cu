// Module 12 exercise: the ideas that real models add to attention. The kernel is module 07's;
// the hooks that call your functions at the right places (the score of each (query, key), the
// classification of each warp's tile, the RoPE pass over each Q and K tile) are given in
// modifier_hooks.cuh, the launches in entry_points.cuh. Read modules/12_modifiers/README.md
// first. Run: ./course run 12 --window 256 --causal   Grade: ./course grade 12
//
// The rules are stated once in common/modifiers.h; positions are bottom-right aligned as in
// module 04: the query of row i sits at position i' = i + seq_k - seq_q, key j at j.
#include <climits>
#include <cmath>

#include "modules/12_modifiers/entry_points.cuh"
#include "modules/12_modifiers/modifier_attention.h"

namespace attn::m12::ATTN_IMPL {

struct ModifierSteps {
  // TODO 1 (README, section 1, ALiBi): the slope of head h of `heads` (the geometric sequence
  // of common/modifiers.h), and the modified logit: x minus the slope times the distance
  // between the query's position and the key's (distance = i' - j, either sign).
  static __device__ float alibi_slope(int h, int heads) {
    (void)h, (void)heads;
    return 0.0f;
  }
  static __device__ float alibi(float x, float slope, int distance) {
    (void)slope, (void)distance;
    return x;
  }

  // TODO 2 (README, section 1, soft-capping): cap * tanh(x / cap); inv_cap = 1 / cap (a
  // multiply per score instead of a division). Mind the cost and the accuracy: the README
  // compares tanhf, device::fast_tanh (common/device/math.cuh) and tanh from one exp2.
  static __device__ float softcap(float x, float cap, float inv_cap) {
    (void)cap, (void)inv_cap;
    return x;
  }

  // TODO 3 (README, section 2, masks): the keys [begin, end) the query at position pos sees.
  // The causal part (r.causal: keys j <= pos, and also the keys j < r.prefix, which every
  // query sees) and the sliding window (r.window > 0: only the last r.window keys up to pos).
  // Each is an interval, so their AND is one; end may pass seq_k (the kernel clips it).
  static __device__ KeySpan visible_keys(const MaskRules& r, int pos) {
    (void)r, (void)pos;
    return KeySpan{0, INT_MAX};
  }

  // TODO 4 (README, section 2, tile classification): positions [pos_lo, pos_hi] x keys
  // [key_lo, key_hi]. Return TileClass::masked only if no pair is visible (a visible pair
  // skipped is a wrong answer), TileClass::full only if every pair is (the kernel then skips
  // the per-score test), TileClass::partial otherwise. Partial everywhere is correct but
  // slow: the grader also checks that tiles wholly inside or outside a rule are classified as
  // such. Then the same for documents (README, section 2, "documents"): the rows hold the
  // segment ids q_lo .. q_hi, the keys k_lo .. k_hi (ids never decrease along a sequence).
  static __device__ TileClass classify(const MaskRules& r, int pos_lo, int pos_hi, int key_lo,
                                       int key_hi) {
    (void)r, (void)pos_lo, (void)pos_hi, (void)key_lo, (void)key_hi;
    return TileClass::partial;
  }
  static __device__ TileClass classify_documents(int q_lo, int q_hi, int k_lo, int k_hi) {
    (void)q_lo, (void)q_hi, (void)k_lo, (void)k_hi;
    return TileClass::partial;
  }

  // TODO 5 (README, section 3, RoPE): which feature turns with feature f (of head_dim) in each
  // convention, at which frequency index m, and whether f is the first of its pair; then the
  // frequency itself, in radians per position (host code, double).
  static __host__ __device__ RopePair rope_pair(RopeStyle style, int f, int head_dim) {
    (void)style, (void)head_dim;
    return RopePair{f, 0, true};
  }
  static double rope_frequency(int m, int head_dim, double base) {
    (void)m, (void)head_dim, (void)base;
    return 1.0;
  }
};

ATTN_M12_DEFINE_ENTRY_POINTS(ModifierSteps)

}  // namespace attn::m12::ATTN_IMPL
