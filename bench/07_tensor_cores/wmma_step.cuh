// Module 07, first rung of the ladder: FlashAttention forward on the tensor cores through WMMA
// (nvcuda::wmma), the simplest tensor-core API. This is the "before" picture of the lesson:
// correct, and a real step up from module 06's fp32 FMAs, but it leaves a lot on the table,
// and the reasons why are exactly what the next rungs (mma.sync, ldmatrix, cp.async) fix.
//
// WMMA in one paragraph. A warp multiplies 16x16 tiles: D = A B + C, A 16x16 (16 rows x 16
// k), B 16x16 (16 k x 16 columns), C and D 16x16 fp32 accumulators (the "m16n16k16" shape).
// A and B are fp16 or bf16. The three steps are warp-wide calls:
//   wmma::load_matrix_sync(frag, ptr, ld)    32 lanes read a 16x16 tile (row stride ld) into
//                                            registers, each lane holding some 8-16 elements;
//   wmma::mma_sync(d, a, b, c)               the tensor cores multiply;
//   wmma::store_matrix_sync(ptr, acc, ld, layout)   the accumulator goes back to memory.
// Which lane holds which element of a fragment is unspecified ("opaque"): that is the whole
// point of the API (portable across GPU generations) and its whole cost here. The softmax needs
// the max and the sum of each *row* of S, and with an opaque layout a lane cannot know which
// rows its registers belong to. So every S tile makes a round trip through shared memory:
// store_matrix_sync, then ordinary code that knows where row r is. mma.sync (the next rung)
// documents its layout, so the softmax runs on the accumulator registers and this round trip,
// and the one for O below, disappear.
//
// Work split. A block of 4 warps owns 64 consecutive queries of one (batch, head); warp w owns
// rows 16w .. 16w + 15, i.e. one 16-row strip of every tile. Per K/V tile of 64 keys:
//
//   1. the block copies K and V (64 keys x D) into shared memory      (synchronous loads)
//   2. S = Q K^T   per warp: 16 rows x 64 keys = 4 accumulator tiles, D/16 k-steps each;
//                  Q's fragments stay in registers for the whole loop
//   3. S -> shared memory (store_matrix_sync), fp32, the warp's own 16 x 64 strip
//   4. online softmax in shared memory: 2 lanes per row, 32 scores each; P -> shared (as T)
//   5. O's 16 rows rescaled by alpha in shared memory, then O += P V with wmma: each 16x16
//      tile of O is loaded as an accumulator, gets 4 k-steps (64 keys) of P V, and is stored
//
// Where O lives. O could stay in accumulator fragments (registers) across key tiles, but the
// rescale by alpha is per row, and the layout is opaque: O would have to be stored, scaled and
// reloaded on every tile anyway. So O lives in shared memory, fp32, [64 x D] per block, and
// each tile loads a 16x16 piece into an accumulator, multiplies into it, and stores it back:
// the same shared-memory traffic as store/scale/reload, one home for O instead of two, and no
// D/2 registers per lane of long-lived accumulators. (With mma.sync, whose layout is
// documented, O stays in registers and is rescaled there.)
//
// Shared memory per block (T = 2 bytes; "+8" is the padding, see "Bank conflicts"):
//   Q, K, V  [64][D + 8] T each          D = 64: 27 KiB   D = 128: 51 KiB
//   S        [4 warps][16][64 + 8] float 18 KiB
//   P        [4 warps][16][64 + 8] T      9 KiB
//   O        [64][D + 8] float           D = 64: 18 KiB   D = 128: 34 KiB
//   1/l      [64] float
// about 72 KiB (D = 64: 3 blocks per SM) or 112 KiB (D = 128: 2 blocks per SM).
//
// Bank conflicts (32 banks of 4 bytes; a row of D = 64 or 128 16-bit elements is 128 or 256
// bytes, a whole number of bank rounds). A 16x16 fragment load reads 8 rows of 16 bytes at a
// time; with unpadded rows all 8 start in the same bank: 8-way conflicts on every Q, K, V
// and P fragment load. Padding every row by 8 elements (16 bytes of T, 32 bytes of float)
// shifts row r by 4r (T) or 8r (float) banks, so 8 consecutive rows of 16 bytes cover all 32
// banks, and the fp32 S and O tiles (stored and loaded as 8-byte pairs, 4 rows per half-warp)
// do the same. The softmax lanes read S in 16-byte chunks interleaved between the two lanes of
// a row (chunk 2i + half): 4 rows x 2 halves per quarter-warp land on 8 different groups of 4
// banks. What is *not* fixed: the padding wastes 6-12% of shared memory, and every tile still
// pays S out and back, P out and back, O in and out. mma.sync (the softmax on the
// accumulators, P handed to P V in registers) removes the round trips, and an XOR swizzle of
// the shared tiles replaces the padding.
//
// Also the "before" part: K and V are copied with ordinary loads, so each warp waits for the
// copy before it can compute (other blocks on the SM hide some of it); cp.async (a later
// rung) copies the next tile while this one is computed. And one compiler detail: bf16
// fragments need a hand-written load to get ldmatrix (load_fragment below says why).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device/shared_memory.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"

