// Module 12, given: the layer around attention (README, section 4). Attention in a transformer
// block is fed by one GEMM from the hidden states x [tokens, hidden] to Q, K and V (w_qkv
// [3 x heads x head_dim, hidden], the layout of torch.nn.Linear's weight), with Q and K turned
// by RoPE; its output goes through a second GEMM back to [tokens, hidden] (w_o [hidden,
// heads x head_dim]).
//
//   unfused: gemm (packed QKV [tokens, 3 x heads x head_dim] to memory), then split_rope_kernel
//            (reads the packed rows, turns Q and K, writes Q, K, V as attention reads them)
//   fused:   gemm with QkvRopeEpilogue: the tile is turned and split while it is still on
//            chip, so the packed buffer is never written nor read back
//
// gemm_kernel computes C = A B^T with A [M, K] and B [N, K] (both contiguous along K, as Q and
// K are in Q K^T), 16-bit inputs and fp32 accumulation: 128 x 128 tiles, 8 warps of 64 x 32,
// a 3-stage cp.async ring of 64-wide K slices stored with module 07's swizzle, mma.sync.
// It is a plain tensor-core GEMM (sm_80 instructions), not cuBLAS: bench_12 puts both side by
// side, because fusing into a GEMM only pays if that GEMM is about as fast as the library's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/cp_async.cuh"
#include "common/device/shared_memory.cuh"
#include "common/modifiers.h"
#include "common/status.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"
#include "modules/12_modifiers/entry_points.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "modules/12_modifiers/modifier_hooks.cuh"

