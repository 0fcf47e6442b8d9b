// Module 07, given: the fp32 rungs (README, section 10). fp32 Q, K, V and O; both products on
// the tensor cores with mma.sync m16n8k8 in TF32, in module 07's FlashAttention-2 structure:
// warps own their query rows, the online softmax runs on the S accumulators, P goes from the
// accumulators to the A operand of P V in registers, K and V stream through shared memory
// with cp.async; BHSD/BSHD strides, GQA, the bottom-right causal mask, head_dim up to 128.
//
// Two precisions, one kernel (a template over `Prec`):
//   Tf32             each operand rounded to TF32 (cvt.rna), one mma per product: 10 mantissa
//                    bits, a relative error near 3e-4 that grows with the logits (section 10);
//   Tf32x3<Split>    3xTF32: each operand x split into big = tf32(x) and small = tf32(x - big)
//                    by Split::split (the exercise's TODO 5), three mma per product:
//                    small*big + big*small + big*big. fp32 accuracy on the tensor cores.
//
// Where the split is done (README, section 10):
//   K and V   two places, a configuration option (Tf32Config::kSplitInSmem):
//             - at each fragment load (production): every warp splits the fp32 elements it
//               reads, so each element is split once per warp (4 or 8 times per tile), but
//               shared memory holds one plane and the inner loop loads half the bytes.
//               Measured 4-7% faster on the H100 (the split's instructions likely issue
//               while the mma run; not profiled);
//             - once per tile, in shared memory, by the thread that copied each 16-byte
//               chunk, right after its own cp.async wait and before the barrier that
//               publishes the tile: big overwrites the fp32 chunk, small goes to a second
//               plane. The inner loop is then two 16-byte loads (big, small) and the mma.
//   Q         its rows are read by one warp only, so nothing is gained by splitting in shared
//             memory: Q is split as its fragments are loaded (with kQInRegisters, once, into
//             registers; they fit only with one row tile per warp). Plain TF32 rounds Q in
//             place once, which needs no extra memory.
//   P         in registers, once per tile, as the A fragments of P V are formed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/cp_async.cuh"
#include "common/device/head_dim.cuh"
#include "common/device/shared_memory.cuh"
#include "common/device/warp.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/07_tensor_cores/tf32_primitives.cuh"

