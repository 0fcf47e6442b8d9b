// The backward pass of attention (module 11): the gradients dQ, dK, dV of a loss L given
// dO = dL/dO, the rules every backward kernel of the course follows, and the double-precision
// reference they are checked against.
//
// Per (batch, head), with S = scale Q K^T (masked scores -inf), P = softmax(S) row by row and
// O = P V:
//     dV = P^T dO                      (summed over the query heads that share a K/V head)
//     dP = dO V^T
//     D_i = sum_d dO[i][d] O[i][d]     (= sum_j P[i][j] dP[i][j]: the softmax's Jacobian term)
//     dS = P o (dP - D)                (o: elementwise; D broadcast along each row)
//     dQ = scale dS K
//     dK = scale dS^T Q                (summed over the query heads that share a K/V head)
// The forward keeps only O and the log-sum-exp of every row,
//     lse_i = log sum_{j visible} exp(S[i][j])    (natural log, scale included),
// and the backward recomputes P[i][j] = exp(S[i][j] - lse_i) tile by tile: O(N) memory.
//
// Conventions (every kernel and the reference):
//  * tensors: dO has O's shape and strides (p.o); dQ has Q's (p.q); dK and dV have K's and V's
//    (p.k, p.v); all in p.dtype. lse is fp32, dense [batch][heads][seq_q].
//  * a query that sees no key (causal with seq_q > seq_k) has lse = +inf, output 0 and zero
//    gradients: exp(S - inf) = 0 makes its P row 0, so it adds nothing to dK, dV, and its dQ
//    row is 0. Never NaN.
//  * grouped K/V heads: dK and dV of K/V head g are the sums over the query heads h with
//    p.kv_head(h) == g.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn {

// The entry points of a backward module (module 11). Pointers are device pointers to p.dtype
// elements (float for f32, 16-bit patterns for f16/bf16); lse is fp32 [batch][heads][seq_q].
struct BackwardEntry {
  // O = attention(Q, K, V) and the log-sum-exp of every row (the forward a training step
  // runs; the backward reads what it saved).
  Status (*forward)(const Problem& p, const void* q, const void* k, const void* v, void* o,
                    float* lse, cudaStream_t stream);
  // dQ, dK, dV from Q, K, V, O, dO and lse. Every element of dQ, dK, dV is written (zeros
  // where the gradient is 0). Any scratch memory is the module's own business (allocated on
  // `stream` and freed before it returns, or cached).
  Status (*backward)(const Problem& p, const void* q, const void* k, const void* v,
                     const void* o, const void* dout, const float* lse, void* dq, void* dk,
                     void* dv, cudaStream_t stream);
};

// Host tensors of one backward problem, as float (holding p.dtype values for 16-bit
// problems, like Inputs in common/runner.h), laid out by p's strides.
struct Gradients {
  std::vector<double> dq, dk, dv;  // p.q_elements(), p.kv_elements(), p.kv_elements()
};

// The double-precision reference: O (p.o_elements()), lse (batch * heads * seq_q, +inf for a
// row with no visible key) and the gradients for dO = dout. Spread over the CPU's cores.
struct BackwardReference {
  std::vector<double> o;
  std::vector<double> lse;
  Gradients grad;
};
BackwardReference reference_backward(const Problem& p, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     const std::vector<float>& dout);

// D_i = sum_d dO[i][d] O[i][d], dense [batch][heads][seq_q], from the reference's O: what the
// backward's first kernel computes (for hints and tests).
std::vector<double> reference_delta(const Problem& p, const std::vector<double>& o,
                                    const std::vector<float>& dout);

// Classic bugs of a backward kernel: reference_backward(..., bug) computes the gradients as a
// kernel with that bug would (O and lse stay right: the forward is not the culprit), so that
// the hints of diagnose_backward (common/backward_runner.h) can name the bug a result matches.
enum class BackwardBug {
  none,
  no_delta,         // dS = P o dP: the D term of the softmax's Jacobian left out
  no_scale,         // dQ = dS K, dK = dS^T Q: the scale left out of both
  scale_twice,      // dQ = scale^2 dS K, dK = scale^2 dS^T Q
  no_lse,           // P = exp(S): recomputed without subtracting lse
  lse_as_base2,     // P = exp2(S log2(e) - lse): the natural-log lse taken as a base-2 one
  lse_times_log2e,  // P = exp(S - lse log2(e)): lse turned to base 2, then used with exp
  gqa_last_head,    // dK, dV of a K/V head from the last query head of its group alone
};
const char* backward_bug_name(BackwardBug bug);  // "no_delta", ...
BackwardReference reference_backward(const Problem& p, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     const std::vector<float>& dout, BackwardBug bug);

}  // namespace attn
