// Module 06 solution: the fused multi-head FlashAttention forward in fp32, register-tiled.
// The kernel around these three functions (tiles, cp.async copies, the online softmax, the
// normalized strided stores) is given in modules/06_multi_head/multi_head_kernel.cuh; its
// top comment draws how the 256 threads of a block share the score and output tiles.
#include "modules/06_multi_head/multi_head.h"
#include "modules/06_multi_head/multi_head_kernel.cuh"

namespace attn::m06::ATTN_IMPL {

struct Step {
  // Which queries. blockIdx.x enumerates (batch, head, query block), query blocks fastest:
  // blocks that run at the same time read the same K/V head from L2 (and with GQA the
  // heads of a group are neighbours too). One flat grid.x passes grid.y/z's 65535 limit.
  // Causal: the last query block sees the most keys, so it starts first (heaviest first).
  static __device__ __forceinline__ BlockWork block_work(const Problem& p, int query_blocks) {
    int query_block = int(blockIdx.x % unsigned(query_blocks));
    const int bh = int(blockIdx.x / unsigned(query_blocks));
    if (p.causal) query_block = query_blocks - 1 - query_block;
    const int b = bh / p.heads, h = bh % p.heads;
    const int kvh = p.kv_head(h);  // GQA/MQA: several query heads read one K/V head
    return BlockWork{query_block, b, h, kvh};
  }

  // S = Q K^T for rows group + 16i, keys lane + 16j. Four head-dim columns at a time:
  // TM + TN 16-byte reads feed TM * TN * 4 multiply-adds.
  template <class T, bool smem_vec>
  static __device__ __forceinline__ void qk(float (&s)[T::kRowsPerThread][T::kKeysPerThread],
                                            const float* q_tile, const float* k_tile,
                                            int group, int lane) {
    constexpr int TM = T::kRowsPerThread, TN = T::kKeysPerThread;
#pragma unroll T::kQKUnroll
    for (int c = 0; c < T::D; c += 4) {
      float4 qv[TM], kv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)  // the 16 lanes read the same Q row: a broadcast
        qv[i] = read4<smem_vec>(q_tile + (group + kRowGroups * i) * T::kRow + c);
#pragma unroll
      for (int j = 0; j < TN; ++j)  // 16 lanes, 16 neighbouring K rows
        kv[j] = read4<smem_vec>(k_tile + (lane + kLanes * j) * T::kRow + c);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }
  }

  // O += P V for rows group + 16i, columns (chunk, lane). Four keys at a time:
  // TM reads of P (broadcast) and 4 * kChunks reads of V feed 4 * TM * kCols FMAs.
  template <class T, bool smem_vec>
  static __device__ __forceinline__ void pv(float (&acc)[T::kRowsPerThread][T::kCols],
                                            const float* p_tile, const float* v_tile,
                                            int group, int lane) {
    constexpr int TM = T::kRowsPerThread;
#pragma unroll T::kPVUnroll
    for (int kk = 0; kk < T::kKeys; kk += 4) {
      float4 p4[TM];  // P of rows i, keys kk .. kk + 3
#pragma unroll
      for (int i = 0; i < TM; ++i)
        p4[i] = read4<smem_vec>(p_tile + (group + kRowGroups * i) * T::kPRow + kk);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float* v_row = v_tile + (kk + e) * T::kRow;
        float vv[T::kCols];
#pragma unroll
        for (int ch = 0; ch < T::kChunks; ++ch) {
          const int col = ch * kLanes * T::kWidth + lane * T::kWidth;
          if constexpr (T::kWidth == 4) {
            const float4 x = read4<smem_vec>(v_row + col);
            vv[4 * ch + 0] = x.x;
            vv[4 * ch + 1] = x.y;
            vv[4 * ch + 2] = x.z;
            vv[4 * ch + 3] = x.w;
          } else {
            vv[2 * ch + 0] = v_row[col];
            vv[2 * ch + 1] = v_row[col + 1];
          }
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const float pi = e == 0 ? p4[i].x : e == 1 ? p4[i].y : e == 2 ? p4[i].z : p4[i].w;
#pragma unroll
          for (int c = 0; c < T::kCols; ++c) acc[i][c] = fmaf(pi, vv[c], acc[i][c]);
        }
      }
    }
  }
};

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<Step>(p, q, k, v, o, stream);
}

}  // namespace attn::m06::ATTN_IMPL
