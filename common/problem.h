// The attention problem: O = softmax(scale * Q K^T [+ causal mask]) V, per (batch, head).
//
// Shapes (logical):   Q [batch, heads, seq_q, head_dim]
//                     K [batch, heads, seq_k, head_dim]
//                     V [batch, heads, seq_k, head_dim]
//                     O [batch, heads, seq_q, head_dim]
// Memory: each tensor has its own element strides for batch, head and sequence; the head_dim
// axis is always contiguous (stride 1). The default layout is BHSD (row-major in the logical
// order above); BSHD (heads interleaved per token, as most frameworks store them) only
// changes the strides, so a kernel that uses strides runs on both without copies.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

// Lets kernels call the small inline helpers below (nvcc sees __host__ __device__, g++ nothing).
#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

namespace attn {

// Element strides of one 4-D tensor. The last axis (head_dim) has stride 1.
struct Strides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t seq = 0;
};

enum class Layout { BHSD, BSHD };

const char* layout_name(Layout layout);

// Largest head_dim any module accepts; modules can accept less (see each module's supports()).
constexpr int kMaxHeadDim = 256;

struct Problem {
  int batch = 1;
  int heads = 1;
  int seq_q = 1;
  int seq_k = 1;
  int head_dim = 64;
  bool causal = false;
  // Multiplies Q K^T before the softmax. 0 means "use 1/sqrt(head_dim)", the usual choice:
  // it keeps the variance of a score near 1 when q and k have unit-variance entries.
  float scale = 0.0f;
  Strides q, k, v, o;

  // A problem with every tensor densely packed in `layout`.
  static Problem make(int batch, int heads, int seq_q, int seq_k, int head_dim,
                      bool causal = false, Layout layout = Layout::BHSD);

  float softmax_scale() const;

  // Element offset of row `i` (a query for Q/O, a key for K/V) of head (b, h).
  ATTN_HOST_DEVICE static int64_t offset(const Strides& s, int b, int h, int i) {
    return b * s.batch + h * s.head + i * s.seq;
  }

  // Number of elements a buffer must hold for the tensor with strides `s` (one past the
  // largest offset). Equals batch*heads*seq*head_dim for dense layouts.
  int64_t q_elements() const;
  int64_t kv_elements() const;  // K and V share the shape [batch, heads, seq_k, head_dim]
  int64_t o_elements() const;

  // The causal mask aligns the last query with the last key ("bottom-right", as in
  // FlashAttention-2): query i may see key j iff j <= i + (seq_k - seq_q). With seq_q > seq_k
  // the first seq_q - seq_k queries see no key at all; their output is defined as 0.
  int first_masked_key(int query) const;  // keys [0, this) are visible; seq_k if not causal
  int64_t visible_pairs() const;          // number of (query, key) pairs not masked, per head

  std::string describe() const;  // "B=2 H=8 Sq=1024 Sk=1024 D=64 causal BHSD"
};

// Checks sizes (all >= 1, head_dim <= kMaxHeadDim), strides (no overlapping rows) and the
// 32-bit index limits the kernels rely on. Returns a one-line reason on failure.
Status validate(const Problem& p);

// Work and traffic, used for TFLOP/s and GB/s.
//  flops: 2 GEMM-like products (Q K^T and P V), 2 flops per multiply-add, counting only the
//         visible (query, key) pairs. The softmax's exp/max/sum are not counted (as is usual).
//  bytes_fused: the least a fused kernel must move: read Q, K, V once, write O once.
//  bytes_unfused: what the textbook 3-kernel version moves on top of that: write the scores S,
//         read S and write P in the softmax, read P in the second product (4 x Sq x Sk floats).
double attention_flops(const Problem& p);
double attention_bytes_fused(const Problem& p);
double attention_bytes_unfused(const Problem& p);
// Device memory for the Q, K, V and O buffers as laid out by the strides (what a fused kernel
// needs in all; the CLI checks it against free memory before allocating).
double attention_buffer_bytes(const Problem& p);

}  // namespace attn