namespace attn::m07 {

// ---- The two precisions ---------------------------------------------------------------------

// Plain TF32: one part per operand, one mma per product.
struct Tf32 {
  static constexpr int kParts = 1;
  static constexpr const char* name = "tf32";
  static __device__ __forceinline__ void split(float x, uint32_t (&part)[1]) {
    part[0] = cvt_rna_tf32(x);
  }
  static __device__ __forceinline__ void products(float (&c)[4], const uint32_t (&a)[1][4],
                                                  const uint32_t (&b)[1][2]) {
    mma_tf32(c, a[0], b[0][0], b[0][1]);
  }
};

// 3xTF32: part 0 = big, part 1 = small, from Split::split(x, big, small).
//   x y = (xb + xs)(yb + ys) = xb yb + xb ys + xs yb + xs ys
// With big rounded to nearest, |xs| <= 2^-11 |x|, so the fourth product, xs ys, is at most
// 2^-22 |x y|: the size of fp32's own rounding of the running sum (2^-24 per addition, over
// dozens of additions), and of the error left by the split itself. A fourth mma per product
// would cost a third more tensor-core time and change nothing measurable: it is dropped. The
// small products go in first, as in CUTLASS's 3xTF32, while the big one is not yet added.
template <class Split>
struct Tf32x3 {
  static constexpr int kParts = 2;
  static constexpr const char* name = "3xtf32";
  static __device__ __forceinline__ void split(float x, uint32_t (&part)[2]) {
    Split::split(x, part[0], part[1]);
  }
  static __device__ __forceinline__ void products(float (&c)[4], const uint32_t (&a)[2][4],
                                                  const uint32_t (&b)[2][2]) {
    mma_tf32(c, a[1], b[0][0], b[0][1]);  // small * big
    mma_tf32(c, a[0], b[1][0], b[1][1]);  // big * small
    mma_tf32(c, a[0], b[0][0], b[0][1]);  // big * big
  }
};

// ---- Configurations -------------------------------------------------------------------------

// One configuration of the fp32 kernel. D: the padded head dim (64 or 128); kWarps warps x
// kRowTiles 16-row tiles = kQueries queries per block; kKeys keys per K/V tile; kMinBlocks for
// __launch_bounds__; kPipeline: two_stage or fa2 (tensor_core_kernel.cuh); kSplitInSmem: K
// and V split (or, plain TF32, rounded) once per tile in shared memory, else at each fragment
// load; kQInRegisters: Q's fragments split once into registers, else re-read (and split) from
// the shared Q tile for every K tile.
template <int D_, int kWarps_, int kRowTiles_, int kKeys_, int kMinBlocks_,
          Pipeline kPipeline_ = Pipeline::fa2, bool kSplitInSmem_ = true,
          bool kQInRegisters_ = false>
struct Tf32Config {
  static constexpr int D = D_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kRowTiles = kRowTiles_;
  static constexpr int kKeys = kKeys_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr Pipeline kPipeline = kPipeline_;
  static constexpr bool kSplitInSmem = kSplitInSmem_;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kRowTiles;
  static constexpr int kQueries = kWarps * kWarpRows;
  static constexpr int kTileElems = kKeys * D;  // one K or V tile, one plane
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(kKeys % 8 == 0, "whole 8-key blocks");
  static_assert(kPipeline != Pipeline::sync, "the fp32 kernel copies in the background");
};

// The shared memory of configuration C for a precision of kParts parts, in floats:
// K and V buffers first, [K0 | V0 | K1 | V1] (two_stage) or [K | V] (fa2), each of kPlanes
// planes (big, then small, when split in shared memory); then Q, raw fp32 (rounded in place
// for plain TF32). With Q in registers, Q is staged over the buffer written last (K1 or V),
// as in the 16-bit kernel.
template <class C, int kParts>
struct Tf32Smem {
  static constexpr int kPlanes = C::kSplitInSmem ? kParts : 1;
  static constexpr int kBufElems = kPlanes * C::kTileElems;
  static constexpr bool kTwoStage = C::kPipeline == Pipeline::two_stage;
  static constexpr int kBufferElems = (kTwoStage ? 4 : 2) * kBufElems;
  static constexpr int kQOffset =
      !C::kQInRegisters ? kBufferElems : kTwoStage ? 2 * kBufElems : kBufElems;
  static constexpr int kQElems = C::kQueries * C::D;
  static constexpr int kElems =
      kQOffset + kQElems > kBufferElems ? kQOffset + kQElems : kBufferElems;
  static constexpr int kBytes = 4 * kElems;
  static_assert(kBytes <= 227 * 1024, "fits one SM's shared memory");
};

// ---- Copies and the split in shared memory --------------------------------------------------

// Copies rows [0, kRows) of a head slice (row stride `ld` floats) into a swizzled shared tile;
// rows >= rows_valid and columns >= head_dim become zeros. Thread i owns chunk i % (D/4) of
// rows i / (D/4), + kThreads / (D/4), ...: consecutive threads, consecutive 16 bytes of a row.
// kVec: one 16-byte cp.async per chunk (rows 16-byte aligned, head_dim % 4 == 0); else four
// 4-byte ones (any stride). Either way the thread owns whole chunks: split_own_chunks below
// relies on it.
template <class C, int kRows, bool kVec>
__device__ __forceinline__ void load_tile_f32(float* tile, const float* __restrict__ g,
                                              int64_t ld, int rows_valid, int head_dim) {
  constexpr int kChunks = C::D / 4;
  constexpr int kRowStep = C::kThreads / kChunks;
  static_assert(C::kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole passes");
  const int c = int(threadIdx.x) % kChunks;
  const int r0 = int(threadIdx.x) / kChunks;
  const float* src = g + r0 * ld + c * 4;
  const int64_t step = kRowStep * ld;
#pragma unroll
  for (int n = 0; n < kRows / kRowStep; ++n, src += step) {
    const int r = r0 + n * kRowStep;
    float* dst = tile + tf32_offset<C::D>(r, c);
    if constexpr (kVec) {
      const bool ok = c * 4 < head_dim && r < rows_valid;
      device::cp_async_16(dst, ok ? src : g, ok);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ok = c * 4 + e < head_dim && r < rows_valid;
        device::cp_async_4(dst + e, ok ? src + e : g, ok);
      }
    }
  }
}

// Splits (3xTF32) or rounds (plain TF32) the chunks this thread copied with load_tile_f32<C,
// kRows>: part p of each element goes to plane p (plane_elems floats apart; part 0 over the
// fp32 value). After cp_async_wait a thread sees its own copies, so no barrier is needed
// before this; the barrier after it publishes the planes to every warp.
template <class Prec, class C, int kRows>
__device__ __forceinline__ void split_own_chunks(float* tile, int plane_elems) {
  constexpr int kChunks = C::D / 4;
  constexpr int kRowStep = C::kThreads / kChunks;
  const int c = int(threadIdx.x) % kChunks;
  const int r0 = int(threadIdx.x) / kChunks;
#pragma unroll
  for (int n = 0; n < kRows / kRowStep; ++n) {
    float* at = tile + tf32_offset<C::D>(r0 + n * kRowStep, c);
    const float4 x = *reinterpret_cast<const float4*>(at);
    uint32_t part[4][Prec::kParts];
    Prec::split(x.x, part[0]);
    Prec::split(x.y, part[1]);
    Prec::split(x.z, part[2]);
    Prec::split(x.w, part[3]);
#pragma unroll
    for (int p = 0; p < Prec::kParts; ++p)
      *reinterpret_cast<uint4*>(at + p * plane_elems) =
          make_uint4(part[0][p], part[1][p], part[2][p], part[3][p]);
  }
}

// One 16-byte chunk (4 consecutive floats of a tile row) as the parts the mma takes: read
// from the planes when the tile is split already (kSplit), else read raw and split here.
template <class Prec, bool kSplit>
__device__ __forceinline__ void load_parts(const float* at, int plane_elems,
                                           uint32_t (&v)[Prec::kParts][4]) {
  if constexpr (kSplit) {
#pragma unroll
    for (int p = 0; p < Prec::kParts; ++p) {
      const uint4 x = *reinterpret_cast<const uint4*>(at + p * plane_elems);
      v[p][0] = x.x, v[p][1] = x.y, v[p][2] = x.z, v[p][3] = x.w;
    }
  } else {
    const float4 x = *reinterpret_cast<const float4*>(at);
    const float e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t part[Prec::kParts];
      Prec::split(e[i], part);
#pragma unroll
      for (int p = 0; p < Prec::kParts; ++p) v[p][i] = part[p];
    }
  }
}

