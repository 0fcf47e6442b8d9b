// Module 04: the causal mask on top of module 03's FlashAttention forward (fp32): the mask
// aligned bottom-right for seq_q != seq_k, rows that see no key, key tiles skipped when they
// are masked for the whole block, and the heaviest query blocks scheduled first.
// The exercise (exercise.cu) and the solution (solutions/04_causal/solution.cu) both
// implement forward(); the grader (tests/test_04_causal.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m04 {

// The tiling, as in module 03 (shared by the exercise, the solution and the grader).
constexpr int kThreadsPerBlock = 128;  // a query row per thread, or per 2 threads (d > 64)
constexpr int kKeysPerTile = 16;       // keys of K and V staged in shared memory at a time
constexpr int kMaxSupportedHeadDim = 128;

// What this module's forward() handles: causal or not, head_dim up to 128. Shared by
// exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (Status s = require_one_kv_head_per_head(p, "module 04"); !s) return s;
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 04", "a query row");
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`; q, k, v, o are device pointers laid out as `p` says.
// Returns an error for problems it does not handle or a failed launch.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m04
