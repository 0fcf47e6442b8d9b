// Module 06: the fused multi-head kernel, the fastest fp32 kernel of the course. One launch
// covers every (query block, head, batch); element strides let it read BHSD, BSHD or any
// strided view (e.g. Q, K, V as slices of one packed QKV tensor) without copies; grouped K/V
// heads (GQA, MQA: Problem::kv_heads divides heads) share one K/V head between several query
// heads; causal and non-causal. Register tiling: every thread owns a few queries x a few keys
// of the score tile and a few queries x a few columns of the output.
// The exercise (exercise.cu) and the solution (solutions/06_multi_head/solution.cu) both
// implement forward(); the grader (tests/test_06_multi_head.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m06 {

constexpr int kMaxSupportedHeadDim = 128;

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 06",
                                  "a query block's outputs");
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`; q, k, v, o are device pointers laid out as `p` says.
// Returns an error for problems it does not handle or a failed launch.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m06