// ---- The warp's step ------------------------------------------------------------------------
// Per K/V tile a warp computes, for each of its kRowTiles 16-row tiles,
//   S (16 x kKeys) = Q K^T:  D/8 k-steps x kKeys/8 key blocks x Prec's mma (A = Q, B = K^T)
//   O (16 x D)    += P V:    kKeys/8 k-steps x D/8 column blocks x Prec's mma (A = P, B = V)
//
// Lane addresses. Lane (g, t) reads, with 16-byte loads:
//   Q: rows g and g + 8 of a row tile, floats 16j + 4t .. + 3 (k-step pair j);
//   K: row 8n + g (key block n), the same floats;
//   V: rows (keys) 8kk + 2t and 8kk + 2t + 1, floats 32G + 4g .. + 3 (column group G).
// Rows g and 8n + g share the swizzle of g, rows 8kk + 2t that of 2t (tf32_primitives.cuh).
template <class Prec, class C>
struct Tf32Step {
  static constexpr int P = Prec::kParts;
  static constexpr int MT = C::kRowTiles, BC = C::kKeys, D = C::D;

  // Offset (floats) of chunk 4j + t of row g (or of any row r = g mod 8) for j even (jj = 0)
  // and j odd (jj = 1): (4j + t) ^ s = 8 (j / 2) + ((4 (j % 2)) ^ t ^ s), s = swizzle_tf32(g),
  // so chunk 4j + t of that row is at 32 (j / 2) + lane_column(jj).
  static __device__ __forceinline__ int lane_column(int lane, int jj) {
    const int g = lane >> 2, t = lane & 3;
    return ((4 * (jj & 1)) ^ t ^ swizzle_tf32(g)) << 2;
  }

