// Module 10: attention for inference. Decoding reads a long paged KV cache for one (or a few)
// new query tokens per sequence: a memory-bound job, split across blocks (Flash-Decoding) and
// merged with the log-sum-exp rule of module 00. Prefill runs packed sequences of different
// lengths without padding. The problems and tensor layouts are in common/paged.h.
// The exercise (exercise.cu) and the solution (solutions/10_decoding/solution.cu) implement
// DecodeSteps (decoding_kernel.cuh); the grader is tests/test_10_decoding.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "common/paged.h"
#include "common/status.h"

namespace attn::m10 {

// What this module handles (given, shared by exercise and solution): f16/bf16, head_dim 64 or
// 128, any group size, query tokens per sequence up to kMaxQueryTokens.
constexpr int kMaxQueryTokens = 64;
Status supports(const PagedProblem& p);
Status supports(const VarlenProblem& p);

// Bytes of fp32 split partials decode() needs for p on the current GPU.
size_t decode_workspace_bytes(const PagedProblem& p);

// ATTN_IMPL is `exercise` or `solution`, set by the build.
namespace ATTN_IMPL {

Status decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream);
Status prefill(const VarlenProblem& p, const void* q, const void* k, const void* v,
               const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, void* o,
               cudaStream_t stream);
Status append_kv(const PagedProblem& p, const void* k_new, const void* v_new, void* k_cache,
                 void* v_cache, const int32_t* block_table, const int32_t* seqlens_k,
                 cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m10
