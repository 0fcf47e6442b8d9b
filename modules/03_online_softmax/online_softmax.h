// Module 03: FlashAttention forward in fp32. One pass over the keys with the online softmax
// (running max, running sum, rescaled accumulator); K and V stream through shared memory in
// tiles; the seq_q x seq_k scores never exist in memory.
// The exercise (exercise.cu) and the solution (solutions/03_online_softmax/solution.cu) both
// implement forward(); the grader (tests/test_03_online_softmax.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m03 {

// The tiling, shared by the exercise, the solution and the grader (whose hints replay the
// classic online-softmax bugs tile by tile, so they must know the tile size).
constexpr int kThreadsPerBlock = 128;  // a query row per thread, or per 2 threads (d > 64)
constexpr int kKeysPerTile = 16;       // keys of K and V staged in shared memory at a time
constexpr int kMaxSupportedHeadDim = 128;

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (Status s = require_one_kv_head_per_head(p, "module 03"); !s) return s;
  if (p.causal)
    return Status::error("module 03 is non-causal: the causal mask comes in module 04 "
                         "(drop --causal)");
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 03", "a query row");
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`; q, k, v, o are device pointers laid out as `p` says.
// Returns an error for problems it does not handle or a failed launch.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m03
