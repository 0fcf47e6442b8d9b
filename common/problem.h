// The attention problem: O = softmax(scale * Q K^T [+ causal mask]) V, per (batch, head).
//
// Shapes (logical):   Q [batch, heads,    seq_q, head_dim]
//                     K [batch, kv_heads, seq_k, head_dim]
//                     V [batch, kv_heads, seq_k, head_dim]
//                     O [batch, heads,    seq_q, head_dim]
// kv_heads == heads is classic multi-head attention; kv_heads < heads (a divisor) is grouped
// K/V heads: GQA, or MQA with kv_heads = 1. Query head h reads K/V head kv_head(h), so each
// group of heads / kv_heads consecutive query heads shares one K/V head (as in Llama 2/3 and
// FlashAttention: K/V head h / (heads / kv_heads), not h % kv_heads).
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

// The element type of Q, K, V and O in device memory. Modules 00-06 compute in fp32 (f32).
// From module 07 on, the tensors are 16-bit (f16 = IEEE half, bf16 = bfloat16) as in
// FlashAttention-2: half the bytes to move, and the tensor cores' mma.sync takes 16-bit
// operands. Accumulation (scores, row sums, O before the store) stays fp32 in every module.
//   f16:  1 sign, 5 exponent, 10 mantissa bits: 2^-11 relative rounding, max 65504.
//   bf16: 1 sign, 8 exponent,  7 mantissa bits: 2^-8 relative rounding, fp32's range.
// Host code keeps tensors as float holding exactly the 16-bit values (common/half.h).
enum class DType { f32, f16, bf16 };

const char* dtype_name(DType t);  // "f32", "f16", "bf16"
int dtype_bytes(DType t);         // 4, 2, 2
// Accepts f32/fp32/float32, f16/fp16/half/float16, bf16/bfloat16 (any case); false otherwise,
// leaving *out unchanged.
bool parse_dtype(const std::string& text, DType* out);

// Largest head_dim any module accepts; modules can accept less (see each module's supports()).
constexpr int kMaxHeadDim = 256;

struct Problem {
  int batch = 1;
  int heads = 1;     // query (and output) heads
  int kv_heads = 1;  // K/V heads: divides heads (see kv_head); Problem::make sets it
  int seq_q = 1;
  int seq_k = 1;
  int head_dim = 64;
  bool causal = false;
  // Multiplies Q K^T before the softmax. 0 means "use 1/sqrt(head_dim)", the usual choice:
  // it keeps the variance of a score near 1 when q and k have unit-variance entries.
  float scale = 0.0f;
  Strides q, k, v, o;
  // Element type of Q, K, V and O in memory (strides count elements of this type). make()
  // leaves it f32; a 16-bit problem sets it afterwards: p.dtype = DType::bf16.
  DType dtype = DType::f32;

  // A problem with every tensor densely packed in `layout`. kv_heads 0 means kv_heads = heads
  // (one K/V head per query head); K and V are packed with their own kv_heads.
  static Problem make(int batch, int heads, int seq_q, int seq_k, int head_dim,
                      bool causal = false, Layout layout = Layout::BHSD, int kv_heads = 0);

  float softmax_scale() const;

  // The K/V head that query head `h` reads: consecutive groups of heads / kv_heads query
  // heads share one. Index K and V with kv_head(h), never with h.
  ATTN_HOST_DEVICE int kv_head(int h) const { return h / (heads / kv_heads); }

  // Element offset of row `i` (a query for Q/O, a key for K/V) of head (b, h).
  ATTN_HOST_DEVICE static int64_t offset(const Strides& s, int b, int h, int i) {
    return b * s.batch + h * s.head + i * s.seq;
  }

  // Number of elements a buffer must hold for the tensor with strides `s` (one past the
  // largest offset). Equals batch*heads*seq*head_dim for dense layouts.
  int64_t q_elements() const;
  int64_t kv_elements() const;  // K and V share the shape [batch, kv_heads, seq_k, head_dim]
  int64_t o_elements() const;

  // The causal mask aligns the last query with the last key ("bottom-right", as in
  // FlashAttention-2): query i may see key j iff j <= i + (seq_k - seq_q). With seq_q > seq_k
  // the first seq_q - seq_k queries see no key at all; their output is defined as 0.
  int first_masked_key(int query) const;  // keys [0, this) are visible; seq_k if not causal
  int64_t visible_pairs() const;          // number of (query, key) pairs not masked, per head

  // "B=2 H=8 Sq=1024 Sk=1024 D=64 causal"; grouped K/V heads add "KVH=2" after H, a 16-bit
  // problem adds " bf16" or " f16" at the end (f32, the default, adds nothing).
  std::string describe() const;
};

// Checks sizes (all >= 1, head_dim <= kMaxHeadDim, kv_heads divides heads), strides (no
// overlapping rows) and the 32-bit index limits the kernels rely on. Returns a one-line reason on failure.
Status validate(const Problem& p);

// True when every row of the tensor at `base` with strides `s` starts on a 16-byte boundary:
// the base is 16-byte aligned and every stride (in elements of `element_bytes` bytes) is a
// whole number of 16 bytes: 4 floats, or 8 halves. Kernels may then move rows in 16-byte
// pieces (float4 loads, or cp.async / ldmatrix of 8 16-bit values), given head_dim is a
// multiple of 16 / element_bytes as well.
bool rows_aligned16(const void* base, const Strides& s, int element_bytes);
// The fp32 case: rows_aligned16(base, s, 4).
bool rows_aligned16(const float* base, const Strides& s);

// Work and traffic, used for TFLOP/s and GB/s.
//  flops: 2 GEMM-like products (Q K^T and P V), 2 flops per multiply-add, counting only the
//         visible (query, key) pairs. The softmax's exp/max/sum are not counted (as is usual).
//  flops count per query head (a shared K/V head does not reduce the work).
//  bytes_fused: the least a fused kernel must move: read Q, K, V once, write O once (K and V
//         with kv_heads heads: sharing them is what GQA saves), dtype_bytes(p.dtype) each.
//  bytes_unfused: what the textbook 3-kernel version moves on top of that: write the scores S,
//         read S and write P in the softmax, read P in the second product (4 x Sq x Sk
//         values). S and P count as fp32 (4 bytes) for every dtype: the softmax needs fp32's
//         precision (a 16-bit kernel keeps them fp32 in registers too), and module 05, the
//         course's unfused version, stores them as fp32.
double attention_flops(const Problem& p);
double attention_bytes_fused(const Problem& p);
double attention_bytes_unfused(const Problem& p);
// Device memory for the Q, K, V and O buffers as laid out by the strides, in p.dtype's element
// size (what a fused kernel needs in all; the CLI checks it against free memory before
// allocating).
double attention_buffer_bytes(const Problem& p);

// For modules whose kernels read K/V head h for query head h: ok when kv_heads == heads, else
// "<module> reads one K/V head per query head (...); grouped K/V heads (--kv-heads) come in
// module 06 (...)". `module` names the caller, e.g. "module 03". Call it from supports().
Status require_one_kv_head_per_head(const Problem& p, const char* module);

// For modules that keep a row of head_dim values per thread or warp in registers: ok when
// head_dim <= max, else "<module> keeps <what> in registers and supports head_dim <= max
// (got N)". Call it from supports().
Status require_head_dim_at_most(const Problem& p, int max, const char* module, const char* what);

}  // namespace attn
