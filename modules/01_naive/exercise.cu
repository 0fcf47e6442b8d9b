// Module 01 exercise: the naive attention kernel, one thread per query.
// Read modules/01_naive/README.md first. Run: ./course run 01   Grade: ./course grade 01
#include "common/cuda_check.h"
#include "modules/01_naive/naive.h"

namespace attn::m01::ATTN_IMPL {

constexpr int kThreadsPerBlock = 128;

// TODO(1): return scale * (q . k), the dot product over head_dim entries (README, section 1).
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
  // TODO(2): which query row is this thread's? (README, section 2)
  //   row = global thread index over all batch*heads*seq_q rows (use int64_t)
  //   return if row is past the last one; then split it into (b, h, i).
  //   The row of head (b, h) at position i starts at q + Problem::offset(p.q, b, h, i);
  //   same for k/v (with p.k / p.v) and o (with p.o).
  //
  // TODO(3): the three passes over the keys j = 0 .. p.seq_k-1 (README, section 3):
  //   pass 1: m = max_j score(q_row, k_row_j, ...)
  //   pass 2: l = sum_j expf(score_j - m)
  //   pass 3: o_row[c] = sum_j expf(score_j - m) / l * v_row_j[c]   (zero o_row first)
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
