// Module 01 exercise: the naive attention kernel, one thread per query.
// Read modules/01_naive/README.md first. Run: ./course run 01   Grade: ./course grade 01
#include "common/cuda_check.h"
#include "modules/01_naive/naive.h"

namespace attn::m01::ATTN_IMPL {

constexpr int kThreadsPerBlock = 128;

// TODO(1): the scaled dot product of a query row and a key row (README, section 1).
__device__ float score(const float* q_row, const float* k_row, int head_dim, float scale) {
  (void)q_row;
  (void)k_row;
  (void)head_dim;
  (void)scale;
  return 0.0f;
}

__global__ void naive_attention_kernel(Problem p, float scale, const float* __restrict__ q,
                                       const float* __restrict__ k, const float* __restrict__ v,
                                       float* __restrict__ o) {
  // TODO(2): which query row is this thread's? One thread per row of every head, in one
  //   1-D grid; mind the threads past the last row and 32-bit overflow (README, section 2,
  //   and P1 for the built-in variables). Address rows with Problem::offset, never row * d.
  //
  // TODO(3): the stable softmax of this row in three passes over the keys, recomputing the
  //   scores in each; O starts as NaN (README, section 3). Hints unfold in sections 2 and 3.
  (void)p;
  (void)scale;
  (void)q;
  (void)k;
  (void)v;
  (void)o;
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  // TODO(4): one thread per query row (README, section 2). How many rows are there in all,
  // and how many blocks of kThreadsPerBlock threads cover them? Mind the grid limits.
  const unsigned blocks = 1;
  naive_attention_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(p, p.softmax_scale(), q, k, v,
                                                                  o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace attn::m01::ATTN_IMPL
