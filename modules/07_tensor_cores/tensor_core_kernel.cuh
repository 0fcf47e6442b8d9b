// Module 07, given: the FlashAttention-2 forward on the tensor cores, everything except the
// warp's tensor-core step. The kernel is a template over `Warp`, a struct with four static
// functions that the exercise (exercise.cu) and the solution (solutions/07_tensor_cores/
// solution.cu) provide (README, section 3):
//
//   Warp::load_q<T, C>(qf, sQ, row0, lane)   Q rows row0 .. row0 + 16*kRowTiles - 1 of the
//                                            shared Q tile -> A fragments, all k-steps
//   Warp::qk<T, C>(s, qf, sK, lane)          s += Q K^T for the warp's rows x the tile's keys
//   Warp::pack_p<T, C>(pa, s)                 P (f32 accumulators) -> A fragments (16-bit)
//   Warp::pv<T, C>(o, pa, sV, lane)           o += P V for the warp's rows x all D columns
//
// Work partitioning (FlashAttention-2): a block of kWarps warps owns kQueries consecutive
// queries of one (batch, head); each warp owns 16 * kRowTiles of them outright. Its Q
// fragments, its S tile, its softmax statistics and its O accumulators all live in its
// registers; warps share only the K and V tiles in shared memory, which the whole block
// streams through in tiles of kKeys keys:
//
//     per K/V tile, per warp:   S = Q K^T          (D/16 x kKeys/8 mma per row tile)
//                               online softmax on the S registers (quad shuffles)
//                               P = 16-bit exp2(...) in registers (C layout = A layout)
//                               O += P V           (kKeys/16 x D/8 mma per row tile)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/mma_primitives.cuh"