  // S += Q K^T. K's B operand of k-step 2j + ks, key block n: b0 = K[8n + g][k = t],
  // b1 = K[8n + g][k = t + 4]; with Q's column order (Tf32QFragments) those are floats
  // 16j + 4t + 2ks and + 1 of key 8n + g: entries 2ks and 2ks + 1 of one 16-byte load, which
  // feeds both k-steps of the pair and every row tile.
  template <class QFrags>
  static __device__ __forceinline__ void qk(float (&s)[MT][BC / 8][4], const QFrags& q,
                                            const float* sK, int plane_elems, int lane) {
    const int row = (lane >> 2) * D;
    const int col = lane_column(lane, 0);  // lane_column(lane, 1) = col ^ 16
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t a[MT][2][P][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) q.get(mt, j, a[mt]);
      const float* k_lane = sK + row + 32 * (j >> 1) + (col ^ ((j & 1) << 4));
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) {
        uint32_t x[P][4];
        load_parts<Prec, C::kSplitInSmem>(k_lane + 8 * n * D, plane_elems, x);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          uint32_t b[P][2];
#pragma unroll
          for (int p = 0; p < P; ++p) b[p][0] = x[p][2 * ks], b[p][1] = x[p][2 * ks + 1];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) Prec::products(s[mt][n], a[mt][ks], b);
        }
      }
    }
  }

  // O += P V. k-step kk is S's key block kk: lane (g, t) holds P[g][8kk + 2t, +1] (c0, c1) and
  // P[g + 8][...] (c2, c3), which become a0 (k = t), a2 (k = t + 4), a1, a3: k = t <-> key
  // 8kk + 2t, k = t + 4 <-> key 8kk + 2t + 1. So V's b0 = V[8kk + 2t][col], b1 = V[8kk + 2t +
  // 1][col]. The output columns are ordered for 16-byte loads of V: in column group G (32
  // columns), mma block n (0..3) takes column 32G + 4c + n as its column c, so lane g's two
  // 16-byte loads (rows 8kk + 2t and + 1, floats 32G + 4g .. + 3) give b0 and b1 of all four
  // blocks; the accumulators of block 4G + n then hold columns 32G + 8t + n (c0, c2) and
  // 32G + 8t + 4 + n (c1, c3) (the epilogue stores them there).
  static __device__ __forceinline__ void pv(float (&o)[MT][D / 8][4],
                                            const float (&s)[MT][BC / 8][4], const float* sV,
                                            int plane_elems, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const float* v_even = sV + 2 * t * D + ((g ^ swizzle_tf32(2 * t)) << 2);
    const float* v_odd = sV + (2 * t + 1) * D + ((g ^ swizzle_tf32(2 * t + 1)) << 2);
#pragma unroll
    for (int kk = 0; kk < BC / 8; ++kk) {
      uint32_t pa[MT][P][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float e[4] = {s[mt][kk][0], s[mt][kk][2], s[mt][kk][1], s[mt][kk][3]};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t part[P];
          Prec::split(e[i], part);
#pragma unroll
          for (int p = 0; p < P; ++p) pa[mt][p][i] = part[p];
        }
      }
#pragma unroll
      for (int G = 0; G < D / 32; ++G) {
        uint32_t x0[P][4], x1[P][4];
        load_parts<Prec, C::kSplitInSmem>(v_even + 8 * kk * D + 32 * G, plane_elems, x0);
        load_parts<Prec, C::kSplitInSmem>(v_odd + 8 * kk * D + 32 * G, plane_elems, x1);
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          uint32_t b[P][2];
#pragma unroll
          for (int p = 0; p < P; ++p) b[p][0] = x0[p][n], b[p][1] = x1[p][n];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) Prec::products(o[mt][4 * G + n], pa[mt], b);
        }
      }
    }
  }
};

