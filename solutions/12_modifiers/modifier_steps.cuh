// Module 12 solution: the ideas of the module (ModifierSteps), in a header so that the
// solution's forward() (solution.cu) and the benchmark instantiate the same code.
#pragma once

#include <climits>
#include <cmath>

#include "common/device/math.cuh"
#include "modules/12_modifiers/modifier_hooks.cuh"

namespace attn::m12::ATTN_IMPL {

struct ModifierSteps {
  // ALiBi's slope of head h of `heads`: a geometric sequence from 2^(-8 / heads) down to 2^-8,
  // so every head looks at a different distance scale (common/modifiers.h).
  static __device__ float alibi_slope(int h, int heads) {
    return exp2f(-8.0f * float(h + 1) / float(heads));
  }
  // The penalty grows linearly with the distance between the query's position and the key's,
  // in either direction.
  static __device__ float alibi(float x, float slope, int distance) {
    return fmaf(-slope, fabsf(float(distance)), x);
  }

  // cap * tanh(x / cap) (inv_cap = 1 / cap: a multiply, not a division, per score), with
  // tanh on the special-function unit: one instruction, relative error ~2^-11, so the logit
  // is off by at most ~|x| 2^-11: less than the error that q and k rounded to bf16 (2^-9
  // each) already put into it (README, section 1).
  static __device__ float softcap(float x, float cap, float inv_cap) {
    return cap * device::fast_tanh(x * inv_cap);
  }

  // The keys the query at position pos sees, [begin, end): the causal part ends the span
  // after pos, or after the prefix every query sees if that reaches further; the window
  // starts it window - 1 keys before pos. No rule: every key (the kernel clips to seq_k).
  static __device__ KeySpan visible_keys(const MaskRules& r, int pos) {
    KeySpan span{0, INT_MAX};
    if (r.causal) span.end = max(pos + 1, r.prefix);
    if (r.window > 0) span.begin = pos - r.window + 1;
    return span;
  }

  // Positions [pos_lo, pos_hi] x keys [key_lo, key_hi]: masked only if no pair is visible,
  // full only if every pair is. Each rule is monotone in the key and the position, so the
  // corners decide: the causal part holds for every pair if even the smallest position sees
  // the largest key, for none if the largest position misses the smallest key (and the
  // prefix does not save it); the window likewise, the other way round.
  static __device__ TileClass classify(const MaskRules& r, int pos_lo, int pos_hi, int key_lo,
                                       int key_hi) {
    bool all = true, none = false;
    if (r.causal) {
      all = all && (key_hi <= pos_lo || key_hi < r.prefix);
      none = none || (key_lo > pos_hi && key_lo >= r.prefix);
    }
    if (r.window > 0) {
      all = all && key_lo > pos_hi - r.window;
      none = none || key_hi <= pos_lo - r.window;
    }
    return none ? TileClass::masked : all ? TileClass::full : TileClass::partial;
  }

  // Documents from nondecreasing segment ids: the rows hold ids [q_lo, q_hi], the keys
  // [k_lo, k_hi]. Disjoint ranges share no document; one id on both sides is one document.
  static __device__ TileClass classify_documents(int q_lo, int q_hi, int k_lo, int k_hi) {
    if (q_hi < k_lo || k_hi < q_lo) return TileClass::masked;
    if (q_lo == q_hi && k_lo == k_hi && q_lo == k_lo) return TileClass::full;
    return TileClass::partial;
  }

  // RoPE's pairs: interleaved turns features (2m, 2m + 1) together, half turns (m, m + d/2).
  static __host__ __device__ RopePair rope_pair(RopeStyle style, int f, int head_dim) {
    if (style == RopeStyle::interleaved) return RopePair{f ^ 1, f / 2, (f & 1) == 0};
    const int half = head_dim / 2;
    return f < half ? RopePair{f + half, f, true} : RopePair{f - half, f - half, false};
  }
  // Frequency m turns base^(-2m / d) radians per position: from 1 (m = 0, fast) down to
  // ~1 / base (slow), a geometric ladder of wavelengths.
  static double rope_frequency(int m, int head_dim, double base) {
    return std::pow(base, -2.0 * m / head_dim);
  }
};

}  // namespace attn::m12::ATTN_IMPL
