// Module 01: the naive attention kernel, one GPU thread per query.
// The exercise (exercise.cu) and the solution (solutions/01_naive/solution.cu) both implement
// forward(); the grader (tests/test_01_naive.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m01 {

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (Status s = require_one_kv_head_per_head(p, "module 01"); !s) return s;
  if (p.causal)
    return Status::error("module 01 is non-causal: the causal mask comes in module 04 "
                         "(drop --causal)");
  return Status::ok();  // any head_dim up to kMaxHeadDim, any sequence lengths, any strides
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`; q, k, v, o are device pointers laid out as `p` says.
// Returns an error for problems it does not handle or a failed launch.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

// Going further (README, section 8; checked by `./course grade 01 --extra`): the same attention
// with TWO passes over the keys, the row's max and sum together in the first (module 00's
// online softmax, one rescale per key), the output in the second. The stub is in
// modules/01_naive/further.cu.
Status forward_two_pass(const Problem& p, const float* q, const float* k, const float* v,
                        float* o, cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m01