// bf16 WMMA needs sm_80 (Ampere). The course also builds for sm_75: there the kernel body
// compiles to nothing, and forward() refuses to launch on a GPU older than sm_80, with one line.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ATTN_WMMA_STEP_HAS_SM80 1
#else
#define ATTN_WMMA_STEP_HAS_SM80 0
#endif

namespace attn::m07::wmma_step {

namespace detail {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kQueries = 16 * kWarps;  // 64 queries per block: one 16-row strip per warp
constexpr int kKeys = 64;              // keys per K/V tile
constexpr int kPad = 8;                // elements added to every shared row (bank conflicts)

// Shared-memory layout for the padded head dim D (64 or 128; head_dim <= D, the padding
// columns are zeros, which add nothing to Q K^T and produce O columns nobody stores).
template <int D>
struct SmemLayout {
  static constexpr int kRow = D + kPad;       // Q, K, V rows (T) and O rows (float)
  static constexpr int kSRow = kKeys + kPad;  // S rows (float) and P rows (T)
  // Byte offsets of the regions; every one is a multiple of 32 bytes, which WMMA needs for
  // the pointers it is given (and every 16-row / 16-column tile start stays one too).
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + 2 * kQueries * kRow;
  static constexpr int kV = kK + 2 * kKeys * kRow;
  static constexpr int kS = kV + 2 * kKeys * kRow;
  static constexpr int kP = kS + 4 * kQueries * kSRow;
  static constexpr int kO = kP + 2 * kQueries * kSRow;
  static constexpr int kInvL = kO + 4 * kQueries * kRow;
  static constexpr int kBytes = kInvL + 4 * kQueries;
  static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0,
                "WMMA pointers must be 32-byte aligned");
  static_assert(kBytes <= 227 * 1024, "fits one SM's shared memory");
};

// float -> 16-bit pattern of T, rounded to nearest even (what the tensor cores will read).
template <class T>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half_as_ushort(__float2half_rn(x));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return uint32_t(to_bits<T>(lo)) | uint32_t(to_bits<T>(hi)) << 16;
}