namespace attn::m07 {

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = 2^(x * log2(e))

// One kernel configuration. D: the padded head dim (64 or 128; head_dim <= D, the padding
// columns are zeros). kWarps warps x kRowTiles 16-row tiles each = kQueries queries per
// block; kKeys keys per K/V tile; kMinBlocks for __launch_bounds__ (caps registers so that
// many blocks fit on an SM). The three flags are rungs of the README's ladder (section 5):
//   kSwizzle   XOR-swizzled shared tiles (else plain rows: 8-way ldmatrix bank conflicts);
//   kAsync     K/V tile t+1 copied with cp.async while tile t is computed (else every tile is
//              copied, waited for and then computed: the copy is not hidden);
//   kQInSmemStage  Q is staged in the second K/V buffer, moved to registers, and the buffer
//              handed to the pipeline (saves kQueries * D * 2 bytes of shared memory, which
//              buys a block per SM only where registers are not the limit); else Q has its
//              own buffer.
template <int D_, int kWarps_, int kRowTiles_, int kKeys_, int kMinBlocks_, bool kSwizzle_ = true,
          bool kAsync_ = true, bool kQInSmemStage_ = true>
struct Config {
  static constexpr int D = D_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kRowTiles = kRowTiles_;
  static constexpr int kKeys = kKeys_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kSwizzle = kSwizzle_;
  static constexpr bool kAsync = kAsync_;
  static constexpr bool kQInSmemStage = kQInSmemStage_ && kAsync_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kRowTiles;
  static constexpr int kQueries = kWarps * kWarpRows;
  static constexpr int kTileElems = kKeys * D;       // one K or V tile
  static constexpr int kStageElems = 2 * kTileElems;  // K and V of one tile
  static constexpr int kStages = kAsync ? 2 : 1;
  // Shared memory (16-bit elements): [K0 | V0 | K1 | V1] then Q, or Q over [K1 | V1].
  static constexpr int kQOffset = kQInSmemStage ? kStageElems : kStages * kStageElems;
  static constexpr int kQElems = kQueries * D;
  static constexpr int kSmemElems = kQOffset + kQElems > kStages * kStageElems
                                        ? kQOffset + kQElems
                                        : kStages * kStageElems;
  static constexpr int kSmemBytes = 2 * kSmemElems;
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kKeys % 16 == 0, "whole k-steps of P V");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

// Byte address (shared window) of logical chunk `chunk` of row `row` of the tile at `tile`:
// what each lane hands ldmatrix (README, section 2).
template <class C>
__device__ __forceinline__ uint32_t chunk_addr(uint32_t tile, int row, int chunk) {
  return tile + 2 * chunk_offset<C::D, C::kSwizzle>(row, chunk);
}

// Copies rows [0, kRows) of a head slice (row stride `ld` elements) into a shared tile.
// Rows >= rows_valid and columns >= head_dim become zeros. Thread i copies chunk i % (D/8) of
// rows i / (D/8), + kThreads / (D/8), ...: consecutive threads, consecutive 16-byte chunks of
// a row (coalesced). kVec: 16-byte cp.async (rows 16-byte aligned, head_dim % 8 == 0); else
// element by element, synchronously (any alignment, any head_dim).
template <class C, int kRows, bool kVec>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* __restrict__ g,
                                          int64_t ld, int rows_valid, int head_dim) {
  constexpr int kChunks = C::D / 8;
  constexpr int kRowStep = C::kThreads / kChunks;
  static_assert(C::kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole passes");
  const int c = int(threadIdx.x) % kChunks;
  const int r0 = int(threadIdx.x) / kChunks;
#pragma unroll
  for (int n = 0; n < kRows / kRowStep; ++n) {
    const int r = r0 + n * kRowStep;
    uint16_t* dst = tile + chunk_offset<C::D, C::kSwizzle>(r, c);
    if constexpr (kVec) {
      const bool ok = r < rows_valid && c * 8 < head_dim;
      cp_async_16(smem_u32(dst), ok ? g + r * ld + c * 8 : g, ok);
    } else {
      uint16_t x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = r < rows_valid && c * 8 + e < head_dim ? g[r * ld + c * 8 + e] : uint16_t(0);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(x);
    }
  }
}

// The first key query i does not see, clamped to [0, seq_k]: seq_k without the mask; with
// it, bottom-right aligned as in Problem::first_masked_key (host code): keys j <= i + seq_k -
// seq_q. 0 means the query sees no key at all (causal, seq_q > seq_k).
template <bool kCausal>
__device__ __forceinline__ int visible_end(const Problem& p, int i) {
  if (!kCausal) return p.seq_k;
  const int64_t end = int64_t(i) + (p.seq_k - p.seq_q) + 1;
  return int(end < 0 ? 0 : end > p.seq_k ? p.seq_k : end);
}

// The online softmax on one 16-row tile of S accumulators, in registers (module 03, section 1,
// in base-2 units). Lane (g, t) holds rows g and g + 8 of the tile, keys 8n + 2t and
// 8n + 2t + 1 of every 8-key block n: a row lives in the 4 lanes of a quad, so its max needs
// two xor-shuffles (1, 2). The row sum l stays a per-lane partial sum (the 4 lanes share m,
// so their partial sums rescale alike) and is reduced once at the end.
//   m_new = max(m, scale_log2 * rowmax(S));  alpha = 2^(m - m_new) rescales O and l;
//   p = 2^(scale_log2 * s - m_new): one FFMA and one MUFU.EX2 per score.
// A row that has seen only masked keys keeps m = -inf; it subtracts 0 instead, so p = 2^-inf
// = 0 and alpha = 0, never -inf - (-inf) = NaN (module 04, section 1).
template <class C, bool kMask>
__device__ __forceinline__ void online_softmax(float (&s)[C::kKeys / 8][4], float (&m)[2],
                                               float (&l)[2], float (&o)[C::D / 8][4],
                                               float scale_log2, int key0,
                                               const int (&row_end)[2], int lane) {
  if constexpr (kMask) {  // the tile crosses seq_k or the causal diagonal
    const int key_lane = key0 + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < C::kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (key_lane + 8 * n + (e & 1) >= row_end[e >> 1]) s[n][e] = -INFINITY;
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < C::kKeys / 8; ++n) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
  }
  float m_ref[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float m_new = fmaxf(m[r], tile_max[r] * scale_log2);  // scale_log2 > 0
    m_ref[r] = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = fast_exp2(m[r] - m_ref[r]);
    m[r] = m_new;
    l[r] *= alpha;
#pragma unroll
    for (int n = 0; n < C::D / 8; ++n) {
      o[n][2 * r] *= alpha;
      o[n][2 * r + 1] *= alpha;
    }
  }
#pragma unroll
  for (int n = 0; n < C::kKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -m_ref[e >> 1]));
    l[0] += s[n][0] + s[n][1];
    l[1] += s[n][2] + s[n][3];
  }
}

