// Module 10, given: prefill of a packed variable-length batch on module 07's kernel. The
// kernel of module 07 takes a Batch type that says where batch entry b's rows are; PackedBatch
// asks the exercise's Steps::sequence (README, section 6) for sequence b's first rows and
// lengths, read from cu_seqlens. Everything else (tiles, the causal mask per sequence, the
// tensor-core step) is module 07's, with module 07's solution as the warp step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/paged.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/10_decoding/decoding.h"
#include "modules/10_decoding/decoding_kernel.cuh"

// Module 07's solution of the warp step, in a namespace of its own (m07::prefill_warp): this
// file is compiled into module 10's exercise and solution, and module 07's own exercise
// defines a different WarpMma in m07::exercise.
#pragma push_macro("ATTN_IMPL")
#undef ATTN_IMPL
#define ATTN_IMPL prefill_warp
#include "solutions/07_tensor_cores/warp_mma.cuh"
#pragma pop_macro("ATTN_IMPL")

namespace attn::m10 {

template <class Steps>
struct PackedBatch {
  static constexpr bool kPacked = true;
  struct Args {
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;
  };
  static __device__ __forceinline__ SequenceRows rows(const Args& a, int b) {
    return Steps::sequence(a.cu_seqlens_q, a.cu_seqlens_k, b);
  }
};

// The packed tensors as one Problem: batch entries are the sequences, with batch stride 0
// (PackedBatch moves the pointers), the longest lengths for the grid, BSHD row strides.
inline Problem packed_problem(const VarlenProblem& p) {
  Problem pp;
  pp.batch = p.batch();
  pp.heads = p.heads;
  pp.kv_heads = p.kv_heads;
  pp.seq_q = p.max_seqlen_q();
  pp.seq_k = p.max_seqlen_k();
  pp.head_dim = p.head_dim;
  pp.causal = p.causal;
  pp.scale = p.scale;
  pp.dtype = p.dtype;
  pp.q = pp.o = Strides{0, p.head_dim, int64_t(p.heads) * p.head_dim};
  pp.k = pp.v = Strides{0, p.head_dim, int64_t(p.kv_heads) * p.head_dim};
  return pp;
}

template <class Steps>
Status prefill(const VarlenProblem& p, const void* q, const void* k, const void* v,
               const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  const Problem pp = packed_problem(p);
  if (pp.batch == 0 || pp.seq_q == 0) return Status::ok();
  using Warp = m07::prefill_warp::WarpMma;
  using Batch = PackedBatch<Steps>;
  const typename Batch::Args args{cu_seqlens_q, cu_seqlens_k};
  const bool bf16 = p.dtype == DType::bf16;
  if (p.head_dim <= 64)
    return bf16 ? m07::launch_config<Warp, __nv_bfloat16, m07::Config64, Batch>(pp, q, k, v, o,
                                                                                 stream, args)
                : m07::launch_config<Warp, __half, m07::Config64, Batch>(pp, q, k, v, o, stream,
                                                                         args);
  return bf16 ? m07::launch_config<Warp, __nv_bfloat16, m07::Config128, Batch>(pp, q, k, v, o,
                                                                                stream, args)
              : m07::launch_config<Warp, __half, m07::Config128, Batch>(pp, q, k, v, o, stream,
                                                                        args);
}

}  // namespace attn::m10
