// Module 10, given: the module's three entry points (decoding.h) over a Steps type, defined
// once for the exercise and the solution:
//   ATTN_M10_DEFINE_ENTRY_POINTS(DecodeSteps)
// inside namespace attn::m10::ATTN_IMPL defines decode(), prefill() and append_kv() there.
#pragma once

#include "modules/10_decoding/decoding.h"
#include "modules/10_decoding/decoding_kernel.cuh"
#include "modules/10_decoding/prefill.cuh"

#define ATTN_M10_DEFINE_ENTRY_POINTS(Steps)                                                   \
  Status decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream) {       \
    return ::attn::m10::decode<Steps>(p, t, stream);                                          \
  }                                                                                           \
  Status prefill(const VarlenProblem& p, const void* q, const void* k, const void* v,         \
                 const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, void* o,           \
                 cudaStream_t stream) {                                                       \
    return ::attn::m10::prefill<Steps>(p, q, k, v, cu_seqlens_q, cu_seqlens_k, o, stream);    \
  }                                                                                           \
  Status append_kv(const PagedProblem& p, const void* k_new, const void* v_new,               \
                   void* k_cache, void* v_cache, const int32_t* block_table,                  \
                   const int32_t* seqlens_k, cudaStream_t stream) {                           \
    return ::attn::m10::append_kv<Steps>(p, k_new, v_new, k_cache, v_cache, block_table,      \
                                         seqlens_k, stream);                                  \
  }