// Loads a 16-bit A or B fragment (16x16, row stride ld elements) from shared memory.
// __half: wmma::load_matrix_sync. nvcc sees that the pointer points into shared memory and
// emits ldmatrix (SASS LDSM: one instruction moves the lane's whole fragment).
// __nv_bfloat16: the same call compiles (CUDA 13.0) to a *generic* load
// (wmma.load without .shared): 8 separate 32-bit LD instructions per fragment per lane plus
// transposing register moves (MOVM), as cuobjdump -sass shows. So for bf16 we issue the PTX
// instruction the C++ header wraps, wmma.load, with the .shared state space spelled out;
// ptxas turns it into ldmatrix again. It fills the fragment's 4 registers exactly as the header
// would (PTX ISA: a bf16 a/b fragment of m16n16k16 is 4 .b32 registers of two bf16 each),
// so the fragment stays as opaque as before. (Define ATTN_WMMA_BF16_HEADER_LOADS to use the
// header's loads for bf16 too and measure the difference.) The "memory" clobber keeps the
// compiler from moving the load across the shared-memory stores and barriers before it.
template <class Frag, class T>
__device__ __forceinline__ void load_fragment(Frag& f, const T* smem_ptr, unsigned ld) {
#ifndef ATTN_WMMA_BF16_HEADER_LOADS
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    static_assert(sizeof(f.x) == 16, "a bf16 m16n16k16 A/B fragment is 4 registers");
    uint32_t* r = reinterpret_cast<uint32_t*>(f.x);
    const unsigned addr = unsigned(__cvta_generic_to_shared(smem_ptr));
    if constexpr (std::is_same_v<Frag, wmma::fragment<wmma::matrix_a, 16, 16, 16, T,
                                                      wmma::row_major>>)
      asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16"
                   " {%0, %1, %2, %3}, [%4], %5;\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(addr), "r"(ld)
                   : "memory");
    else if constexpr (std::is_same_v<Frag, wmma::fragment<wmma::matrix_b, 16, 16, 16, T,
                                                           wmma::col_major>>)
      asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16"
                   " {%0, %1, %2, %3}, [%4], %5;\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(addr), "r"(ld)
                   : "memory");
    else {
      static_assert(std::is_same_v<Frag, wmma::fragment<wmma::matrix_b, 16, 16, 16, T,
                                                        wmma::row_major>>,
                    "A row-major, B col-major or B row-major");
      asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16"
                   " {%0, %1, %2, %3}, [%4], %5;\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(addr), "r"(ld)
                   : "memory");
    }
    return;
  }
#endif
  wmma::load_matrix_sync(f, smem_ptr, ld);
}

// The first key query i does not see, clamped to [0, seq_k]: seq_k without the mask; with it,
// bottom-right aligned (Problem::first_masked_key, which is host code): keys j <= i + seq_k -
// seq_q. 0: the query sees no key at all (causal with seq_q > seq_k).
__device__ __forceinline__ int visible_end(const Problem& p, int i) {
  if (!p.causal) return p.seq_k;
  const int64_t end = int64_t(i) + (p.seq_k - p.seq_q) + 1;
  return int(end < 0 ? 0 : end > p.seq_k ? p.seq_k : end);
}

