// Module 06 exercise: the fused multi-head FlashAttention forward in fp32, register-tiled.
// Read modules/06_multi_head/README.md first. Run: ./course run 06   Grade: ./course grade 06
//
// Given (modules/06_multi_head/multi_head_kernel.cuh): the whole kernel around the three
// functions of Step below -- the shared-memory tiles (Q once, K/V copied in the background
// with cp.async), the online softmax on a thread's scores, the normalization and the strided
// stores. Your part:
//   TODO 1  block_work: which (batch, head, query block) this block owns, and which K/V head
//           it reads (GQA/MQA), from one flat blockIdx.x (README, section 1);
//   TODO 2  qk: S = Q K^T for the thread's rows x keys, as register-tiled outer products
//           (README, section 3);
//   TODO 3  pv: O += P V for the thread's rows x columns, the same way (README, section 3).
//
// The threads (README, section 3): 256 per block, kRowGroups = 16 row groups (half-warps) of
// kLanes = 16 lanes. A thread, row group `group`, lane `lane`, owns TM = T::kRowsPerThread
// query rows (group + kRowGroups * i) and TN = T::kKeysPerThread keys of each K/V tile
// (lane + kLanes * j). T is the module's Tiling (multi_head_kernel.cuh): T::D (the padded
// head dim), T::kRow, T::kPRow (floats per shared row), T::kKeys, T::kWidth, T::kChunks,
// T::kCols. read4<smem_vec>(ptr) reads 4 consecutive floats of shared memory.
#include "modules/06_multi_head/multi_head.h"
#include "modules/06_multi_head/multi_head_kernel.cuh"

namespace attn::m06::ATTN_IMPL {

struct Step {
  // TODO(1): from blockIdx.x (there are query_blocks * heads * batch blocks), find
  //   query_block (query blocks of one head fastest), then h and b; with p.causal, start the
  //   heaviest query block first (README, section 1). kvh = the K/V head that query head h
  //   reads: several query heads share one with GQA/MQA (Problem::kv_head). Hints unfold in
  //   the README, section 1, "The grid".
  // The values below run everything on query block 0 of head 0.
  static __device__ __forceinline__ BlockWork block_work(const Problem& p, int query_blocks) {
    (void)p, (void)query_blocks;
    int query_block = 0;
    const int b = 0, h = 0;
    const int kvh = 0;
    return BlockWork{query_block, b, h, kvh};
  }

  // TODO(2): s[i][j] += q_row(i) . k_row(j) over the D columns (padding columns are 0),
  //   where this thread's rows are group + kRowGroups * i (Q in q_tile, kRow floats per
  //   row) and its keys are lane + kLanes * j (K in k_tile, same row length). Step through
  //   the columns 4 at a time with read4<smem_vec>(): load TM float4 of Q and TN float4 of
  //   K into registers, then do all TM * TN * 4 multiply-adds (README, section 3, "Loads per
  //   multiply-add", and the hints after it).
  // s arrives zeroed.
  template <class T, bool smem_vec>
  static __device__ __forceinline__ void qk(float (&s)[T::kRowsPerThread][T::kKeysPerThread],
                                            const float* q_tile, const float* k_tile,
                                            int group, int lane) {
    (void)s, (void)q_tile, (void)k_tile, (void)group, (void)lane;
  }

  // TODO(3): acc[i][c] += sum over the tile's kKeys keys of P[row i][key] * V[key][column c].
  //   P rows are in p_tile (kPRow floats per row, rows group + kRowGroups * i); V in v_tile
  //   (kRow floats per key). This thread's column c = kWidth * ch + e (ch < kChunks, e < kWidth)
  //   is head-dim column ch * kLanes * kWidth + lane * kWidth + e: each chunk is kWidth
  //   neighbouring floats, one vector read. Four keys at a time: TM float4 of P, then per
  //   key the V vectors, then TM * kCols multiply-adds (README, section 3, and its hints).
  template <class T, bool smem_vec>
  static __device__ __forceinline__ void pv(float (&acc)[T::kRowsPerThread][T::kCols],
                                            const float* p_tile, const float* v_tile,
                                            int group, int lane) {
    (void)acc, (void)p_tile, (void)v_tile, (void)group, (void)lane;
  }
};

// Given: forward() refuses what supports() refuses, then launches the kernel with your Step.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<Step>(p, q, k, v, o, stream);
}

}  // namespace attn::m06::ATTN_IMPL
