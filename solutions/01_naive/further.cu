// Module 01, going further, solved: two passes over the keys. The first computes the row max
// and the softmax sum together with the online recurrence of module 00 (one rescale of the
// sum per key); the second writes O. One pass of K reads fewer than solution.cu's three.
#include "common/cuda_check.h"
#include "modules/01_naive/naive.h"

namespace attn::m01::ATTN_IMPL {

namespace {

constexpr int kTwoPassThreads = 128;

__device__ float scaled_dot(const float* q_row, const float* k_row, int head_dim, float scale) {
  float dot = 0.0f;
  for (int c = 0; c < head_dim; ++c) dot += q_row[c] * k_row[c];
  return scale * dot;
}

__global__ void two_pass_attention_kernel(Problem p, float scale, const float* __restrict__ q,
                                          const float* __restrict__ k,
                                          const float* __restrict__ v, float* __restrict__ o) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.batch) * p.heads * p.seq_q) return;
  const int i = int(row % p.seq_q);
  const int h = int((row / p.seq_q) % p.heads);
  const int b = int(row / (int64_t(p.seq_q) * p.heads));
  const float* q_row = q + Problem::offset(p.q, b, h, i);
  float* o_row = o + Problem::offset(p.o, b, h, i);
  const int d = p.head_dim;

  // Pass 1: max and sum together. The first key finds m = -inf: exp(-inf) = 0 clears l.
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < p.seq_k; ++j) {
    const float s = scaled_dot(q_row, k + Problem::offset(p.k, b, h, j), d, scale);
    const float m_new = fmaxf(m, s);
    l = l * expf(m - m_new) + expf(s - m_new);
    m = m_new;
  }

  // Pass 2: the weighted sum of V, as solution.cu's third pass.
  for (int c = 0; c < d; ++c) o_row[c] = 0.0f;
  const float inv_l = 1.0f / l;
  for (int j = 0; j < p.seq_k; ++j) {
    const float w = expf(scaled_dot(q_row, k + Problem::offset(p.k, b, h, j), d, scale) - m) *
                    inv_l;
    const float* v_row = v + Problem::offset(p.v, b, h, j);
    for (int c = 0; c < d; ++c) o_row[c] += w * v_row[c];
  }
}

}  // namespace

Status forward_two_pass(const Problem& p, const float* q, const float* k, const float* v,
                        float* o, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  const unsigned blocks = unsigned((rows + kTwoPassThreads - 1) / kTwoPassThreads);
  two_pass_attention_kernel<<<blocks, kTwoPassThreads, 0, stream>>>(p, p.softmax_scale(), q, k,
                                                                    v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace attn::m01::ATTN_IMPL
