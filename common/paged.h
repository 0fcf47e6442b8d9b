// Attention for inference (module 10): a batch of sequences, each with its own length, whose
// keys and values live in a paged KV cache, and packed variable-length batches for prefill.
//
// Decoding (PagedProblem). Each sequence b has a cache of seqlens_k[b] tokens and seq_q new
// query tokens, the last seq_q positions of the cache (seq_q = 1: plain decoding; a few more:
// speculative or chunked decoding). Tensors:
//   Q, O          [batch, seq_q, heads, head_dim]           dense, token-major (BSHD)
//   K/V cache     [num_pages, page_size, kv_heads, head_dim] dense; a page holds page_size
//                                                            consecutive tokens of one sequence
//   block_table   [batch, pages_per_seq] int32              page j of sequence b is
//                                                            cache page block_table[b][j]
// Token t of sequence b is row t % page_size of page block_table[b][t / page_size]. Pages can
// be anywhere in the pool and in any order: that is what lets a serving engine grow every
// sequence a page at a time without copying (vLLM's PagedAttention). Table entries past a
// sequence's last page are unused (the harness stores -1 there).
//
// Causal decoding: query i of sequence b (0 <= i < seq_q) sits at position
// seqlens_k[b] - seq_q + i and sees the keys up to it: j <= seqlens_k[b] - seq_q + i (the
// bottom-right alignment of module 04). Without `causal` every query sees all keys. A
// sequence of length 0 (or a query that sees no key) outputs 0.
//
// Prefill (VarlenProblem). Sequences of different lengths packed one after another, no
// padding, as FlashAttention's varlen interface takes them:
//   Q, O [total_q, heads, head_dim]     K, V [total_k, kv_heads, head_dim]
// with cu_seqlens_q = {0, seqlens_q[0], seqlens_q[0] + seqlens_q[1], ...} (batch + 1 entries)
// and the same for K. Sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1;
// it never sees another sequence's keys. Causal is bottom-right per sequence.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn {

struct PagedProblem {
  int batch = 1;
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 128;
  int seq_q = 1;               // new query tokens per sequence
  std::vector<int> seqlens_k;  // cache length of each sequence (batch entries, >= 0)
  int page_size = 16;          // tokens per page: a power of two, 1 .. kMaxPageSize
  int pages_per_seq = 0;       // columns of the block table (make(): the longest sequence's)
  int num_pages = 0;           // pages in the cache pool (make(): exactly the pages in use)
  bool causal = false;
  float scale = 0.0f;          // 0: 1/sqrt(head_dim)
  DType dtype = DType::bf16;

  static constexpr int kMaxPageSize = 1024;

  // kv_heads 0 means kv_heads = heads. Sizes the table and the pool for `seqlens_k` (batch is
  // seqlens_k.size()).
  static PagedProblem make(int heads, int kv_heads, int head_dim, int seq_q,
                           std::vector<int> seqlens_k, int page_size, bool causal = false,
                           DType dtype = DType::bf16);

  float softmax_scale() const;
  int kv_head(int h) const { return h / (heads / kv_heads); }
  int group() const { return heads / kv_heads; }  // query heads per K/V head
  int max_seqlen_k() const;
  int64_t total_keys() const;                 // sum of seqlens_k
  int pages_of(int b) const;                  // ceil(seqlens_k[b] / page_size)
  // Keys [0, this) are visible to query i of sequence b; 0 when it sees none.
  int visible_keys(int b, int i) const;

  int64_t q_elements() const;      // = o_elements()
  int64_t cache_elements() const;  // of K and of V each: num_pages * page_size * kv_heads * d
  int64_t table_elements() const;  // batch * pages_per_seq

  // "decode B=3 H=32 KVH=8 D=128 Sq=1 Sk=[1,17,4096] page=16 bf16" (lists of more than 8
  // lengths print as min/mean/max).
  std::string describe() const;
};

// Sizes, head_dim, kv_heads | heads, page size a power of two in [1, kMaxPageSize], lengths
// >= 0, the table wide enough for the longest sequence, the pool large enough, 32-bit limits.
// One line on failure, e.g. "sequence 2 has 5000 keys, more than its table row of 312 pages x
// 16 tokens holds: widen the block table or use larger pages". Sequences may share pool pages
// (a common prefix), so the pool needs only the longest sequence's pages.
Status validate(const PagedProblem& p);
// Every entry a sequence uses (its first pages_of(b) columns) is a page in [0, num_pages).
// "block_table[1][3] = 900 points past the cache (900 pages)".
Status validate_block_table(const PagedProblem& p, const std::vector<int32_t>& table);

// The least a decode kernel moves: the visible K/V rows once, Q once, O once (bytes of p.dtype).
double paged_bytes(const PagedProblem& p);
// 2 products x 2 flops per multiply-add over the visible (query, key) pairs, per query head.
double paged_flops(const PagedProblem& p);

// A block table for p: sequence b's pages are distinct pool pages; in order (sequence 0 gets
// pages 0, 1, ..., then sequence 1, ...) or, with `shuffle`, a random permutation of the pool
// from `seed`. Unused entries are -1.
std::vector<int32_t> make_block_table(const PagedProblem& p, bool shuffle, uint64_t seed);

// Lengths for a batch: `count` uniform random lengths in [0, max_len] from `seed`.
std::vector<int> random_seqlens(int count, int max_len, uint64_t seed);
// "1,17,4096" -> {1, 17, 4096}; one line on anything else.
Status parse_seqlens(const std::string& text, std::vector<int>* out);

