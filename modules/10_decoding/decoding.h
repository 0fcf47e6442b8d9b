// Module 10: attention for inference. Decoding reads a long paged KV cache for one (or a few)
// new query tokens per sequence: a memory-bound job, split across blocks (Flash-Decoding) and
// merged with the log-sum-exp rule of module 00. Prefill runs packed sequences of different
// lengths without padding. The problems and tensor layouts are in common/paged.h.
// The exercise (exercise.cu) and the solution (solutions/10_decoding/solution.cu) implement
// DecodeSteps (decoding_kernel.cuh); the grader is tests/test_10_decoding.cpp.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/paged.h"
#include "common/status.h"

namespace attn::m10 {

// What this module handles (given, shared by exercise and solution): f16/bf16; head_dim a
// multiple of 8 up to 128 (rows move in 16-byte pieces; it is padded to 64 or 128 inside);
// any group size; up to kMaxQueryTokens query tokens per sequence.
constexpr int kMaxQueryTokens = 64;

inline Status supports_dtype_and_head_dim(DType t, int head_dim) {
  if (t != DType::f16 && t != DType::bf16)
    return Status::error("module 10 runs on the tensor cores and takes f16 or bf16 tensors "
                         "(--dtype bf16 or --dtype f16), not " + std::string(dtype_name(t)));
  if (head_dim % 8 != 0 || head_dim > 128)
    return Status::error("module 10 moves K/V rows in 16-byte pieces and keeps a row of O in "
                         "registers: head_dim must be a multiple of 8, at most 128 (got " +
                         std::to_string(head_dim) + ")");
  return Status::ok();
}

// The dense-Problem check the registry asks every module for: module 10 takes paged and packed
// problems only.
inline Status supports_dense(const Problem&) {
  return Status::error("module 10 runs paged decoding (--seqlens-k or --random-seqlens) and "
                       "packed prefill (--varlen), not dense problems");
}

// 16-row tiles of query rows per K/V head: the group's heads times the new tokens.
inline int row_tiles(const PagedProblem& p) { return (p.group() * p.seq_q + 15) / 16; }

inline Status supports(const PagedProblem& p) {
  if (Status s = supports_dtype_and_head_dim(p.dtype, p.head_dim); !s) return s;
  if (Status s = validate(p); !s) return s;
  if (p.seq_q > kMaxQueryTokens)
    return Status::error("module 10 decodes up to " + std::to_string(kMaxQueryTokens) +
                         " query tokens per sequence (got --seq-q " + std::to_string(p.seq_q) +
                         "); longer chunks are prefill (--varlen)");
  if (p.batch > 65535 || int64_t(p.kv_heads) * row_tiles(p) > 65535)
    return Status::error("module 10 puts sequences and K/V heads x row tiles on grid axes of "
                         "at most 65535 blocks: batch " + std::to_string(p.batch) +
                         ", kv_heads x row tiles " +
                         std::to_string(int64_t(p.kv_heads) * row_tiles(p)));
  return Status::ok();
}

inline Status supports(const VarlenProblem& p) {
  if (Status s = supports_dtype_and_head_dim(p.dtype, p.head_dim); !s) return s;
  return validate(p);
}

// ---- How the keys are split across blocks (README, section 2) -----------------------------

// Each split reads keys [split * keys_per_split, (split + 1) * keys_per_split) of every
// sequence (clipped to its length): a whole number of 64-key tiles.
struct SplitPlan {
  int splits = 1;
  int keys_per_split = 64;
};
constexpr int kSplitKeyMultiple = 64;  // DecodeConfig::kKeys
// The combine kernel keeps a row's log-sum-exps in shared memory: at most this many splits.
constexpr int kMaxSplits = 1024;

// The plan with about `splits` splits for p's longest sequence (1 to one per tile).
inline SplitPlan plan_with_splits(const PagedProblem& p, int splits) {
  const int max_len = p.batch > 0 ? p.max_seqlen_k() : 0;
  const int most = (max_len + kSplitKeyMultiple - 1) / kSplitKeyMultiple;
  splits = std::max(1, std::min({splits, std::max(1, most), kMaxSplits}));
  SplitPlan plan;
  const int per = (max_len + splits - 1) / splits;
  plan.keys_per_split =
      std::max(kSplitKeyMultiple, (per + kSplitKeyMultiple - 1) / kSplitKeyMultiple * kSplitKeyMultiple);
  plan.splits = std::max(1, (max_len + plan.keys_per_split - 1) / plan.keys_per_split);
  return plan;
}

// The heuristic, a cost model. Blocks run in waves of `slots` (2 per SM: DecodeConfig), and a
// wave lasts as long as its longest block: keys_per_split keys plus a fixed cost per block (Q,
// the first copies' latency, the merge; kBlockFixedKeys, in keys). Only blocks that get keys
// count: split s of sequence b has keys when s x keys_per_split < seqlen_b, so a batch of
// mixed lengths has fewer of them than splits x batch. With `busy` such blocks (K/V heads x
// row tiles per sequence and split that has keys),
//   time(splits) ~ ceil(busy / slots) x (keys_per_split + kBlockFixedKeys)
//                  + empty blocks x kEmptyBlockKeys / slots.
// More splits shorten every block but add waves once the GPU is full; the plan takes the split
// count of least cost (the fewest splits on a tie: fewer partials to combine). Splits
// are the same for every sequence: a short sequence's late splits are empty blocks that end
// at once (an empty block only writes its zero partials: kEmptyBlockKeys). For a batch of
// equal lengths every block has keys and this is the wave count of the whole grid.
constexpr int kBlockFixedKeys = 128;
constexpr int kEmptyBlockKeys = 16;

// Sequences with at least t 64-key tiles, for t = 0 .. tiles + 1 (a suffix count of the
// lengths in tiles; `tiles`: the longest sequence's): the blocks that get keys under any split
// plan, without a pass over the batch per plan.
inline std::vector<int64_t> sequences_with_tiles(const PagedProblem& p, int tiles) {
  std::vector<int64_t> at_least(size_t(tiles) + 2, 0);
  for (int len : p.seqlens_k) ++at_least[size_t((len + kSplitKeyMultiple - 1) / kSplitKeyMultiple)];
  for (int t = tiles; t >= 0; --t) at_least[size_t(t)] += at_least[size_t(t) + 1];
  return at_least;
}

inline SplitPlan choose_splits(const PagedProblem& p, int sms, int blocks_per_sm = 2,
                               int fixed_keys = kBlockFixedKeys) {
  if (p.batch == 0) return SplitPlan{};
  const int64_t per_split = int64_t(p.kv_heads) * row_tiles(p);  // blocks per sequence and split
  const int64_t slots = int64_t(blocks_per_sm) * std::max(sms, 1);
  const int max_len = p.max_seqlen_k();
  const int tiles = (max_len + kSplitKeyMultiple - 1) / kSplitKeyMultiple;  // the longest's
  const int most = std::min(kMaxSplits, std::max(1, tiles));
  const bool uniform = std::all_of(p.seqlens_k.begin(), p.seqlens_k.end(),
                                   [&](int len) { return len == max_len; });
  // Few long sequences: count them one by one (no table of max_len / 64 entries).
  const bool by_sequence = !uniform && int64_t(tiles) > 4 * int64_t(p.batch);
  const std::vector<int64_t> at_least = uniform || by_sequence ? std::vector<int64_t>(2, 0)
                                                               : sequences_with_tiles(p, tiles);
  SplitPlan best = plan_with_splits(p, 1);
  double best_cost = -1;
  for (int s = 1; s <= most; ++s) {
    const SplitPlan plan = plan_with_splits(p, s);
    if (plan.splits != s) continue;  // rounding to whole tiles gave another count
    // Splits with keys: split k of a sequence has keys when it has more than k x m tiles.
    const int m = plan.keys_per_split / kSplitKeyMultiple;
    int64_t with_keys = 0;
    if (uniform) {
      with_keys = max_len > 0 ? int64_t(p.batch) * plan.splits : 0;
    } else if (by_sequence) {
      for (int len : p.seqlens_k)
        with_keys += (int64_t(len) + plan.keys_per_split - 1) / plan.keys_per_split;
    } else {
      for (int k = 0; k < plan.splits && int64_t(k) * m + 1 <= tiles; ++k)
        with_keys += at_least[size_t(int64_t(k) * m + 1)];
    }
    const int64_t busy = per_split * with_keys;
    const int64_t empty = per_split * int64_t(p.batch) * plan.splits - busy;
    const int64_t waves = std::max<int64_t>(1, (busy + slots - 1) / slots);
    const double cost = double(waves) * (plan.keys_per_split + fixed_keys) +
                        double(empty) * kEmptyBlockKeys / double(slots);
    if (best_cost < 0 || cost < best_cost) best = plan, best_cost = cost;
    // Mixed lengths: past 4 full waves more splits only add blocks (and their fixed costs);
    // stop there, so that planning a long cache stays a few thousand additions.
    if (!uniform && busy > 4 * slots) break;
  }
  return best;
}

// Bytes of the split partials: fp32 O and one log-sum-exp per output row, per split.
inline size_t workspace_bytes(const PagedProblem& p, const SplitPlan& plan) {
  if (plan.splits <= 1) return 0;
  const int64_t rows_total = int64_t(p.batch) * p.seq_q * p.heads;
  return size_t(plan.splits) * size_t(p.q_elements() + rows_total) * sizeof(float);
}

// The current GPU's SM count (132 on an H100 SXM; 1 if there is no GPU), asked at every call:
// a program may switch GPUs.
inline int sm_count() { return std::max(1, current_sm_count()); }

// Bytes of fp32 split partials decode() needs for p on the current GPU.
inline size_t decode_workspace_bytes(const PagedProblem& p) {
  return workspace_bytes(p, choose_splits(p, sm_count()));
}

// ATTN_IMPL is `exercise` or `solution`, set by the build.
namespace ATTN_IMPL {

Status decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t stream);
Status prefill(const VarlenProblem& p, const void* q, const void* k, const void* v,
               const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, void* o,
               cudaStream_t stream);
Status append_kv(const PagedProblem& p, const void* k_new, const void* v_new, void* k_cache,
                 void* v_cache, const int32_t* block_table, const int32_t* seqlens_k,
                 cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m10
