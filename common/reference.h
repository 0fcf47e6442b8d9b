// The CPU reference: attention computed in double precision, the yardstick every kernel is
// compared with. It is deliberately the plainest correct code: scores for a whole row, the
// numerically stable softmax (subtract the row max before exp), then the weighted sum of V.
//
// Conventions every module follows (and the grader checks):
//  * scale: p.softmax_scale(), 1/sqrt(head_dim) unless the problem sets one;
//  * causal: bottom-right aligned, query i sees key j iff j <= i + seq_k - seq_q;
//  * a query that sees no key (causal with seq_q > seq_k) has output exactly 0;
//  * query head h reads K/V head p.kv_head(h) (grouped K/V heads, GQA/MQA).
#pragma once

#include <vector>

#include "common/problem.h"

namespace attn {

// Returns O with p.o_elements() entries laid out by p.o (entries outside the tensor, in
// padded layouts, are 0). Rows are spread over the CPU's cores.
std::vector<double> reference_attention(const Problem& p, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v);

}  // namespace attn