// Q's A fragments, k-steps 2j and 2j + 1 of row tile mt: a[ks][part][0..3]. Lane (g, t) reads
// floats 16j + 4t .. + 3 of rows g (y) and g + 8 (z) of the row tile; k = t is column
// 16j + 4t + 2ks and k = t + 4 the next one (K's B fragments use the same order):
//   a0 = y[2ks]   a1 = z[2ks]   a2 = y[2ks + 1]   a3 = z[2ks + 1]
template <class Prec, class C, bool kSplit>
__device__ __forceinline__ void load_q_pair(const float* q_rows, int j, int lane,
                                            uint32_t (&a)[2][Prec::kParts][4]) {
  const float* at = q_rows + (lane >> 2) * C::D + 32 * (j >> 1) +
                    Tf32Step<Prec, C>::lane_column(lane, j & 1);
  uint32_t y[Prec::kParts][4], z[Prec::kParts][4];
  load_parts<Prec, kSplit>(at, 0, y);
  load_parts<Prec, kSplit>(at + 8 * C::D, 0, z);
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int p = 0; p < Prec::kParts; ++p) {
      a[ks][p][0] = y[p][2 * ks];
      a[ks][p][1] = z[p][2 * ks];
      a[ks][p][2] = y[p][2 * ks + 1];
      a[ks][p][3] = z[p][2 * ks + 1];
    }
}

// Where Tf32Step::qk gets Q's fragments: q.get(mt, j, a). In registers: split once.
template <class Prec, class C, bool kInRegisters = C::kQInRegisters>
struct Tf32QFragments {
  uint32_t f[C::kRowTiles][C::D / 16][2][Prec::kParts][4];
  __device__ __forceinline__ void load(const float* sQ_warp, int lane) {
#pragma unroll
    for (int mt = 0; mt < C::kRowTiles; ++mt)
#pragma unroll
      for (int j = 0; j < C::D / 16; ++j)
        load_q_pair<Prec, C, false>(sQ_warp + 16 * mt * C::D, j, lane, f[mt][j]);
  }
  __device__ __forceinline__ void get(int mt, int j,
                                      uint32_t (&a)[2][Prec::kParts][4]) const {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int p = 0; p < Prec::kParts; ++p)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[ks][p][i] = f[mt][j][ks][p][i];
  }
};
// Re-read from the shared Q tile at every use, split there (3xTF32) or rounded in place
// beforehand (plain TF32: kQRounded).
template <class Prec, class C>
struct Tf32QFragments<Prec, C, false> {
  static constexpr bool kQRounded = Prec::kParts == 1;
  const float* rows;
  int lane;
  __device__ __forceinline__ void load(const float* sQ_warp, int lane_) {
    rows = sQ_warp, lane = lane_;
  }
  __device__ __forceinline__ void get(int mt, int j,
                                      uint32_t (&a)[2][Prec::kParts][4]) const {
    load_q_pair<Prec, C, kQRounded>(rows + 16 * mt * C::D, j, lane, a);
  }
};

// ---- The kernel -----------------------------------------------------------------------------

