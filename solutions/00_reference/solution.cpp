// Module 00 solution: attention on the CPU with the stable and the online softmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "modules/00_reference/reference.h"

namespace attn::m00::ATTN_IMPL {

void softmax(float* x, int n) {
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) m = std::max(m, x[j]);
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - m);  // exponent <= 0, so every term is in (0, 1]
    sum += x[j];                // >= 1: the max itself contributes exp(0) = 1
  }
  for (int j = 0; j < n; ++j) x[j] /= sum;
}

float online_push(OnlineSoftmax& state, float score) {
  const float m_new = std::max(state.max, score);
  // The old terms were exp(x_j - m_old); under the new max they are exp(x_j - m_new)
  // = exp(x_j - m_old) * exp(m_old - m_new). From the empty state, exp(-inf) = 0.
  const float alpha = std::exp(state.max - m_new);
  state.sum = state.sum * alpha + std::exp(score - m_new);
  state.max = m_new;
  return alpha;
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t /*stream*/) {
  const float scale = p.softmax_scale();
  const int d = p.head_dim;
  std::vector<float> acc(static_cast<size_t>(d));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const float* q_row = q + Problem::offset(p.q, b, h, i);
        OnlineSoftmax state;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < p.seq_k; ++j) {
          const float* k_row = k + Problem::offset(p.k, b, h, j);
          const float* v_row = v + Problem::offset(p.v, b, h, j);
          float dot = 0.0f;
          for (int c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
          const float score = scale * dot;
          const float alpha = online_push(state, score);
          const float weight = std::exp(score - state.max);
          for (int c = 0; c < d; ++c) acc[c] = acc[c] * alpha + weight * v_row[c];
        }
        float* o_row = o + Problem::offset(p.o, b, h, i);
        for (int c = 0; c < d; ++c) o_row[c] = acc[c] / state.sum;
      }
  return Status::ok();
}

}  // namespace attn::m00::ATTN_IMPL
