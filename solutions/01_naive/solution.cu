// Module 01 solution: one thread per query, three passes over the keys.
//
// Thread t of the (1-D) grid owns query row i of head (b, h), where t enumerates all
// batch*heads*seq_q rows. Its three passes over the seq_k keys:
//   1. m = max_j s_j            with s_j = scale * q_i . k_j
//   2. l = sum_j exp(s_j - m)
//   3. o_i = sum_j exp(s_j - m) / l * v_j
// The scores are recomputed in every pass instead of stored: a thread has no room for
// seq_k of them (README, section 2), so each pass re-reads all of K from memory.
#include "common/cuda_check.h"
#include "modules/01_naive/naive.h"

namespace attn::m01::ATTN_IMPL {

constexpr int kThreadsPerBlock = 128;

// s = scale * (q . k) over head_dim entries.
__device__ float score(const float* q_row, const float* k_row, int head_dim, float scale) {
  float dot = 0.0f;
  for (int c = 0; c < head_dim; ++c) dot += q_row[c] * k_row[c];
  return scale * dot;
}

__global__ void naive_attention_kernel(Problem p, float scale, const float* __restrict__ q,
                                       const float* __restrict__ k, const float* __restrict__ v,
                                       float* __restrict__ o) {
  // 64-bit: batch*heads*seq_q can pass 2^31 / 128 blocks long before it passes 2^31 rows.
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  if (row >= rows) return;  // the last block may stick out past the last query
  const int i = int(row % p.seq_q);
  const int h = int((row / p.seq_q) % p.heads);
  const int b = int(row / (int64_t(p.seq_q) * p.heads));

  const float* q_row = q + Problem::offset(p.q, b, h, i);
  float* o_row = o + Problem::offset(p.o, b, h, i);
  const int d = p.head_dim;

  // Pass 1: the row max, so that every exp() below has an exponent <= 0.
  float m = -INFINITY;
  for (int j = 0; j < p.seq_k; ++j)
    m = fmaxf(m, score(q_row, k + Problem::offset(p.k, b, h, j), d, scale));

  // Pass 2: the softmax denominator.
  float l = 0.0f;
  for (int j = 0; j < p.seq_k; ++j)
    l += expf(score(q_row, k + Problem::offset(p.k, b, h, j), d, scale) - m);

  // Pass 3: the weighted sum of V, accumulated in this thread's own output row (no other
  // thread writes it, so no synchronization is needed).
  for (int c = 0; c < d; ++c) o_row[c] = 0.0f;
  const float inv_l = 1.0f / l;
  for (int j = 0; j < p.seq_k; ++j) {
    const float w = expf(score(q_row, k + Problem::offset(p.k, b, h, j), d, scale) - m) * inv_l;
    const float* v_row = v + Problem::offset(p.v, b, h, j);
    for (int c = 0; c < d; ++c) o_row[c] += w * v_row[c];
  }
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  // One thread per query row, all rows of all heads in one 1-D grid: grid.x may hold
  // 2^31-1 blocks, while grid.y/z stop at 65535 (too few for batch*heads in big models).
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  const unsigned blocks = unsigned((rows + kThreadsPerBlock - 1) / kThreadsPerBlock);
  naive_attention_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(p, p.softmax_scale(), q, k, v,
                                                                  o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace attn::m01::ATTN_IMPL
