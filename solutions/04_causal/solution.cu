// Module 04 solution: module 03's FlashAttention forward (fp32) with the causal mask.
// The kernel is given in modules/04_causal/causal_kernel.cuh (module 03's, with the online
// softmax from common/device/online_softmax.cuh); these functions add, only when p.causal is
// set (README sections 1 to 3):
//  * the mask, bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q;
//  * tile skipping: a block stops after the last key its last query sees, so the key tiles
//    above the diagonal are never loaded or computed (about half of them);
//  * the element mask only on the diagonal tiles, those that some but not all of the
//    block's queries see whole; tiles below them are visible to every query of the block;
//  * rows that see no key at all (seq_q > seq_k) output exactly 0, never 0/0.
// Non-causal problems take module 03's path: every tile is full but the last (keys past
// seq_k).
#include "modules/04_causal/causal.h"
#include "modules/04_causal/causal_kernel.cuh"

namespace attn::m04::ATTN_IMPL {

struct CausalMask {
  // The causal mask (README, section 1): query i sees keys j <= i + shift, shift =
  // seq_k - seq_q, so keys [0, i + shift + 1) clamped to [0, seq_k). Without the mask every
  // query sees [0, seq_k).
  static __device__ __forceinline__ int visible_end(const Problem& p, int query) {
    const int shift = p.seq_k - p.seq_q;
    return p.causal ? max(0, min(p.seq_k, query + shift + 1)) : p.seq_k;
  }

  // The tiles of the block (README, section 2): keys >= end are masked for every query of
  // the block (skipped), keys < full are visible to every query (no mask needed).
  static __device__ __forceinline__ KeyRange block_keys(const Problem& p, int first_query,
                                                        int queries) {
    const int last_query = min(first_query + queries, p.seq_q) - 1;
    return {visible_end(p, last_query), visible_end(p, first_query)};
  }

  // A diagonal tile (some of its keys are masked for some of the block's queries), or the
  // last tile sticking out past seq_k: mask per element. The full tiles below skip this.
  // row_end <= seq_k, so the keys past seq_k are masked with the others.
  static __device__ __forceinline__ void mask_tile(float (&s)[kKeysPerTile], int kv_start,
                                                   int kv_full, int row_end, int /*seq_k*/) {
    if (kv_start + kKeysPerTile > kv_full) {
#pragma unroll
      for (int j = 0; j < kKeysPerTile; ++j)
        if (kv_start + j >= row_end) s[j] = -INFINITY;
    }
  }

  // l >= 1 if the row saw a key (its largest score contributes 2^0 = 1); l = 0 if it saw
  // none (seq_q > seq_k): the output of such a row is defined as 0, not 0/0 = NaN.
  static __device__ __forceinline__ float inverse_sum(float l) {
    return l > 0.0f ? 1.0f / l : 0.0f;
  }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<CausalMask>(p, q, k, v, o, stream);
}

}  // namespace attn::m04::ATTN_IMPL