template <class Prec, class C, bool kCausal, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_tf32_kernel(Problem p, float scale_log2, int query_blocks, const float* __restrict__ q,
                      const float* __restrict__ k, const float* __restrict__ v,
                      float* __restrict__ o) {
  using Smem = Tf32Smem<C, Prec::kParts>;
  using Step = Tf32Step<Prec, C>;
  constexpr int MT = C::kRowTiles, BC = C::kKeys, D = C::D;
  constexpr bool kQRoundedInPlace = Prec::kParts == 1 && !C::kQInRegisters;
  // The plane stride of K and V buffers (split in shared memory) and the buffer stride.
  constexpr int kPlane = C::kTileElems;
  constexpr int kBuf = Smem::kBufElems;
  extern __shared__ __align__(128) float smem_f32[];
  float* const q_tile = smem_f32 + Smem::kQOffset;

  const int lane = int(threadIdx.x) % 32;
  const int warp = int(threadIdx.x) / 32;

  // One flat grid, heaviest query blocks first, heads fastest (as the 16-bit kernel).
  const unsigned bh_count = unsigned(p.batch) * unsigned(p.heads);
  const int query_block = query_blocks - 1 - int(blockIdx.x / bh_count);
  const int bh = int(blockIdx.x % bh_count);
  const int b = bh / p.heads, h = bh % p.heads, kvh = p.kv_head(h);
  const int q0 = query_block * C::kQueries;


  const int q_last = min(q0 + C::kQueries, p.seq_q) - 1;
  const int tiles = (visible_end<kCausal>(p, q_last) + BC - 1) / BC;  // 0: sees no key
  const int warp_q0 = q0 + warp * C::kWarpRows;
  const int warp_end =
      warp_q0 < p.seq_q ? visible_end<kCausal>(p, min(warp_q0 + C::kWarpRows, p.seq_q) - 1) : 0;
  const int warp_full = visible_end<kCausal>(p, warp_q0);

  // Lane (g, t) holds rows g and g + 8 of each row tile. Registers are the scarce resource
  // here (O takes 128 of them at D = 128): what the loop needs rarely (the mask's row ends,
  // the K/V head's address) is recomputed where it is used rather than kept.
  const int row_base = warp_q0 + lane / 4;

  float acc[MT][D / 8][4];  // O, unnormalized; columns ordered as Tf32Step::pv says
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  auto load_k = [&](float* dst, int t) {
    load_tile_f32<C, BC, kVec>(dst, k + Problem::offset(p.k, b, kvh, t * BC),
                               p.k.seq, p.seq_k - t * BC, p.head_dim);
  };
  auto load_v = [&](float* dst, int t) {
    load_tile_f32<C, BC, kVec>(dst, v + Problem::offset(p.v, b, kvh, t * BC),
                               p.v.seq, p.seq_k - t * BC, p.head_dim);
  };
  // After this thread's wait: its own chunks of a K or V buffer split into the buffer's planes.
  auto split_kv = [&](float* buf) {
    if constexpr (C::kSplitInSmem) split_own_chunks<Prec, C, BC>(buf, kPlane);
  };
  auto split_q = [&] {
    if constexpr (kQRoundedInPlace) split_own_chunks<Prec, C, C::kQueries>(q_tile, 0);
  };
  Tf32QFragments<Prec, C> qf;
  const float* const q_warp = q_tile + warp * C::kWarpRows * D;

  // One K/V tile of math for this warp; `middle` runs between the softmax and P V (fa2: wait
  // for V, split it, barrier, copy the next K), for every warp, active or not.
  auto tile_math = [&](int t, const float* sK, const float* sV, auto&& middle) {
    const int key0 = t * BC;
    const bool active = key0 < warp_end;  // the same for the whole warp
    float s[MT][BC / 8][4];
    if (active) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      Step::qk(s, qf, sK, kPlane, lane);
      if (key0 + BC > warp_full) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int row_end[2] = {visible_end<kCausal>(p, row_base + 16 * mt),
                                  visible_end<kCausal>(p, row_base + 16 * mt + 8)};
          apply_mask<C>(s[mt], key0, row_end, lane);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) online_softmax<C>(s[mt], m[mt], l[mt], acc[mt], scale_log2);
    }
    middle();
    if (active) Step::pv(acc, s, sV, kPlane, lane);
  };

  if constexpr (C::kPipeline == Pipeline::fa2) {
    // Groups in flight, in order: Q + K(0), then per tile V(t) and K(t + 1).
    float* const k_buf = smem_f32;
    float* const v_buf = smem_f32 + kBuf;
    load_tile_f32<C, C::kQueries, kVec>(q_tile, q + Problem::offset(p.q, b, h, q0), p.q.seq,
                                        p.seq_q - q0, p.head_dim);
    if (tiles > 0) load_k(k_buf, 0);
    device::cp_async_commit();
    if constexpr (C::kQInRegisters) {  // Q is staged in the V buffer: into registers first
      device::cp_async_wait<0>();
      __syncthreads();
      qf.load(q_warp, lane);
    } else {
      qf.load(q_warp, lane);
    }
    for (int t = 0; t < tiles; ++t) {
      device::cp_async_wait<0>();  // K(t) (and at first Q) has landed: this thread's copies
      if (t == 0) split_q();
      split_kv(k_buf);
      __syncthreads();  // everyone's, split; everyone is done with V(t - 1) and the staged Q
      load_v(v_buf, t);
      device::cp_async_commit();
      tile_math(t, k_buf, v_buf, [&] {
        device::cp_async_wait<0>();  // V(t) has landed ...
        split_kv(v_buf);
        __syncthreads();  // ... everyone's, split; everyone is done with K(t)
        if (t + 1 < tiles) load_k(k_buf, t + 1);
        device::cp_async_commit();
      });
    }
  } else {  // two_stage: tile t + 1 copied (and split by its copiers) during tile t
    load_tile_f32<C, C::kQueries, kVec>(q_tile, q + Problem::offset(p.q, b, h, q0), p.q.seq,
                                        p.seq_q - q0, p.head_dim);
    if (tiles > 0) {
      load_k(smem_f32, 0);
      load_v(smem_f32 + kBuf, 0);
    }
    device::cp_async_commit();
    device::cp_async_wait<0>();
    split_q();
    if (tiles > 0) {
      split_kv(smem_f32);
      split_kv(smem_f32 + kBuf);
    }
    __syncthreads();
    qf.load(q_warp, lane);
    if constexpr (C::kQInRegisters) __syncthreads();  // Q is in registers: stage 1 is free
    for (int t = 0; t < tiles; ++t) {
      float* const next = smem_f32 + ((t & 1) ^ 1) * 2 * kBuf;
      if (t + 1 < tiles) {
        load_k(next, t + 1);
        load_v(next + kBuf, t + 1);
      }
      device::cp_async_commit();
      const float* sK = smem_f32 + (t & 1) * 2 * kBuf;
      tile_math(t, sK, sK + kBuf, [] {});
      device::cp_async_wait<0>();  // tile t + 1 has landed (own copies): split them
      if (t + 1 < tiles) {
        split_kv(next);
        split_kv(next + kBuf);
      }
      __syncthreads();  // ... everyone's; and nobody reads stage t any more
    }
  }
  device::cp_async_wait<0>();  // a block that visits no tile still has its Q copy in flight

  // Epilogue: l summed over the quad, O / l stored straight from the registers. Lane (g, t)
  // holds, for rows g and g + 8 of each row tile and each 32-column group G, the 8 columns
  // 32G + 8t .. + 7 (Tf32Step::pv): two 16-byte stores per row and group.
  const int t4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = device::group_sum<4>(l[mt][r]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;  // a row that saw no key: 0, not 0/0
      const int row = row_base + 16 * mt + 8 * r;
      if (row >= p.seq_q) continue;
      float* dst_row = o + Problem::offset(p.o, b, h, row);
#pragma unroll
      for (int G = 0; G < D / 32; ++G)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int col = 32 * G + 8 * t4 + 4 * half;
          const float x[4] = {acc[mt][4 * G][2 * r + half] * inv,
                              acc[mt][4 * G + 1][2 * r + half] * inv,
                              acc[mt][4 * G + 2][2 * r + half] * inv,
                              acc[mt][4 * G + 3][2 * r + half] * inv};
          if constexpr (kVec) {
            if (col < p.head_dim)
              *reinterpret_cast<float4*>(dst_row + col) = make_float4(x[0], x[1], x[2], x[3]);
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (col + e < p.head_dim) dst_row[col + e] = x[e];
          }
        }
    }
  }
}