// Copies kRows rows of a head slice (`g` points at the first, row stride `ld` elements) into
// a shared tile of kRow-element rows. Rows >= rows_valid and columns >= head_dim become zeros:
// zero keys give score 0 (then masked), zero V rows keep 0 * garbage = NaN out of O, zero
// columns add nothing to a dot product. Thread i copies 8-element chunk i % (D/8) of rows
// i / (D/8), + kThreads / (D/8), ...: consecutive threads read consecutive 16 bytes of a row
// (coalesced) and write consecutive 16 bytes of a shared row (no bank conflict).
// kVec: one 16-byte load per chunk (rows 16-byte aligned and head_dim % 8 == 0); else
// element by element (any alignment, any head_dim). All loads of a thread are issued before
// its stores, so they are in flight together.
template <int D, int kRows, bool kVec>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* __restrict__ g,
                                          int64_t ld, int rows_valid, int head_dim) {
  constexpr int kChunks = D / 8;
  constexpr int kRowStep = kThreads / kChunks;
  constexpr int kPasses = kRows / kRowStep;
  static_assert(kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole passes");
  const int c = int(threadIdx.x) % kChunks;
  const int r0 = int(threadIdx.x) / kChunks;
  uint4 x[kPasses];
#pragma unroll
  for (int n = 0; n < kPasses; ++n) {
    const int r = r0 + n * kRowStep;
    if constexpr (kVec) {
      x[n] = r < rows_valid && c * 8 < head_dim
                 ? *reinterpret_cast<const uint4*>(g + r * ld + c * 8)
                 : make_uint4(0u, 0u, 0u, 0u);
    } else {
      uint16_t e[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        e[j] = r < rows_valid && c * 8 + j < head_dim ? g[r * ld + c * 8 + j] : uint16_t(0);
      x[n] = make_uint4(e[0] | uint32_t(e[1]) << 16, e[2] | uint32_t(e[3]) << 16,
                        e[4] | uint32_t(e[5]) << 16, e[6] | uint32_t(e[7]) << 16);
    }
  }
#pragma unroll
  for (int n = 0; n < kPasses; ++n)
    *reinterpret_cast<uint4*>(tile + (r0 + n * kRowStep) * (D + kPad) + c * 8) = x[n];
}

template <class T, int D, bool kVec>
__global__ void __launch_bounds__(kThreads)
    wmma_forward_kernel(Problem p, float scale_log2, int query_blocks,
                        const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                        const uint16_t* __restrict__ v, uint16_t* __restrict__ o) {
#if ATTN_WMMA_STEP_HAS_SM80
  using L = SmemLayout<D>;
  constexpr int kRow = L::kRow, kSRow = L::kSRow;
  // The fragment types. m16n16k16 for every product:
  //   S = Q K^T: A = Q[16 rows][16 d], row-major; B = K^T[16 d][16 keys]. K is stored
  //              [key][d], which read as a matrix with d as the row index is K^T stored
  //              column-major: no transpose needed, just col_major.
  //   O += P V:  A = P[16 rows][16 keys], row-major; B = V[16 keys][16 d], row-major as stored.
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
  using FragKt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
  using FragV = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
  using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* const sQ = reinterpret_cast<uint16_t*>(smem + L::kQ);
  uint16_t* const sK = reinterpret_cast<uint16_t*>(smem + L::kK);
  uint16_t* const sV = reinterpret_cast<uint16_t*>(smem + L::kV);
  float* const sO = reinterpret_cast<float*>(smem + L::kO);
  float* const sInvL = reinterpret_cast<float*>(smem + L::kInvL);

  const int lane = int(threadIdx.x) % 32;
  const int warp = int(threadIdx.x) / 32;
  // The warp's private strips: its 16 rows of S (fp32), P (T) and O (fp32).
  float* const sS = reinterpret_cast<float*>(smem + L::kS) + warp * 16 * kSRow;
  uint16_t* const sP = reinterpret_cast<uint16_t*>(smem + L::kP) + warp * 16 * kSRow;
  float* const sOw = sO + warp * 16 * kRow;

  // One flat grid over (query block, batch x head), batch x head fastest: grid.x takes up to
  // 2^31 - 1 blocks where grid.y/z stop at 65535. Query blocks are handed out last first:
  // with the causal mask the last block visits the most keys, so the heaviest blocks start
  // first and the light ones fill the tail (as in the module's main kernel).
  const int bh_count = p.batch * p.heads;
  const int query_block = query_blocks - 1 - int(blockIdx.x / unsigned(bh_count));
  const int bh = int(blockIdx.x % unsigned(bh_count));
  const int b = bh / p.heads, h = bh % p.heads;
  const int q0 = query_block * kQueries;

  const uint16_t* q_head = q + Problem::offset(p.q, b, h, q0);
  const uint16_t* k_head = k + Problem::offset(p.k, b, p.kv_head(h), 0);  // GQA: shared K/V
  const uint16_t* v_head = v + Problem::offset(p.v, b, p.kv_head(h), 0);

  // The key tiles this block visits: up to the last key its last query sees (causal: the
  // tiles past the diagonal are skipped outright). Keys below kv_full are seen by every query
  // of the block: those tiles need no mask.
  const int q_last = min(q0 + kQueries, p.seq_q) - 1;
  const int tiles = (visible_end(p, q_last) + kKeys - 1) / kKeys;  // 0: no query sees a key
  const int kv_full = visible_end(p, q0);

  // Softmax lanes: two per row. Lane (row, half) owns row `row` of the warp's strip and the
  // 16-byte chunks half, half + 2, ..., of it (interleaved so that a quarter-warp's 16-byte
  // accesses, 4 rows x 2 halves, hit 8 different bank groups).
  const int row = lane / 2, half = lane % 2;
  // The first key this lane's row does not see (rows past seq_q: any value, never stored).
  const int row_end = visible_end(p, min(q0 + 16 * warp + row, p.seq_q - 1));

  // Prologue: Q into shared memory, O zeroed, then each warp's Q fragments into registers,
  // where they stay for every key tile (Q is the one operand that never changes).
  load_tile<D, kQueries, kVec>(sQ, q_head, p.q.seq, p.seq_q - q0, p.head_dim);
  for (int i = int(threadIdx.x); i < kQueries * kRow / 4; i += kThreads)
    reinterpret_cast<float4*>(sO)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  __syncthreads();
  FragA qf[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    load_fragment(qf[kk], reinterpret_cast<const T*>(sQ) + 16 * warp * kRow + 16 * kk, kRow);

  float m = -INFINITY;  // running max of the row, base-2 units (scores times scale * log2 e)
  float l = 0.0f;       // running sum of this lane's half of the row (the pair adds at the end)

  for (int t = 0; t < tiles; ++t) {
    const int key0 = t * kKeys;
    // 1. K and V tile t. The barrier before: every warp is done with tile t - 1.
    __syncthreads();
    load_tile<D, kKeys, kVec>(sK, k_head + int64_t(key0) * p.k.seq, p.k.seq, p.seq_k - key0,
                              p.head_dim);
    load_tile<D, kKeys, kVec>(sV, v_head + int64_t(key0) * p.v.seq, p.v.seq, p.seq_k - key0,
                              p.head_dim);
    __syncthreads();

    // 2. S = Q K^T for the warp's 16 rows x 64 keys: 4 accumulator tiles of 16 keys, each
    //    the sum of D/16 products (k-steps over the head dim).
    // 3. ... and out to shared memory, the only place where we can find S's rows.
#pragma unroll
    for (int n = 0; n < kKeys / 16; ++n) {
      FragAcc s;
      wmma::fill_fragment(s, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        FragKt kt;  // K[keys 16n .. 16n+15][d 16kk .. 16kk+15], read as K^T column-major
        load_fragment(kt, reinterpret_cast<const T*>(sK) + 16 * n * kRow + 16 * kk, kRow);
        wmma::mma_sync(s, qf[kk], kt, s);
      }
      wmma::store_matrix_sync(sS + 16 * n, s, kSRow, wmma::mem_row_major);
    }
    __syncwarp();  // the strip is the warp's own: a warp barrier orders its writes and reads

    // 4. Online softmax (module 03, section 1), base 2: with x = scale * log2(e) * s,
    //    exp(scale * s - max) = 2^(x - max_x). This lane: 32 scores of its row.
    float x[8][4];
    const float* s_row = sS + row * kSRow;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 c = *reinterpret_cast<const float4*>(s_row + 4 * (2 * i + half));
      x[i][0] = c.x * scale_log2;
      x[i][1] = c.y * scale_log2;
      x[i][2] = c.z * scale_log2;
      x[i][3] = c.w * scale_log2;
    }
    // Only tiles that cross seq_k or the causal diagonal need the mask. The test is the same
    // for the whole block, so the branch does not diverge.
    if (key0 + kKeys > kv_full) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 4 * (2 * i + half) + e >= row_end) x[i][e] = -INFINITY;
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      tile_max = fmaxf(tile_max, fmaxf(fmaxf(x[i][0], x[i][1]), fmaxf(x[i][2], x[i][3])));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));  // the other half
    const float m_new = fmaxf(m, tile_max);
    // A row that has seen only masked keys so far keeps m = -inf: measure from 0 instead, so
    // p = 2^-inf = 0 and alpha = 0, never 2^(-inf - -inf) = NaN (module 04, section 4).
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - m_ref);  // rescales what O and l hold so far
    m = m_new;
    l *= alpha;
    uint16_t* p_row = sP + row * kSRow;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float pe[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pe[e] = exp2f(x[i][e] - m_ref);
        l += pe[e];
      }
      // P as T: the tensor cores take 16-bit operands. (l sums the fp32 values.)
      *reinterpret_cast<uint2*>(p_row + 4 * (2 * i + half)) =
          make_uint2(pack2<T>(pe[0], pe[1]), pack2<T>(pe[2], pe[3]));
    }
    // 5a. O's row times alpha, in shared memory (same interleaved chunks as S). alpha == 1
    //     (the max did not move, the common case late in a row) skips it.
    if (alpha != 1.0f) {
      float* o_row = sOw + row * kRow;
#pragma unroll
      for (int i = half; i < D / 4; i += 2) {
        float4 c = *reinterpret_cast<float4*>(o_row + 4 * i);
        c.x *= alpha;
        c.y *= alpha;
        c.z *= alpha;
        c.w *= alpha;
        *reinterpret_cast<float4*>(o_row + 4 * i) = c;
      }
    }
    __syncwarp();  // P and the rescaled O are written: the warp's fragment loads may read them

    // 5b. O += P V: for each 16-column tile of O, load it as an accumulator, add 4 k-steps
    //     (16 keys each) of P V, store it back. P's 4 fragments are loaded once per tile.
    FragA pf[kKeys / 16];
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      load_fragment(pf[kk], reinterpret_cast<const T*>(sP) + 16 * kk, kSRow);
#pragma unroll
    for (int nd = 0; nd < D / 16; ++nd) {
      FragAcc acc;
      wmma::load_matrix_sync(acc, sOw + 16 * nd, kRow, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        FragV vf;  // V[keys 16kk .. 16kk+15][d 16nd .. 16nd+15]
        load_fragment(vf, reinterpret_cast<const T*>(sV) + 16 * kk * kRow + 16 * nd, kRow);
        wmma::mma_sync(acc, pf[kk], vf, acc);
      }
      wmma::store_matrix_sync(sOw + 16 * nd, acc, kRow, wmma::mem_row_major);
    }
    // The next tile's rescale (lanes) reads what these stores (fragments) wrote: the barrier
    // at the top of the next iteration orders them, as it does K and V.
  }

  // Epilogue. The pair of lanes of a row adds its partial sums; 1/l goes to shared memory so
  // the whole block can store O in a coalesced order. l >= 1 for a row that saw a key (the
  // max contributes 2^0); l == 0 for a row that saw none (causal, seq_q > seq_k): its O is 0
  // and so is its output, never 0/0.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  if (half == 0) sInvL[16 * warp + row] = l > 0.0f ? 1.0f / l : 0.0f;
  __syncthreads();  // every warp's O stores and 1/l are visible to every thread

  // O / l as T, 8 elements (16 bytes) per thread, consecutive threads along a row.
  constexpr int kChunks = D / 8;
  for (int i = int(threadIdx.x); i < kQueries * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (q0 + r >= p.seq_q || c * 8 >= p.head_dim) continue;
    const float inv = sInvL[r];
    const float* src = sO + r * kRow + c * 8;
    const float4 a = *reinterpret_cast<const float4*>(src);
    const float4 z = *reinterpret_cast<const float4*>(src + 4);
    uint16_t* dst = o + Problem::offset(p.o, b, h, q0 + r) + c * 8;
    if constexpr (kVec) {  // head_dim % 8 == 0: the whole chunk is inside the row
      *reinterpret_cast<uint4*>(dst) =
          make_uint4(pack2<T>(a.x * inv, a.y * inv), pack2<T>(a.z * inv, a.w * inv),
                     pack2<T>(z.x * inv, z.y * inv), pack2<T>(z.z * inv, z.w * inv));
    } else {
      const float y[8] = {a.x, a.y, a.z, a.w, z.x, z.y, z.z, z.w};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (c * 8 + e < p.head_dim) dst[e] = to_bits<T>(y[e] * inv);
    }
  }