template <class Warp, class T, class C, bool kCausal, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_tc_kernel(Problem p, float scale_log2, int query_blocks, const uint16_t* __restrict__ q,
                    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                    uint16_t* __restrict__ o) {
  constexpr int MT = C::kRowTiles, BC = C::kKeys, D = C::D;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* const q_tile = smem + C::kQOffset;  // also stages O at the end

  const int lane = int(threadIdx.x) % 32;
  const int warp = int(threadIdx.x) / 32;

  // One flat grid over (query block, batch x head), batch x head fastest. Query blocks are
  // handed out last first: with the causal mask the last block visits the most keys, so the
  // heaviest blocks start first and the light ones fill the tail.
  const int bh_count = p.batch * p.heads;
  const int query_block = query_blocks - 1 - int(blockIdx.x / unsigned(bh_count));
  const int bh = int(blockIdx.x % unsigned(bh_count));
  const int b = bh / p.heads, h = bh % p.heads;
  const int q0 = query_block * C::kQueries;

  const uint16_t* q_head = q + Problem::offset(p.q, b, h, q0);
  const uint16_t* k_head = k + Problem::offset(p.k, b, p.kv_head(h), 0);
  const uint16_t* v_head = v + Problem::offset(p.v, b, p.kv_head(h), 0);

  // The key tiles this block visits: up to the last key its last query sees.
  const int q_last = min(q0 + C::kQueries, p.seq_q) - 1;
  const int tiles = (visible_end<kCausal>(p, q_last) + BC - 1) / BC;  // 0: sees no key
  // Keys below kv_full are seen by every query of the block: those tiles need no mask.
  const int kv_full = visible_end<kCausal>(p, q0);

  // Per lane: rows g and g + 8 of each row tile; the first key each does not see. (Rows past
  // seq_q get some value: their outputs are never stored.)
  const int row_base = warp * C::kWarpRows + lane / 4;
  int row_end[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      row_end[mt][r] = visible_end<kCausal>(p, q0 + row_base + 16 * mt + 8 * r);

  // Prologue: Q and K/V tile 0 in flight together, then Q into registers.
  const uint32_t s_base = smem_u32(smem);
  constexpr uint32_t kTileBytes = 2 * C::kTileElems;
  load_tile<C, C::kQueries, kVec>(q_tile, q_head, p.q.seq, p.seq_q - q0, p.head_dim);
  if (tiles > 0) {
    load_tile<C, BC, kVec>(smem, k_head, p.k.seq, p.seq_k, p.head_dim);
    load_tile<C, BC, kVec>(smem + C::kTileElems, v_head, p.v.seq, p.seq_k, p.head_dim);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[MT][D / 16][4];
  Warp::template load_q<T, C>(qf, smem_u32(q_tile), warp * C::kWarpRows, lane);
  if constexpr (C::kQInSmemStage) __syncthreads();  // Q is in registers: stage 1 is free

  float acc[MT][D / 8][4];  // O, unnormalized, in the C layout
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  // Main loop. kAsync: at the top of iteration t, tile t is complete in stage t % 2 and
  // nobody reads stage (t + 1) % 2 any more (the barrier at the end of iteration t - 1), so
  // tile t + 1 is copied there while tile t is computed.
  for (int t = 0; t < tiles; ++t) {
    const int key0 = t * BC;
    const int stage = C::kAsync ? t & 1 : 0;
    if constexpr (C::kAsync) {
      if (t + 1 < tiles) {
        uint16_t* next = smem + (stage ^ 1) * C::kStageElems;
        const int key1 = key0 + BC;
        load_tile<C, BC, kVec>(next, k_head + key1 * p.k.seq, p.k.seq, p.seq_k - key1,
                               p.head_dim);
        load_tile<C, BC, kVec>(next + C::kTileElems, v_head + key1 * p.v.seq, p.v.seq,
                               p.seq_k - key1, p.head_dim);
      }
      cp_async_commit();
    } else if (t > 0) {  // one buffer: copy tile t now and wait for it (nothing overlaps)
      load_tile<C, BC, kVec>(smem, k_head + key0 * p.k.seq, p.k.seq, p.seq_k - key0, p.head_dim);
      load_tile<C, BC, kVec>(smem + C::kTileElems, v_head + key0 * p.v.seq, p.v.seq,
                             p.seq_k - key0, p.head_dim);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }
    const uint32_t sK = s_base + stage * 2 * kTileBytes;
    const uint32_t sV = sK + kTileBytes;

    float s[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
    Warp::template qk<T, C>(s, qf, sK, lane);

    // Only tiles that cross seq_k or the diagonal need the mask; the test is the same for the
    // whole block, so the branch does not diverge.
    const bool needs_mask = key0 + BC > kv_full;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (needs_mask)
        online_softmax<C, true>(s[mt], m[mt], l[mt], acc[mt], scale_log2, key0, row_end[mt],
                                lane);
      else
        online_softmax<C, false>(s[mt], m[mt], l[mt], acc[mt], scale_log2, key0, row_end[mt],
                                 lane);
    }

    uint32_t pa[MT][BC / 16][4];
    Warp::template pack_p<T, C>(pa, s);
    Warp::template pv<T, C>(acc, pa, sV, lane);

    if constexpr (C::kAsync) cp_async_wait<0>();  // tile t + 1 has landed (own copies) ...
    __syncthreads();  // ... everyone's; and nobody reads this stage any more
  }

  // Epilogue: l summed over the quad, O / l rounded to 16 bits, staged through the warp's own
  // rows of the Q area, then written out as 16-byte row chunks (coalesced).
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;  // a row that saw no key: 0, not 0/0
    }
    const int row = warp * C::kWarpRows + 16 * mt + g;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(q_tile + chunk_offset<D, C::kSwizzle>(row, n) + 2 * tq) =
          Elem<T>::pack(acc[mt][n][0] * inv[0], acc[mt][n][1] * inv[0]);
      *reinterpret_cast<uint32_t*>(q_tile + chunk_offset<D, C::kSwizzle>(row + 8, n) + 2 * tq) =
          Elem<T>::pack(acc[mt][n][2] * inv[1], acc[mt][n][3] * inv[1]);
    }
  }
  __syncwarp();  // each warp reads back only its own rows
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = lane; i < C::kWarpRows * kChunks; i += 32) {
    const int r = warp * C::kWarpRows + i / kChunks, c = i % kChunks;
    if (q0 + r >= p.seq_q || c * 8 >= p.head_dim) continue;
    uint16_t* dst = o + Problem::offset(p.o, b, h, q0 + r) + c * 8;
    const uint16_t* src = q_tile + chunk_offset<D, C::kSwizzle>(r, c);
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && c * 8 + e < p.head_dim; ++e) dst[e] = src[e];
    }
  }
}