// Launches one configuration for p.causal; 16-byte copies and stores when every row of Q, K,
// V and O starts on a 16-byte boundary and head_dim % 4 == 0.
template <class Prec, class C>
Status launch_tf32_config(const Problem& p, const float* q, const float* k, const float* v,
                          float* o, cudaStream_t stream) {
  using Smem = Tf32Smem<C, Prec::kParts>;
  if (Status s = require_sm80("module 07"); !s) return s;  // common/device.h
  if (p.dtype != DType::f32)
    return Status::error("module 07's TF32 kernels take f32 tensors, not " +
                         std::string(dtype_name(p.dtype)));
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 07: more than 2^31 - 1 blocks");
  const bool vec = p.head_dim % 4 == 0 && rows_aligned16(q, p.q) && rows_aligned16(k, p.k) &&
                   rows_aligned16(v, p.v) && rows_aligned16(o, p.o);
  const float scale_log2 = p.softmax_scale() * kLog2e;
  using Kernel = void (*)(Problem, float, int, const float*, const float*, const float*, float*);
  // [causal][vec]
  static const Kernel kernels[2][2] = {
      {flash_tf32_kernel<Prec, C, false, false>, flash_tf32_kernel<Prec, C, false, true>},
      {flash_tf32_kernel<Prec, C, true, false>, flash_tf32_kernel<Prec, C, true, true>}};
  const cudaError_t opt_in = device::allow_shared_memory(
      Smem::kBytes, kernels[0][0], kernels[0][1], kernels[1][0], kernels[1][1]);
  ATTN_CUDA_RETURN(opt_in);
  kernels[p.causal ? 1 : 0][vec ? 1 : 0]<<<unsigned(blocks), C::kThreads, Smem::kBytes, stream>>>(
      p, scale_log2, int(query_blocks), q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

template <class Prec, class C64, class C128>
Status launch_tf32_for_head_dim(const Problem& p, const float* q, const float* k,
                                const float* v, float* o, cudaStream_t stream) {
  static_assert(C64::D == 64 && C128::D == 128, "one configuration per compiled head dim");
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) {
    using C = std::conditional_t<decltype(d)::value == 64, C64, C128>;
    return launch_tf32_config<Prec, C>(p, q, k, v, o, stream);
  });
}

