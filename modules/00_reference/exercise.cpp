// Module 00 exercise: attention on the CPU. Read modules/00_reference/README.md first.
// Grade with: ./course grade 00
#include "modules/00_reference/reference.h"

namespace attn::m00::ATTN_IMPL {

void softmax(float* x, int n) {
  // TODO(1): the stable softmax of the row, in place (README, section 2). A literal
  //   exp(x[j]) overflows for logits near 89; the lesson shows which shift makes every term
  //   <= 1. Hints unfold in section 2.
  (void)x;
  (void)n;
}

float online_push(OnlineSoftmax& state, float score) {
  // TODO(2): fold one score into the running max and sum, and return the factor that
  //   moves everything accumulated so far onto the new max (README, section 3). The order
  //   of the updates matters: see "the classic mistake" there, and its hints.
  (void)state;
  (void)score;
  return 1.0f;
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t /*stream*/) {
  const float scale = p.softmax_scale();
  const int d = p.head_dim;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const float* q_row = q + Problem::offset(p.q, b, h, i);
        float* o_row = o + Problem::offset(p.o, b, h, i);
        // TODO(3): attention for this query row in ONE pass over the keys, with
        //   online_push and an accumulator of d floats (README, section 4). Address K and V
        //   rows with Problem::offset and their own strides (section 1).
        (void)scale;
        (void)d;
        (void)q_row;
        (void)o_row;
        (void)k;
        (void)v;
      }
  return Status::ok();
}

}  // namespace attn::m00::ATTN_IMPL
