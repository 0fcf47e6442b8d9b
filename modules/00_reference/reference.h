// Module 00: attention on the CPU, to get the math right before any GPU code.
// The exercise (exercise.cpp) and the solution (solutions/00_reference/solution.cpp) both
// implement the three functions below; the grader (tests/test_00_reference.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m00 {

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (Status s = require_one_kv_head_per_head(p, "module 00"); !s) return s;
  if (p.causal)
    return Status::error("module 00 is non-causal: the causal mask comes in module 04 "
                         "(drop --causal)");
  return Status::ok();
}

// The running state of the online softmax over a stream of scores x_1, x_2, ...
//   max = m_t = max(x_1..x_t)
//   sum = l_t = sum_{j<=t} exp(x_j - m_t)
// Starts "empty": m_0 = -inf, l_0 = 0.
struct OnlineSoftmax {
  float max = -INFINITY;
  float sum = 0.0f;
};

// ATTN_IMPL is `exercise` or `solution`, set by the build: the two implementations get
// different namespaces so the `attn` CLI can link both and compare them in one run.
namespace ATTN_IMPL {

// 1. The numerically stable softmax of one row, in place: x_j <- exp(x_j - max) / sum.
//    Must stay finite for any finite input, e.g. logits of 1000.
void softmax(float* x, int n);

// 2. Folds one more score into the state (README, section 3). Returns the rescale factor
//    alpha = exp(m_old - m_new) that anything accumulated under the old max must be
//    multiplied by (the sum inside the state already is; an output accumulator is the
//    caller's job).
float online_push(OnlineSoftmax& state, float score);

// 3. Attention on the CPU in ONE pass over the keys per query, with online_push and an
//    output accumulator: O = softmax(scale * Q K^T) V. Host pointers; `stream` is unused
//    (it is there so every module has the same signature).
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

// Going further (README, section 8; checked by `./course grade 00 --extra`). The stubs are in
// modules/00_reference/further.cpp, apart from the three functions above.

// 4. Merges state b (scores over one set of keys) into state a (over another, disjoint set),
//    so that a becomes the state of all of them. Returns the factors that move an
//    accumulator of a's keys (factor a) and one of b's keys (factor b) onto the merged max:
//    acc = acc_a * factor.a + acc_b * factor.b. Either state may be empty (max = -inf).
struct MergeFactors {
  float a = 1.0f;
  float b = 1.0f;
};
MergeFactors online_merge(OnlineSoftmax& a, const OnlineSoftmax& b);

// 5. Folds a tile of n >= 1 scores into the state with ONE rescale: the tile's max first,
//    then every term against the new max. Returns the factor for what was accumulated before
//    the tile, as online_push does; the caller weights key j of the tile by
//    exp(scores[j] - state.max).
float online_push_tile(OnlineSoftmax& state, const float* scores, int n);

}  // namespace ATTN_IMPL
}  // namespace attn::m00