// The production configurations (README, section 10): K and V double-buffered (tile t + 1
// copied during tile t, one barrier per tile), 32 query rows per warp (every K and V fragment
// feeds two row tiles), Q re-read from shared memory (with two row tiles, Q's big and small
// fragments would take 128 registers at D = 64). The key tiles are as long as the registers
// allow without spills: S takes kKeys / 2 of them, O D / 2, Q's fragments 32 while Q K^T runs.
// 3xTF32 splits K and V at each fragment load (kSplitInSmem = false): in bench_07's ladder it
// ran 4-7% faster at every shape than splitting them once per tile into two shared planes
// (the `3xtf32_smem_split` rung). Plain TF32 rounds them once per tile in shared memory.
// D = 64:  4 warps (128 queries), 32-key tiles: Q 32 KiB + 2 stages x K, V x 8 KiB = 64 KiB
//          (3xTF32; plain TF32 the same), 2 blocks per SM (the registers allow 2).
// D = 128: 8 warps (256 queries), 16-key tiles: Q 128 KiB + 2 stages x K, V x 8 KiB = 160 KiB,
//          1 block per SM (8 warps, as 2 blocks of 4 would have).
template <class Prec>
using Tf32Config64 = Tf32Config<64, 4, 2, 32, 2, Pipeline::two_stage, Prec::kParts == 1, false>;
template <class Prec>
using Tf32Config128 =
    Tf32Config<128, 8, 2, 16, 1, Pipeline::two_stage, Prec::kParts == 1, false>;
// For GPUs whose blocks get less shared memory than Tf32Config128 needs (an sm_86 or
// sm_89 part): 4 warps, 96 KiB. 3xTF32 with one K and one V buffer (FlashAttention-2's copy
// order: two planes each); plain TF32, whose tiles are one plane, double-buffered.
template <class Prec>
using Tf32Config128Compact =
    std::conditional_t<Prec::kParts == 1, Tf32Config<128, 4, 2, 16, 2, Pipeline::two_stage>,
                       Tf32Config<128, 4, 2, 16, 2, Pipeline::fa2>>;

// The most shared memory a block of the current device may opt into, in bytes (0 if unknown).
inline int max_shared_memory_per_block() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess)
    return 0;
  return bytes;
}

// forward_3xtf32() and forward_tf32() of the exercise and the solution.
template <class Prec>
Status launch_fp32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                   cudaStream_t stream) {
  if (p.head_dim > 64 &&
      max_shared_memory_per_block() < Tf32Smem<Tf32Config128<Prec>, Prec::kParts>::kBytes)
    return launch_tf32_for_head_dim<Prec, Tf32Config64<Prec>, Tf32Config128Compact<Prec>>(
        p, q, k, v, o, stream);
  return launch_tf32_for_head_dim<Prec, Tf32Config64<Prec>, Tf32Config128<Prec>>(p, q, k, v, o,
                                                                                stream);
}

}  // namespace attn::m07

// The fp32 entry points of tensor_cores.h, defined in the namespace of the exercise or the
// solution (after tensor_cores.h) over its Split: 3xTF32 with it, plain TF32 without.
#define ATTN_M07_FP32_FORWARDS(Split)                                                        \
  Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v,   \
                        float* o, cudaStream_t stream) {                                    \
    if (Status s = supports(p); !s) return s;                                               \
    return launch_fp32<Tf32x3<Split>>(p, q, k, v, o, stream);                               \
  }                                                                                         \
  Status forward_tf32(const Problem& p, const float* q, const float* k, const float* v,     \
                      float* o, cudaStream_t stream) {                                      \
    if (Status s = supports(p); !s) return s;                                               \
    return launch_fp32<Tf32>(p, q, k, v, o, stream);                                        \
  }
