// Module 10 solution: the exercise's DecodeSteps filled in, in a header so that two programs
// instantiate it: solution.cu's entry points and the benchmark (bench/10_decoding).
#pragma once

#include <cmath>
#include <cstdint>

#include "modules/10_decoding/decoding_kernel.cuh"

namespace attn::m10::ATTN_IMPL {

struct DecodeSteps {
  // Token-major: rows token * group .. token * group + group - 1 are the group's heads for
  // one token, so a 16-row tile covers whole tokens (and their causal ends) in order.
  static __device__ QueryRow query_row(const DecodeParams& prm, int row) {
    return {row / prm.group, row % prm.group};
  }

  // Key `key` is row key % page_size of the sequence's page key / page_size; a cache row holds
  // kv_heads heads of head_dim elements. The page index is 32-bit, the offset 64-bit: a large
  // pool passes 2^31 elements.
  static __device__ int64_t key_offset(const DecodeParams& prm, const int32_t* pages, int key,
                                       int kv_head) {
    const int64_t page = pages[key >> prm.page_shift];
    const int slot = key & (prm.page_size - 1);
    return ((page * prm.page_size + slot) * prm.kv_heads + kv_head) * prm.head_dim;
  }

  static __device__ KeyRange split_keys(const DecodeParams& prm, int split, int seqlen) {
    const int begin = split * prm.keys_per_split;
    return {begin, min(begin + prm.keys_per_split, seqlen)};
  }

  // With L = max_s lse_s, split s carries 2^(lse_s - L) (its softmax sum, rescaled to the
  // common max); its share is that over the sum of all of them. A split with no key has
  // lse = -inf and weight 0; if every split is empty, L = -inf and 2^(-inf - -inf) would be
  // NaN: all weights stay 0 and the row is 0.
  static __device__ void combine_weights(const float* lse, int splits, float* weights) {
    float top = -INFINITY;
    for (int s = 0; s < splits; ++s) top = fmaxf(top, lse[s]);
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) {
      weights[s] = top == -INFINITY ? 0.f : exp2f(lse[s] - top);
      sum += weights[s];
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int s = 0; s < splits; ++s) weights[s] *= inv;
  }

  static __device__ SequenceRows sequence(const int32_t* cu_seqlens_q,
                                          const int32_t* cu_seqlens_k, int b) {
    return {cu_seqlens_q[b], cu_seqlens_q[b + 1] - cu_seqlens_q[b], cu_seqlens_k[b],
            cu_seqlens_k[b + 1] - cu_seqlens_k[b]};
  }
};

}  // namespace attn::m10::ATTN_IMPL