// The kernels need sm_80 (mma_primitives.cuh); the course also builds for sm_75. Asked once.
inline Status require_sm80() {
  static const int cc = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return 0;
    return 10 * major + minor;
  }();
  if (cc >= 80) return Status::ok();
  return Status::error("module 07 needs an Ampere or newer GPU (sm_80+: bf16 mma.sync, cp.async); "
                       "this one is sm_" + std::to_string(cc));
}

// Launches one configuration for p.dtype (T) and p.causal; picks 16-byte copies when every
// row of Q, K, V and O starts on a 16-byte boundary and head_dim % 8 == 0.
template <class Warp, class T, class C>
Status launch_config(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream) {
  if (Status s = require_sm80(); !s) return s;
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 07: more than 2^31 - 1 blocks");
  const bool vec = p.head_dim % 8 == 0 && rows_aligned16(q, p.q, 2) &&
                   rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
                   rows_aligned16(o, p.o, 2);
  const float scale_log2 = p.softmax_scale() * kLog2e;
  using Kernel = void (*)(Problem, float, int, const uint16_t*, const uint16_t*,
                          const uint16_t*, uint16_t*);
  // [causal][vec]
  static const Kernel kernels[2][2] = {
      {flash_tc_kernel<Warp, T, C, false, false>, flash_tc_kernel<Warp, T, C, false, true>},
      {flash_tc_kernel<Warp, T, C, true, false>, flash_tc_kernel<Warp, T, C, true, true>}};
  // Above 48 KB of shared memory a kernel must opt in, once per kernel.
  static const cudaError_t opt_in = [] {
    for (auto& row : kernels)
      for (Kernel kern : row)
        if (cudaError_t e = cudaFuncSetAttribute(
                kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
            e != cudaSuccess)
          return e;
    return cudaSuccess;
  }();
  ATTN_CUDA_RETURN(opt_in);
  kernels[p.causal ? 1 : 0][vec ? 1 : 0]<<<unsigned(blocks), C::kThreads, C::kSmemBytes,
                                           stream>>>(
      p, scale_log2, int(query_blocks), static_cast<const uint16_t*>(q),
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), static_cast<uint16_t*>(o));
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The production configurations (README, section 5 measures them on the H100):
// D = 64: 4 warps x 16 rows, 64-key tiles, 3 blocks per SM (at most 168 registers).
// D = 128: 4 warps x 16 rows, 64-key tiles, 2 blocks per SM.
using Config64 = Config<64, 4, 1, 64, 3>;
using Config128 = Config<128, 4, 1, 64, 2>;

template <class Warp, class C64, class C128>
Status launch_for_head_dim(const Problem& p, const void* q, const void* k, const void* v,
                           void* o, cudaStream_t stream) {
  if (p.dtype == DType::bf16)
    return p.head_dim <= 64 ? launch_config<Warp, __nv_bfloat16, C64>(p, q, k, v, o, stream)
                            : launch_config<Warp, __nv_bfloat16, C128>(p, q, k, v, o, stream);
  return p.head_dim <= 64 ? launch_config<Warp, __half, C64>(p, q, k, v, o, stream)
                          : launch_config<Warp, __half, C128>(p, q, k, v, o, stream);
}

// forward() of the exercise and the solution: the production configurations.
template <class Warp>
Status launch(const Problem& p, const void* q, const void* k, const void* v, void* o,
              cudaStream_t stream) {
  return launch_for_head_dim<Warp, Config64, Config128>(p, q, k, v, o, stream);
}

}  // namespace attn::m07