struct PagedInputs {
  std::vector<float> q;                  // q_elements(), rounded to p.dtype
  std::vector<float> k_cache, v_cache;   // cache_elements() each, rounded to p.dtype
  std::vector<int32_t> block_table;      // table_elements()
  uint64_t seed = 0;
};
// Q, the caches and the table have the sizes p gives them, and the table passes
// validate_block_table: "Q holds 96 values, expected batch x seq_q x heads x head_dim = 128".
Status validate_inputs(const PagedProblem& p, const PagedInputs& in);
// Rounds Q and the caches to type t in place (nothing for f32), as round_inputs
// (common/runner.h) does for dense inputs.
void round_inputs(PagedInputs& in, DType t);
// Uniform random Q and caches in [-range, range) rounded to p.dtype (pool pages no sequence
// uses are filled too: a kernel that reads them gets a wrong answer, not a lucky zero), and
// make_block_table(p, shuffle_pages, seed).
PagedInputs random_paged_inputs(const PagedProblem& p, uint64_t seed, bool shuffle_pages,
                                float range = 1.0f);

// O for p (q_elements() values, Q's layout) in double precision, reading the cache through the
// block table. Rows that see no key are 0. Throws std::invalid_argument when
// validate_inputs(p, in) fails (a bad table entry would read outside the cache).
std::vector<double> paged_reference(const PagedProblem& p, const PagedInputs& in);

// ---- Prefill of packed variable-length sequences -------------------------------------------

struct VarlenProblem {
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 128;
  std::vector<int> seqlens_q, seqlens_k;  // batch entries each, >= 0
  bool causal = false;
  float scale = 0.0f;
  DType dtype = DType::bf16;

  static VarlenProblem make(int heads, int kv_heads, int head_dim, std::vector<int> seqlens_q,
                            std::vector<int> seqlens_k, bool causal = false,
                            DType dtype = DType::bf16);

  int batch() const { return int(seqlens_q.size()); }
  float softmax_scale() const;
  int kv_head(int h) const { return h / (heads / kv_heads); }
  std::vector<int32_t> cu_seqlens_q() const;  // batch + 1 prefix sums
  std::vector<int32_t> cu_seqlens_k() const;
  int64_t total_q() const;
  int64_t total_k() const;
  int max_seqlen_q() const;
  int max_seqlen_k() const;
  // Keys [0, this) of sequence b are visible to its query i (causal: bottom-right aligned).
  int visible_keys(int b, int i) const;
  // The dense Problem of sequence b alone (BSHD strides of the packed tensors): what module
  // 07 would run for it, and what the reference computes per sequence.
  Problem sequence(int b) const;
  std::string describe() const;
};

// Sizes, head_dim, kv_heads | heads, one length >= 0 per sequence in each list, at least one
// query in all, 32-bit limits; one line on failure.
Status validate(const VarlenProblem& p);
double varlen_flops(const VarlenProblem& p);  // sum over sequences of attention_flops
// The least a prefill kernel moves: Q, K, V read once and O written once (bytes of p.dtype).
double varlen_bytes(const VarlenProblem& p);

struct VarlenInputs {
  std::vector<float> q, k, v;  // packed, rounded to p.dtype
  uint64_t seed = 0;
};
VarlenInputs random_varlen_inputs(const VarlenProblem& p, uint64_t seed, float range = 1.0f);
// Q, K, V hold total_q * heads * head_dim and total_k * kv_heads * head_dim values.
Status validate_inputs(const VarlenProblem& p, const VarlenInputs& in);
void round_inputs(VarlenInputs& in, DType t);
// O [total_q, heads, head_dim] in double precision; rows that see no key are 0. Throws
// std::invalid_argument when validate_inputs(p, in) fails.
std::vector<double> varlen_reference(const VarlenProblem& p, const VarlenInputs& in);

// ---- The device entry points of an inference module (module 10) ---------------------------

// Device pointers of one decode call. q, the caches and o hold p.dtype elements (__half or
// __nv_bfloat16 bits); block_table and seqlens_k are the host vectors uploaded. `workspace`
// holds the split partials (fp32 outputs and log-sum-exps); the caller allocates
// decode_workspace_bytes(p) bytes (0 is allowed when that is 0).
struct PagedDevicePtrs {
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* seqlens_k = nullptr;
  void* o = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

using PagedSupportsFn = Status (*)(const PagedProblem& p);
using VarlenSupportsFn = Status (*)(const VarlenProblem& p);
using DecodeWorkspaceFn = size_t (*)(const PagedProblem& p);
using DecodeFn = Status (*)(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream);
// Packed Q, K, V, O (VarlenProblem's layout); cu_seqlens_q / _k: batch + 1 int32 on the device.
using PrefillFn = Status (*)(const VarlenProblem& p, const void* q, const void* k, const void* v,
                             const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, void* o,
                             cudaStream_t stream);
// Writes the seq_q new tokens of each sequence (k_new, v_new: [batch, seq_q, kv_heads, d]) to
// cache positions seqlens_k[b] - seq_q .. seqlens_k[b] - 1 through the block table: the step
// before attention in a decode step (seqlens_k already counts the new tokens).
using AppendFn = Status (*)(const PagedProblem& p, const void* k_new, const void* v_new,
                            void* k_cache, void* v_cache, const int32_t* block_table,
                            const int32_t* seqlens_k, cudaStream_t stream);

struct InferenceEntry {
  PagedSupportsFn supports_paged = nullptr;
  VarlenSupportsFn supports_varlen = nullptr;
  DecodeWorkspaceFn decode_workspace_bytes = nullptr;
  DecodeFn decode = nullptr;
  PrefillFn prefill = nullptr;
  AppendFn append_kv = nullptr;
};

}  // namespace attn
