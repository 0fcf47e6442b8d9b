// Module 00, going further: the two functions of the lesson's section 8, apart from the
// exercise. Grade them with: ./course grade 00 --extra
#include "modules/00_reference/reference.h"

namespace attn::m00::ATTN_IMPL {

MergeFactors online_merge(OnlineSoftmax& a, const OnlineSoftmax& b) {
  // TODO(extra 1): a becomes the state of a's and b's keys together; return the factors that
  //   move each side's accumulator onto the merged max (README, section 8). Either side may be
  //   empty (max = -inf, sum = 0), and so may both: no factor may be NaN.
  (void)a;
  (void)b;
  return {};
}

float online_push_tile(OnlineSoftmax& state, const float* scores, int n) {
  // TODO(extra 2): fold scores[0 .. n) into the state with one rescale per tile: the tile's
  //   max first, then its terms (README, section 8). Return the factor for what came before.
  (void)state;
  (void)scores;
  (void)n;
  return 1.0f;
}

}  // namespace attn::m00::ATTN_IMPL
