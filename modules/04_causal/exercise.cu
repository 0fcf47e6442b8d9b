// Module 04 exercise: the causal mask on top of module 03's FlashAttention forward (fp32).
// Read modules/04_causal/README.md first. Run: ./course run 04 --causal   Grade: ./course grade 04
//
// Given (modules/04_causal/causal_kernel.cuh): module 03's kernel, complete and correct
// without the mask, and the heaviest-first order of the query blocks. Module 03's online
// softmax is given from the device layer (common/device/online_softmax.cuh). Your part, the
// four functions of CausalMask below, which the kernel calls:
//  1. visible_end: which keys a query sees, bottom-right aligned (README, section 1);
//  2. block_keys:  the keys the block needs at all, and those all its queries see (section 2);
//  3. mask_tile:   the element mask, on the diagonal tiles only (section 2);
//  4. inverse_sum: rows that see no key output 0 (section 1).
// Until then the kernel computes attention WITHOUT the mask, which the grader recognises.
#include "modules/04_causal/causal.h"
#include "modules/04_causal/causal_kernel.cuh"

namespace attn::m04::ATTN_IMPL {

struct CausalMask {
  // TODO(1): the causal mask (README, section 1). visible_end(p, query) is the first key that
  //   `query` does not see: it sees keys [0, visible_end). The mask is aligned bottom-right:
  //   the LAST query sees every key. What do the first queries see when seq_q > seq_k, and
  //   what does the result have to stay within? Without p.causal every query sees all keys.
  static __device__ __forceinline__ int visible_end(const Problem& p, int query) {
    (void)query;
    return p.seq_k;  // placeholder: every query sees every key
  }

  // TODO(2): the keys of this block (README, section 2). The block owns the queries
  //   first_query .. first_query + queries - 1, fewer in the last block of a head. The tile
  //   loop runs over the keys [0, end): no query of the block sees a key at or past `end`.
  //   Every query of the block sees the keys below `full`, so those tiles need no mask.
  //   Which of the block's queries decides each bound?
  static __device__ __forceinline__ KeyRange block_keys(const Problem& p, int first_query,
                                                        int queries) {
    (void)first_query;
    (void)queries;
    // placeholder: all tiles (correct, but twice the work), and only the keys past seq_k
    // are masked
    return {p.seq_k, p.seq_k};
  }

  // TODO(3): the element mask (README, section 2). As given, only the keys past seq_k are
  //   masked, in the last tile. A masked score must contribute nothing to the softmax: what
  //   value does that (README, section 1)? Which keys does this thread's row not see (the
  //   kernel passes row_end = visible_end(p, i))? Leave the full tiles untouched.
  static __device__ __forceinline__ void mask_tile(float (&s)[kKeysPerTile], int kv_start,
                                                   int kv_full, int row_end, int seq_k) {
    (void)row_end;
    if (kv_start + kKeysPerTile > kv_full) {
#pragma unroll
      for (int j = 0; j < kKeysPerTile; ++j)
        if (kv_start + j >= seq_k) s[j] = -INFINITY;
    }
  }

  // TODO(4): the factor the output row is multiplied by, o = acc * inverse_sum(l). A row that
  //   saw no key (seq_q > seq_k) has l = 0 and acc = 0; its output is defined as 0, but
  //   0 * (1 / 0) = 0 * inf = NaN (README, section 1).
  static __device__ __forceinline__ float inverse_sum(float l) { return 1.0f / l; }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<CausalMask>(p, q, k, v, o, stream);
}

}  // namespace attn::m04::ATTN_IMPL
