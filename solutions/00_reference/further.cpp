// Module 00, going further, solved: merging two online-softmax states, and one rescale per
// tile of scores (README, section 8).
#include <algorithm>
#include <cmath>

#include "modules/00_reference/reference.h"

namespace attn::m00::ATTN_IMPL {

MergeFactors online_merge(OnlineSoftmax& a, const OnlineSoftmax& b) {
  const float m = std::max(a.max, b.max);
  // Both empty: m = -inf, and exp(-inf - -inf) would be NaN. Measured from 0 instead, every
  // factor is exp(-inf) = 0 and the merged state stays empty.
  const float m_ref = m == -INFINITY ? 0.0f : m;
  const MergeFactors f{std::exp(a.max - m_ref), std::exp(b.max - m_ref)};
  a.sum = a.sum * f.a + b.sum * f.b;
  a.max = m;
  return f;
}

float online_push_tile(OnlineSoftmax& state, const float* scores, int n) {
  float tile_max = -INFINITY;
  for (int j = 0; j < n; ++j) tile_max = std::max(tile_max, scores[j]);
  const float m_new = std::max(state.max, tile_max);
  const float alpha = std::exp(state.max - m_new);  // 0 from the empty state
  float tile_sum = 0.0f;
  for (int j = 0; j < n; ++j) tile_sum += std::exp(scores[j] - m_new);
  state.sum = state.sum * alpha + tile_sum;
  state.max = m_new;
  return alpha;
}

}  // namespace attn::m00::ATTN_IMPL
