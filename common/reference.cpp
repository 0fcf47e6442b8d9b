#include "common/reference.h"

#include <algorithm>
#include <cmath>

#include "common/parallel.h"

namespace attn {

namespace {

// One query row: O[i] = sum_j softmax_j(scale * q_i . k_j) v_j over the visible keys j.
void reference_row(const Problem& p, const float* q, const float* k, const float* v, double* o,
                   int b, int h, int i, std::vector<double>& scores) {
  const int visible = p.first_masked_key(i);
  const int d = p.head_dim;
  const int kvh = p.kv_head(h);  // grouped K/V heads (GQA/MQA): several query heads share one
  const float* qi = q + Problem::offset(p.q, b, h, i);
  double* oi = o + Problem::offset(p.o, b, h, i);
  if (visible == 0) {  // fully masked row: defined as 0 (a softmax over nothing)
    std::fill(oi, oi + d, 0.0);
    return;
  }
  const double scale = p.softmax_scale();
  double row_max = -INFINITY;
  for (int j = 0; j < visible; ++j) {
    const float* kj = k + Problem::offset(p.k, b, kvh, j);
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += double(qi[c]) * kj[c];
    scores[j] = scale * dot;
    row_max = std::max(row_max, scores[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < visible; ++j) {
    scores[j] = std::exp(scores[j] - row_max);  // <= 1: no overflow however large the logits
    sum += scores[j];
  }
  std::fill(oi, oi + d, 0.0);
  for (int j = 0; j < visible; ++j) {
    const float* vj = v + Problem::offset(p.v, b, kvh, j);
    const double weight = scores[j] / sum;
    for (int c = 0; c < d; ++c) oi[c] += weight * vj[c];
  }
}

}  // namespace

std::vector<double> reference_attention(const Problem& p, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v) {
  std::vector<double> o(size_t(p.o_elements()), 0.0);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  parallel_rows(rows, int64_t(p.seq_k) * p.head_dim, [&](int64_t first, int64_t stride) {
    std::vector<double> scores(static_cast<size_t>(p.seq_k));
    for (int64_t r = first; r < rows; r += stride) {
      const int i = int(r % p.seq_q);
      const int h = int((r / p.seq_q) % p.heads);
      const int b = int(r / (int64_t(p.seq_q) * p.heads));
      reference_row(p, q.data(), k.data(), v.data(), o.data(), b, h, i, scores);
    }
  });
  return o;
}

}  // namespace attn
