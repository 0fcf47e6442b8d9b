// Module 10 exercise: the four ideas of decoding and the one of packed prefill. The pipeline
// around them (the tile ring, the tensor-core math, the merge of the warps, the kernels'
// launches) is given in decoding_kernel.cuh and prefill.cuh; the lesson (README.md) walks
// through it. Fill in the TODOs; `./course grade 10` checks them.
#include "modules/10_decoding/decoding.h"
#include "modules/10_decoding/entry_points.cuh"

namespace attn::m10::ATTN_IMPL {

struct DecodeSteps {
  // TODO 1 (README section 3, GQA packing): the block of K/V head kv_head holds the rows of
  // every query head that reads it, for every new token: prm.group heads x prm.seq_q tokens.
  // Which query token and which head of the group does row `row` hold? Any one-to-one order
  // works; rows of the same token next to each other keep the causal ends of a tile close.
  static __device__ QueryRow query_row(const DecodeParams& prm, int row) {
    (void)prm, (void)row;
    return {0, 0};
  }

  // TODO 2 (README section 4, the page table): the element offset, in the K (or V) cache
  // [num_pages, page_size, kv_heads, head_dim], of the row of key `key` of a sequence for K/V
  // head kv_head. pages[j] is the cache page that holds the sequence's j-th page_size keys;
  // page_size is a power of two (prm.page_shift = log2 of it).
  static __device__ int64_t key_offset(const DecodeParams& prm, const int32_t* pages, int key,
                                       int kv_head) {
    (void)prm, (void)pages, (void)key, (void)kv_head;
    return 0;
  }

  // TODO 3 (README section 2, split-KV): the keys [begin, end) that split `split` reads of a
  // sequence of seqlen keys: prm.keys_per_split consecutive keys each. A split past the end
  // of a short sequence gets an empty range (begin >= end).
  static __device__ KeyRange split_keys(const DecodeParams& prm, int split, int seqlen) {
    (void)prm, (void)split, (void)seqlen;
    return {0, 0};
  }

  // TODO 4 (README section 2, the combine): the weights that merge the splits' partial
  // outputs of one row. Split s left lse[s], log2 of its softmax sum in the scores' base-2
  // units (-inf when it saw no key), and its output normalized by its own sum. Write
  // weights[s], the share of split s in the merged output (the rule of module 00: they sum
  // to 1); a row that no split saw gets all weights 0, never NaN.
  static __device__ void combine_weights(const float* lse, int splits, float* weights) {
    (void)lse;
    for (int s = 0; s < splits; ++s) weights[s] = 0.f;
  }

  // TODO 5 (README section 6, packed prefill): sequence b's first query row, query count,
  // first key row and key count, from the prefix sums cu_seqlens_q and cu_seqlens_k.
  static __device__ SequenceRows sequence(const int32_t* cu_seqlens_q,
                                          const int32_t* cu_seqlens_k, int b) {
    (void)cu_seqlens_q, (void)cu_seqlens_k, (void)b;
    return {0, 0, 0, 0};
  }
};

ATTN_M10_DEFINE_ENTRY_POINTS(DecodeSteps)

}  // namespace attn::m10::ATTN_IMPL