#endif  // ATTN_WMMA_STEP_HAS_SM80
}

template <class T, int D, bool kVec>
Status launch(const Problem& p, const void* q, const void* k, const void* v, void* o,
              cudaStream_t stream) {
  const int64_t query_blocks = (int64_t(p.seq_q) + kQueries - 1) / kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff)
    return Status::error("wmma_step: " + std::to_string(blocks) +
                         " blocks exceed the grid limit of 2^31 - 1; split the problem");
  auto kernel = wmma_forward_kernel<T, D, kVec>;
  // Above 48 KB of dynamic shared memory a kernel must opt in: once per instantiation.
  const cudaError_t opt_in =
      device::allow_shared_memory(SmemLayout<D>::kBytes, kernel);
  ATTN_CUDA_RETURN(opt_in);
  kernel<<<unsigned(blocks), kThreads, SmemLayout<D>::kBytes, stream>>>(
      p, p.softmax_scale() * kLog2e, int(query_blocks), static_cast<const uint16_t*>(q),
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
      static_cast<uint16_t*>(o));
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

template <class T, int D>
Status launch_for_alignment(const Problem& p, const void* q, const void* k, const void* v,
                            void* o, cudaStream_t stream) {
  // 16-byte loads and stores need every row of Q, K, V and O on a 16-byte boundary and whole
  // 8-element chunks; anything else (head_dim 40 is fine, 17 is not; an offset base pointer)
  // takes the element-by-element path.
  const bool vec = p.head_dim % 8 == 0 && rows_aligned16(q, p.q, 2) &&
                   rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
                   rows_aligned16(o, p.o, 2);
  return vec ? launch<T, D, true>(p, q, k, v, o, stream)
             : launch<T, D, false>(p, q, k, v, o, stream);
}

}  // namespace detail