namespace attn::m12 {

struct GemmTile {
  static constexpr int kM = 128, kN = 128, kK = 64;  // block tile; kK: one swizzled 128-byte row
  static constexpr int kStages = 3;
  static constexpr int kThreads = 256;              // 8 warps: 2 (rows) x 4 (columns)
  static constexpr int kStageElems = (kM + kN) * kK;
  static constexpr int kStageStride = kN + 4;       // fp32 staging rows: +4 against bank conflicts
  static constexpr int kRingBytes = kStages * kStageElems * 2;
  static constexpr int kStagingBytes = kM * kStageStride * 4;
  static constexpr int kSmemBytes = kRingBytes > kStagingBytes ? kRingBytes : kStagingBytes;
};

// Epilogue of the plain GEMM: row m of C, columns n .. n + 7, rounded to T.
template <class T>
struct StoreRows {
  uint16_t* c;
  int ldc;
  __device__ void operator()(const float* row, int n0, int m, int n) const {
    uint16_t out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = float_to_bits<T>(row[n + e - n0]);
    *reinterpret_cast<uint4*>(c + int64_t(m) * ldc + n) = *reinterpret_cast<const uint4*>(out);
  }
};

// Epilogue of the fused QKV projection. Column n of the packed output is (which of q/k/v,
// head, feature f); token m sits at position m % seq. Q and K features are turned with their
// RoPE partner (Steps::rope_pair), which lies in the same tile row: a 128-column tile holds
// whole heads when 128 % head_dim == 0. Each goes to q, k or v [tokens, heads, head_dim]. As
// in the K pass, the convention is a template and the call of a chunk that leads its pairs
// turns it with its partner chunk (turn_lead_chunk: one angle per pair, from the fp32 tile, so
// each value is rounded once); the call of a half-split partner chunk has nothing left to do.
template <class Steps, class T, RopeStyle kStyle>
struct QkvRopeEpilogue {
  uint16_t* q;
  uint16_t* k;
  uint16_t* v;
  int seq, heads, head_dim;
  const float2* table;  // rope_feature_table (none: unused)
  __device__ void operator()(const float* row, int n0, int m, int n) const {
    const int width = heads * head_dim;
    const int which = n / width, head = (n % width) / head_dim, f0 = n % head_dim;
    uint16_t* dst = (which == 0 ? q : which == 1 ? k : v) + (int64_t(m) * heads + head) * head_dim;
    const float* x = row + (n - f0 - n0);  // this head's features in the staged row
    float own[8], other[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) own[e] = x[f0 + e];
    if (kStyle == RopeStyle::none || which == 2) {
      *reinterpret_cast<uint4*>(dst + f0) = pack_chunk<T>(own);
      return;
    }
    const RopePair lead = Steps::rope_pair(kStyle, f0, head_dim);
    if (!lead.first) return;  // turned by the call of its lead chunk
    const int c = f0 / 8, pc = lead.partner / 8, pos = m % seq, chunks = head_dim / 8;
    constexpr bool kPartnerChunk = kStyle == RopeStyle::half;  // (interleaved: in the chunk)
#pragma unroll
    for (int e = 0; e < 8; ++e) other[e] = kPartnerChunk ? x[8 * pc + e] : own[e];
    turn_lead_chunk<Steps>(
        kStyle, head_dim, c, pc,
        [&](int e, float& cs, float& sn) {
          rope_cos_sin(pos, __ldg(table + e * chunks + c), cs, sn);
        },
        own, other);
    *reinterpret_cast<uint4*>(dst + f0) = pack_chunk<T>(own);
    if (kPartnerChunk && pc != c) *reinterpret_cast<uint4*>(dst + 8 * pc) = pack_chunk<T>(other);
  }
};

// C tile (blockIdx.y, blockIdx.x) of A B^T. K % 8 == 0 and N % 8 == 0 (16-byte pieces); rows
// and pieces past M, N or K are copied as zeros.
template <class T, class Epilogue>
__global__ void __launch_bounds__(GemmTile::kThreads, 2)
    gemm_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, int M, int N,
                int K, Epilogue epilogue) {
  using G = GemmTile;
  using m07::chunk_offset;
  extern __shared__ __align__(128) uint16_t smem[];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int m0 = int(blockIdx.y) * G::kM, n0 = int(blockIdx.x) * G::kN;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // this warp's 64 x 32 of the tile
  const int slices = (K + G::kK - 1) / G::kK;

  // Slice s of A's and B's 128 rows: 8 pieces of 16 bytes per row, 4 per thread and matrix.
  auto load = [&](int s, int stage) {
    uint16_t* sa = smem + stage * G::kStageElems;
    uint16_t* sb = sa + G::kM * G::kK;
#pragma unroll
    for (int i = tid; i < G::kM * 8; i += G::kThreads) {
      const int r = i / 8, c = i % 8, kk = s * G::kK + 8 * c;
      const bool in_a = m0 + r < M && kk < K, in_b = n0 + r < N && kk < K;
      device::cp_async_16(sa + chunk_offset<64, true>(r, c),
                          a + (in_a ? int64_t(m0 + r) * K + kk : 0), in_a);
      device::cp_async_16(sb + chunk_offset<64, true>(r, c),
                          b + (in_b ? int64_t(n0 + r) * K + kk : 0), in_b);
    }
  };
#pragma unroll
  for (int s = 0; s < G::kStages - 1; ++s) {
    if (s < slices) load(s, s);
    device::cp_async_commit();
  }

  float acc[4][4][4] = {};  // [m16 tile][n8 tile][fragment]
  for (int s = 0; s < slices; ++s) {
    device::cp_async_wait<G::kStages - 2>();
    __syncthreads();  // slice s landed; the stage of slice s - 1 is free
    if (s + G::kStages - 1 < slices) load(s + G::kStages - 1, (s + G::kStages - 1) % G::kStages);
    device::cp_async_commit();
    const uint32_t sa = device::smem_u32(smem + (s % G::kStages) * G::kStageElems);
    const uint32_t sb = sa + 2 * G::kM * G::kK;
#pragma unroll
    for (int kk = 0; kk < G::kK / 16; ++kk) {
      uint32_t af[4][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        m07::ldmatrix_x4(af[i], sa + 2 * chunk_offset<64, true>(wm + 16 * i + lane % 16,
                                                                 2 * kk + lane / 16));
#pragma unroll
      for (int j = 0; j < 2; ++j)  // b0, b1 of columns 16j .. 16j + 7, then of the next 8
        m07::ldmatrix_x4(bf[j], sb + 2 * chunk_offset<64, true>(
                                         wn + 16 * j + (lane / 16) * 8 + lane % 8,
                                         2 * kk + (lane / 8) % 2));
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          m07::Elem<T>::mma(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
    }
  }
  device::cp_async_wait_all();
  __syncthreads();  // the ring becomes the fp32 staging tile

  // Stage the tile, so that a thread can read any column of its row (RoPE's partners).
  float* stage = reinterpret_cast<float*>(smem);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(stage + (wm + 16 * i + g + 8 * h) * G::kStageStride + wn +
                                   8 * j + 2 * t) =
            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  __syncthreads();
  for (int i = tid; i < G::kM * (G::kN / 8); i += G::kThreads) {
    const int r = i / (G::kN / 8), n = n0 + 8 * (i % (G::kN / 8));
    if (m0 + r < M && n < N) epilogue(stage + r * G::kStageStride, n0, m0 + r, n);
  }
}

template <class T, class Epilogue>
Status launch_gemm(const void* a, const void* b, int M, int N, int K, Epilogue epilogue,
                   cudaStream_t stream) {
  if (K % 8 != 0 || N % 8 != 0)
    return Status::error("module 12's GEMM moves rows in 16-byte pieces: the inner size (" +
                         std::to_string(K) + ") and the output width (" + std::to_string(N) +
                         ") must be multiples of 8");
  if (M == 0 || N == 0) return Status::ok();
  if ((M + GemmTile::kM - 1) / GemmTile::kM > 65535)
    return Status::error("module 12's GEMM: more than 65535 row tiles (" + std::to_string(M) +
                         " rows)");
  auto kernel = gemm_kernel<T, Epilogue>;
  const cudaError_t opt_in = device::allow_shared_memory(GemmTile::kSmemBytes, kernel);
  ATTN_CUDA_RETURN(opt_in);
  const dim3 grid(unsigned((N + GemmTile::kN - 1) / GemmTile::kN),
                  unsigned((M + GemmTile::kM - 1) / GemmTile::kM));
  kernel<<<grid, GemmTile::kThreads, GemmTile::kSmemBytes, stream>>>(
      static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), M, N, K, epilogue);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// y [rows, out] = x [rows, in] w^T, w [out, in] (a torch.nn.Linear without bias).
inline Status linear(const void* x, const void* w, void* y, int rows, int in, int out, DType t,
                     cudaStream_t stream) {
  if (t != DType::f16 && t != DType::bf16)
    return Status::error("module 12's GEMM takes f16 or bf16 tensors");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    return launch_gemm<T>(x, w, rows, out, in, StoreRows<T>{static_cast<uint16_t*>(y), out},
                          stream);
  };
  return t == DType::bf16 ? run(__nv_bfloat16{}) : run(__half{});
}

inline Status supports(const LayerShape& s, RopeStyle style) {
  if (s.dtype != DType::f16 && s.dtype != DType::bf16)
    return Status::error("module 12's projections take f16 or bf16 tensors");
  if (s.tokens < 0 || s.seq < 1 || s.heads < 1 || s.hidden < 1)
    return Status::error("module 12's projections: tokens >= 0, seq, heads and hidden >= 1");
  if (s.tokens % s.seq != 0)
    return Status::error("module 12's projections: tokens (" + std::to_string(s.tokens) +
                         ") must be whole sequences of " + std::to_string(s.seq));
  if (s.hidden % 8 != 0 || s.head_dim % 8 != 0 || 128 % s.head_dim != 0)
    return Status::error("module 12's QKV projection keeps whole heads in a 128-column tile and "
                         "moves 16-byte pieces: head_dim must divide 128 and be a multiple of 8, "
                         "hidden a multiple of 8 (got head_dim " + std::to_string(s.head_dim) +
                         ", hidden " + std::to_string(s.hidden) + ")");
  if (style != RopeStyle::none && s.head_dim / 2 > kMaxRopeFrequencies)
    return Status::error("module 12's RoPE table holds 64 frequencies");
  if (style == RopeStyle::half && s.head_dim % 16 != 0)  // as --rope half (common/modifiers.cpp)
    return Status::error("module 12's RoPE half needs head_dim % 16 == 0 (feature m turns with "
                         "m + head_dim / 2, in the same place of another 16-byte chunk), got " +
                         std::to_string(s.head_dim));
  return Status::ok();
}

// The fused QKV projection with RoPE in the epilogue (q, k, v [tokens, heads, head_dim]).
template <class Steps>
Status qkv_projection(const LayerShape& s, RopeStyle style, double rope_base, const void* x,
                      const void* w_qkv, void* q, void* k, void* v, cudaStream_t stream) {
  if (Status st = supports(s, style); !st) return st;
  if (Status st = require_sm80("module 12"); !st) return st;
  const float2* table = nullptr;
  if (style != RopeStyle::none)
    if (Status st = rope_feature_table<Steps>(style, rope_base, s.head_dim, &table); !st)
      return st;
  const int n = 3 * s.heads * s.head_dim;
  return dispatch_rope_style(s.dtype, style, [&](auto type_tag, auto style_tag) {
    using T = decltype(type_tag);
    QkvRopeEpilogue<Steps, T, decltype(style_tag)::value> e{
        static_cast<uint16_t*>(q), static_cast<uint16_t*>(k), static_cast<uint16_t*>(v),
        s.seq, s.heads, s.head_dim, table};
    return launch_gemm<T>(x, w_qkv, s.tokens, n, s.hidden, e, stream);
  });
}

// The unfused second half: packed [tokens, 3, heads, head_dim] -> q, k (turned), v. The K
// pass's scheme (entry_points.cuh, rotate_keys_kernel): a thread takes a chunk that leads its
// pairs together with its partner chunk (turn_lead_chunk), threadIdx.x is the chunk (the lead
// chunks are a prefix of the row), threadIdx.y the token; the grid's y is the head (from
// head0) and its z which of q, k, v, so no thread divides a 64-bit index. Without RoPE (and
// for v) every chunk is its own: a copy.
template <class Steps, class T, RopeStyle kStyle>
__global__ void split_rope_kernel(LayerShape s, int head0, const float2* __restrict__ table,
                                  const uint16_t* __restrict__ packed, uint16_t* q, uint16_t* k,
                                  uint16_t* v) {
  const int c = int(threadIdx.x), token = int(blockIdx.x * blockDim.y + threadIdx.y);
  if (token >= s.tokens) return;
  const int head = head0 + int(blockIdx.y), which = int(blockIdx.z), chunks = s.head_dim / 8;
  constexpr bool kTurns = kStyle != RopeStyle::none;
  int pc = c;
  if constexpr (kTurns) {
    const RopePair lead = Steps::rope_pair(kStyle, 8 * c, s.head_dim);
    if (!lead.first) return;  // (only with a rope_pair whose lead chunks are not a prefix)
    pc = lead.partner / 8;
  }
  const uint16_t* src = packed + ((int64_t(token) * 3 + which) * s.heads + head) * s.head_dim;
  uint16_t* dst = (which == 0 ? q : which == 1 ? k : v) +
                  (int64_t(token) * s.heads + head) * s.head_dim;
  constexpr bool kPartnerChunk = kStyle == RopeStyle::half;  // (interleaved: in the chunk)
  uint4 own = *reinterpret_cast<const uint4*>(src + 8 * c);
  uint4 other = kPartnerChunk ? *reinterpret_cast<const uint4*>(src + 8 * pc) : own;
  if (kTurns && which < 2)
    turn_packed_chunk<Steps, T>(
        kStyle, s.head_dim, c, pc,
        [&](int e, float& cs, float& sn) {
          rope_cos_sin(token % s.seq, __ldg(table + e * chunks + c), cs, sn);
        },
        own, other);
  *reinterpret_cast<uint4*>(dst + 8 * c) = own;
  if (kPartnerChunk && pc != c) *reinterpret_cast<uint4*>(dst + 8 * pc) = other;
}

template <class Steps>
Status split_rope(const LayerShape& s, RopeStyle style, double rope_base, const void* packed,
                  void* q, void* k, void* v, cudaStream_t stream) {
  if (Status st = supports(s, style); !st) return st;
  const float2* table = nullptr;
  int leads = s.head_dim / 8;  // without RoPE: every chunk
  if (style != RopeStyle::none) {
    if (Status st = rope_feature_table<Steps>(style, rope_base, s.head_dim, &table); !st)
      return st;
    if (Status st = rope_leads<Steps>(style, s.head_dim, &leads); !st) return st;
  }
  if (s.tokens == 0) return Status::ok();
  const dim3 threads(unsigned(leads), unsigned(256 / leads));  // x: lead chunk, y: token
  const unsigned token_blocks = unsigned((s.tokens + threads.y - 1) / threads.y);
  auto in = static_cast<const uint16_t*>(packed);
  auto qq = static_cast<uint16_t*>(q), kk = static_cast<uint16_t*>(k);
  auto vv = static_cast<uint16_t*>(v);
  dispatch_rope_style(s.dtype, style, [&](auto type_tag, auto style_tag) {
    // One launch per 65535 heads, the grid's y limit.
    for (int head0 = 0; head0 < s.heads; head0 += 65535) {
      const dim3 grid(token_blocks, unsigned(std::min(s.heads - head0, 65535)), 3);
      split_rope_kernel<Steps, decltype(type_tag), decltype(style_tag)::value>
          <<<grid, threads, 0, stream>>>(s, head0, table, in, qq, kk, vv);
    }
  });
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

}  // namespace attn::m12
