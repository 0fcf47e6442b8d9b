// Module 02: K and V tiles staged in shared memory, still one thread per query and three
// passes. The exercise (exercise.cu) and the solution (solutions/02_smem_tiling/solution.cu)
// both implement forward(); the grader (tests/test_02_smem_tiling.cpp) checks either.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m02 {

// The largest head_dim this module handles: each thread keeps its query row (and a slice of
// its output row) in registers, sized by a compile-time head dim of 32, 64, 96 or 128.
constexpr int kMaxHeadDim02 = 128;

// What this module's forward() handles. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem& p) {
  if (Status s = require_one_kv_head_per_head(p, "module 02"); !s) return s;
  if (p.causal)
    return Status::error("module 02 is non-causal: the causal mask comes in module 04 "
                         "(drop --causal)");
  // Any sequence lengths, any strides.
  return require_head_dim_at_most(p, kMaxHeadDim02, "module 02", "a query row");
}

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// Launches the kernel on `stream`; q, k, v, o are device pointers laid out as `p` says.
// Returns an error for problems it does not handle or a failed launch.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m02