// q, k, v, o: device pointers to T = __half or __nv_bfloat16 elements laid out by p's strides
// (element strides; head_dim contiguous). T decides the element type; p.dtype, when it names
// a 16-bit type, must agree. head_dim <= 128 (padded to 64 or 128 in shared memory), any
// seq_q, seq_k >= 1, causal (bottom-right aligned; a query that sees no key outputs 0), GQA/MQA
// (K/V head p.kv_head(h)), BHSD, BSHD or any strides. Needs sm_80+ (bf16 WMMA).
template <class T>
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "WMMA takes __half or __nv_bfloat16 tensors");
  if (Status s = validate(p); !s) return s;
  constexpr DType kType = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  if (p.dtype != DType::f32 && p.dtype != kType)
    return Status::error(std::string("wmma_step: the problem says ") + dtype_name(p.dtype) +
                         " but forward<" + dtype_name(kType) + "> was called");
  if (p.head_dim > 128)
    return Status::error("wmma_step supports head_dim <= 128 (got " +
                         std::to_string(p.head_dim) + ")");
  if (Status s = require_sm80("module 07"); !s) return s;  // common/device.h
  if (p.head_dim <= 64) return detail::launch_for_alignment<T, 64>(p, q, k, v, o, stream);
  return detail::launch_for_alignment<T, 128>(p, q, k, v, o, stream);
}

}  // namespace attn::m07::wmma_step
