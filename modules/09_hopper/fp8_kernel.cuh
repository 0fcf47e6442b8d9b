// Module 09's FP8 rung: the warp-specialised forward kernel of hopper_kernel.cuh with Q, K
// and V in 8-bit floating point (e4m3: 1 sign, 4 exponent, 3 mantissa bits, largest 448).
// Hopper's tensor cores multiply e4m3 at twice the bf16 rate, and every tile is half the
// bytes; the price is accuracy: 3 mantissa bits round to 2^-4 relative (bf16: 2^-8).
//
// Two steps, each its own kernels:
//   quantize()   per-tensor scales s = amax / 448 (a tensor of zeros gets 1), then
//                Q8 = Q / sq and K8 = K / sk in [batch][head][seq][head_dim], and V
//                transposed: Vt8 = V / sv in [batch][kv_head][head_dim][keys], the keys of each
//                32-key group in the order of fp8_layout.h;
//   attention()  S = Q8 K8^T and O += P8 Vt8 on wgmma m64nNk32 e4m3, the online softmax in
//                fp32, O = sv * O / rowsum stored as bf16 (or f16).
// Why V is transposed: for 8-bit types wgmma takes both operands K-major only (no transpose
// flag). In O += P V the K dimension is the keys, so each column of V (one d) must have its
// keys contiguous. Q K^T needs nothing new: d is the K dimension and is contiguous already.
// Why the keys are permuted: see fp8_layout.h (P goes from the S accumulators to the A
// registers without shuffles).
// The scales: S = sq sk (Q8 K8^T), so sq * sk joins the softmax's scale; V = sv Vt8, and
// O = sv (P Vt8) / rowsum.
#pragma once

#include <cuda_fp8.h>

#include <type_traits>

#include "modules/09_hopper/fp8_layout.h"
#include "modules/09_hopper/hopper_kernel.cuh"
#include "modules/09_hopper/wgmma_fp8_ops.cuh"

namespace attn::m09::fp8 {

constexpr float kE4m3Max = 448.0f;

// What this rung handles: f16/bf16 tensors (quantized by quantize()), head_dim 64 or 128.
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Status::error("module 09's FP8 rung quantizes f16 or bf16 tensors, not " +
                         std::string(dtype_name(p.dtype)));
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("module 09's FP8 rung supports head_dim 64 or 128 (one 64- or "
                         "128-byte swizzle row of e4m3 values); got " +
                         std::to_string(p.head_dim));
  return Status::ok();
}

// ---- The quantized tensors ------------------------------------------------------------------

// Keys per row of Vt8: whole 32-key groups (the permutation works per group), which also
// makes the row a multiple of 16 bytes, as TMA requires of a stride.
inline int padded_keys(int seq_k) { return (seq_k + kKeyGroup - 1) / kKeyGroup * kKeyGroup; }

struct Fp8Tensors {
  uint8_t* q = nullptr;      // [batch][heads][seq_q][head_dim]
  uint8_t* k = nullptr;      // [batch][kv_heads][seq_k][head_dim]
  uint8_t* vt = nullptr;     // [batch][kv_heads][head_dim][padded_keys(seq_k)], permuted keys
  float* scales = nullptr;   // sq, sk, sv: the value of one e4m3 unit of Q, K, V
  unsigned* amax = nullptr;  // max |x| of Q, K, V as float bits (atomicMax on the bits)
};

// One device allocation holds them all; each piece starts on a 256-byte boundary.
struct WorkspacePlan {
  size_t q, k, vt, scales, amax, total;
};
inline WorkspacePlan workspace_plan(const Problem& p) {
  auto round_up = [](size_t x) { return (x + 255) / 256 * 256; };
  WorkspacePlan w{};
  const size_t d = p.head_dim;
  w.q = 0;
  w.k = w.q + round_up(size_t(p.batch) * p.heads * p.seq_q * d);
  w.vt = w.k + round_up(size_t(p.batch) * p.kv_heads * p.seq_k * d);
  w.scales = w.vt + round_up(size_t(p.batch) * p.kv_heads * d * padded_keys(p.seq_k));
  w.amax = w.scales + 256;
  w.total = w.amax + 256;
  return w;
}
inline Fp8Tensors carve_workspace(const Problem& p, void* workspace) {
  const WorkspacePlan w = workspace_plan(p);
  auto* base = static_cast<uint8_t*>(workspace);
  return Fp8Tensors{base + w.q, base + w.k, base + w.vt, reinterpret_cast<float*>(base + w.scales),
                    reinterpret_cast<unsigned*>(base + w.amax)};
}

// ---- The quantize pass ----------------------------------------------------------------------

template <class T>
__device__ inline float to_float(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return __half2float(x);
}

// The scale of a tensor from its max |x|: one e4m3 unit is amax / 448, so the largest value
// maps to 448, the top of e4m3's range, and small values keep as many bits as they can.
__device__ inline float scale_from_amax(unsigned amax_bits) {
  const float amax = __uint_as_float(amax_bits);
  return amax > 0.0f && amax < INFINITY ? amax / kE4m3Max : 1.0f;
}

// max |x| of Q (blockIdx.y = 0), K (1) and V (2): 8 values (16 bytes) per thread and step.
template <class T>
__global__ void amax_kernel(RowWalk q, RowWalk k, RowWalk v, int64_t q_rows, int64_t kv_rows,
                            int head_dim, unsigned* amax) {
  const RowWalk t = blockIdx.y == 0 ? q : blockIdx.y == 1 ? k : v;
  const int64_t rows = blockIdx.y == 0 ? q_rows : kv_rows;
  const int chunks = head_dim / 8;
  float m = 0.0f;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < rows * chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    const T* row = static_cast<const T*>(t.base) + t.offset(c / chunks);
    const uint4 raw = *reinterpret_cast<const uint4*>(row + (c % chunks) * 8);
    const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(to_float(x[e])));  // fmaxf drops NaN
  }
  for (int offset = 16; offset > 0; offset /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  // Non-negative floats order as their bit patterns do: atomicMax on the bits is a float max.
  if (threadIdx.x % 32 == 0) atomicMax(&amax[blockIdx.y], __float_as_uint(m));
}

// Q8 (blockIdx.y = 0) and K8 (1): x / s rounded to the nearest e4m3 (saturating at 448), in
// the dense [batch][head][seq][head_dim] layout the attention kernel's tensor maps describe.
template <class T>
__global__ void quantize_rows_kernel(RowWalk q, RowWalk k, int64_t q_rows, int64_t kv_rows,
                                     int head_dim, const unsigned* amax, float* scales,
                                     uint8_t* q8, uint8_t* k8) {
  const bool is_q = blockIdx.y == 0;
  const RowWalk t = is_q ? q : k;
  const int64_t rows = is_q ? q_rows : kv_rows;
  uint8_t* out = is_q ? q8 : k8;
  const float inv_scale = 1.0f / scale_from_amax(amax[blockIdx.y]);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x < 3)
    scales[threadIdx.x] = scale_from_amax(amax[threadIdx.x]);
  const int chunks = head_dim / 8;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < rows * chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    const T* row = static_cast<const T*>(t.base) + t.offset(c / chunks);
    const uint4 raw = *reinterpret_cast<const uint4*>(row + (c % chunks) * 8);
    const T* x = reinterpret_cast<const T*>(&raw);
    uint32_t packed[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
          make_float2(to_float(x[4 * h]) * inv_scale, to_float(x[4 * h + 1]) * inv_scale),
          __NV_SATFINITE, __NV_E4M3);
      const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
          make_float2(to_float(x[4 * h + 2]) * inv_scale, to_float(x[4 * h + 3]) * inv_scale),
          __NV_SATFINITE, __NV_E4M3);
      packed[h] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    // c counts 8-value chunks of the dense output, row after row.
    *reinterpret_cast<uint2*>(out + c * 8) = make_uint2(packed[0], packed[1]);
  }
}

// Vt8: one block transposes 64 keys x head_dim values of one (batch, kv_head) through shared
// memory (reads along head_dim, writes along the keys), with the keys of each 32-key group
// in the order of fp8_layout.h and zeros for the padding keys.
constexpr int kTransposeKeys = 64;

template <class T, int kHeadDim>
__global__ void __launch_bounds__(256) quantize_v_transposed_kernel(RowWalk v, int seq_k,
                                                                    int padded, const unsigned* amax,
                                                                    uint8_t* vt8) {
  __shared__ float tile[kTransposeKeys][kHeadDim + 1];  // +1: the column reads spread over banks
  const int key0 = blockIdx.x * kTransposeKeys;
  const int64_t bh = blockIdx.y;  // batch * kv_heads + kv_head
  const float inv_scale = 1.0f / scale_from_amax(amax[2]);
  constexpr int kChunks = kHeadDim / 8;
  for (int c = threadIdx.x; c < kTransposeKeys * kChunks; c += blockDim.x) {
    const int key = c / kChunks, col = (c % kChunks) * 8;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (key0 + key < seq_k) {
      const T* row = static_cast<const T*>(v.base) + v.offset(bh * seq_k + key0 + key);
      const uint4 raw = *reinterpret_cast<const uint4*>(row + col);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = to_float(e[i]) * inv_scale;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) tile[key][col + i] = x[i];
  }
  __syncthreads();
  // Four positions (one 32-bit store) per thread and step: row d of Vt8, positions p .. p+3.
  constexpr int kQuads = kTransposeKeys / 4;
  for (int c = threadIdx.x; c < kHeadDim * kQuads; c += blockDim.x) {
    const int d = c / kQuads, p = (c % kQuads) * 4;
    if (key0 + p >= padded) continue;
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int position = p + e;
      const int key = position / kKeyGroup * kKeyGroup + fp8_key_at_position(position % kKeyGroup);
      x[e] = tile[key][d];  // zero past seq_k (see the load)
    }
    const __nv_fp8x2_storage_t lo =
        __nv_cvt_float2_to_fp8x2(make_float2(x[0], x[1]), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(x[2], x[3]), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint32_t*>(vt8 + (bh * kHeadDim + d) * padded + key0 + p) =
        uint32_t(lo) | (uint32_t(hi) << 16);
  }
}

// The quantize pass: three small kernels on `stream` (amax, Q8 and K8, Vt8). q, k, v as
// forward() takes them (p.dtype, p's strides, rows 16-byte aligned).
inline Status quantize(const Problem& p, const void* q, const void* k, const void* v,
                       const Fp8Tensors& t, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  if (!rows_aligned16(q, p.q, 2) || !rows_aligned16(k, p.k, 2) || !rows_aligned16(v, p.v, 2))
    return Status::error("module 09's FP8 rung reads rows in 16-byte pieces: the tensors need "
                         "16-byte aligned rows");
  const RowWalk qw{q, p.q, p.heads, p.seq_q}, kw{k, p.k, p.kv_heads, p.seq_k},
      vw{v, p.v, p.kv_heads, p.seq_k};
  const int64_t q_rows = int64_t(p.batch) * p.heads * p.seq_q;
  const int64_t kv_rows = int64_t(p.batch) * p.kv_heads * p.seq_k;
  const int padded = padded_keys(p.seq_k);
  // Enough blocks to fill the GPU a few times over; each thread walks the rest.
  const int64_t chunks = std::max(q_rows, kv_rows) * (p.head_dim / 8);
  const int blocks = static_cast<int>(std::min<int64_t>((chunks + 255) / 256, 4 * 132));
  if (cudaError_t e = cudaMemsetAsync(t.amax, 0, 3 * sizeof(unsigned), stream); e != cudaSuccess)
    return Status::error(std::string("module 09 FP8: ") + cudaGetErrorString(e));
  if (int64_t(p.batch) * p.kv_heads > 65535)
    return Status::error("module 09 FP8: the V transpose runs one grid row per (batch, kv_head) "
                         "and takes at most 65535 of them");
  const dim3 transpose_grid((padded + kTransposeKeys - 1) / kTransposeKeys,
                            p.batch * p.kv_heads);
  auto run = [&](auto element) {
    using T = decltype(element);
    amax_kernel<T><<<dim3(blocks, 3), 256, 0, stream>>>(qw, kw, vw, q_rows, kv_rows, p.head_dim,
                                                         t.amax);
    quantize_rows_kernel<T><<<dim3(blocks, 2), 256, 0, stream>>>(
        qw, kw, q_rows, kv_rows, p.head_dim, t.amax, t.scales, t.q, t.k);
    if (p.head_dim == 64)
      quantize_v_transposed_kernel<T, 64>
          <<<transpose_grid, 256, 0, stream>>>(vw, p.seq_k, padded, t.amax, t.vt);
    else
      quantize_v_transposed_kernel<T, 128>
          <<<transpose_grid, 256, 0, stream>>>(vw, p.seq_k, padded, t.amax, t.vt);
  };
  if (p.dtype == DType::bf16) run(__nv_bfloat16{});
  else run(__half{});
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("module 09 FP8: quantize launch failed: ") +
                         cudaGetErrorString(e));
  return Status::ok();
}

// ---- The attention kernel: tile shapes and shared memory ----------------------------------

// kPScaleLog2: P is multiplied by 2^kPScaleLog2 before it is rounded to e4m3. P lies in
// [0, 1]; e4m3's smallest normal number is 2^-6 and its smallest subnormal 2^-9, so without a
// factor every probability below 2^-10 becomes 0 and those below 2^-6 keep fewer than 3
// mantissa bits. 2^8 moves the range to [0, 256] (below 448) and the cut-off to 2^-18. The
// row sum is taken of the same scaled values, so the factor cancels in O / rowsum; it costs
// nothing (it joins the exponent: 2^(s - m + 8)).
template <int kHeadDim_, int kBlockN_ = 128, int kConsumers_ = 2, int kStages_ = 2,
          bool kPersistent_ = false, int kPScaleLog2_ = 8,
          Schedule kSchedule_ = Schedule::pingpong>
struct Fp8Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kRowsPerConsumer = 64;
  static constexpr int kBlockM = kConsumers * kRowsPerConsumer;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kPScaleLog2 = kPScaleLog2_;
  static constexpr Schedule kSchedule = kSchedule_;
  static_assert(kSchedule != Schedule::serial, "the FP8 kernel overlaps softmax and P V");
  // SharedPlan (hopper_kernel.cuh) reads these: O has a tile of its own (16-bit O does not fit
  // in the 8-bit Q tile), so Q is released once the work tile's last S has completed.
  static constexpr bool kSeparateO = true;
  static constexpr int kThreads = 128 * (1 + kConsumers);

  // Q and K tiles: one row of head_dim bytes per query or key. At d = 128 that row is one
  // 128-byte swizzle row; at d = 64 it is 64 bytes, and the 64-byte swizzle (8 rows x 64
  // bytes, chunk c of row r at c ^ (r/2 % 4)) keeps the rows dense instead of padding them.
  static constexpr int kQKRowBytes = kHeadDim;
  static constexpr uint32_t kQKAtomBytes = 8 * kQKRowBytes;  // SBO: 8 rows to the next 8
  // Vt tiles: head_dim rows of kBlockN keys, in panels of 128 keys (one 128-byte swizzle row).
  static constexpr int kVPanelKeys = 128;
  static constexpr int kVPanels = kBlockN / kVPanelKeys;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kBlockN % kVPanelKeys == 0 && kBlockN <= 256, "K/V tiles of 128 or 256 keys");

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim;
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim;  // a K tile, and a Vt tile
  static constexpr uint32_t kOBytes = kBlockM * kHeadDim * 2;
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr uint32_t kOOffset = kVOffset + kStages * kKVBytes;
  static constexpr uint32_t kBarrierOffset = kOOffset + kOBytes;
  static constexpr int kBarriers = 2 + 4 * kStages;
  static constexpr uint32_t kFlagOffset = kBarrierOffset + kBarriers * 8;
  static constexpr uint32_t kSharedBytes = kFlagOffset + 8 + 1024;
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0,
                "every tile must start on a 1024-byte boundary (the swizzle's period)");
  static_assert(kSharedBytes <= 227 * 1024, "more shared memory than an SM has");

  // The output tile as stage_output (hopper_kernel.cuh) sees it: 16-bit values in 64-column
  // panels of 128-byte rows, kBlockM rows per panel.
  struct Output {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kConsumers_ * 64;
    static constexpr int kPanelCols = 64;
    static constexpr int kPanels = kHeadDim_ / 64;
    static constexpr int kRowBytes = 128;
  };

  static constexpr int kProducerRegisters = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
};

// A shared-memory matrix descriptor (hopper_ptx.cuh explains the fields) with the swizzle
// mode in bits 62-63: 1 = 128-byte, 2 = 64-byte rows.
__device__ inline uint64_t fp8_descriptor(uint32_t address, uint32_t stride_bytes,
                                          int swizzle_bytes) {
  const uint64_t mode = swizzle_bytes == 128 ? 1 : 2;
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (mode << 62);
}

// S (64 x kBlockN) = Q8 (this warpgroup's 64 rows) K8^T: head_dim/32 wgmmas, each k32 step
// 32 bytes further along the rows (the hardware applies the swizzle to the address it
// computes, so stepping inside a swizzled row is a plain offset).
template <class C>
__device__ inline void issue_scores(float (&s)[C::kBlockN / 2], uint32_t q_rows,
                                    uint32_t k_tile) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 32; ++kk) {
    const uint64_t a = fp8_descriptor(q_rows + kk * 32, C::kQKAtomBytes, C::kQKRowBytes);
    const uint64_t b = fp8_descriptor(k_tile + kk * 32, C::kQKAtomBytes, C::kQKRowBytes);
    WgmmaFp8<C::kBlockN>::a_smem(s, a, b, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

// O (64 x head_dim) += P8 (registers) Vt8^T: one wgmma per 32 keys. B is the Vt tile, K-major:
// row d holds the tile's keys, 128 per panel; a k32 step is 32 bytes along the row, SBO =
// 1024 bytes from 8 rows (8 values of d) to the next 8.
template <class C>
__device__ inline void issue_pv(float (&o)[C::kHeadDim / 2],
                                const uint32_t (&p)[C::kBlockN / kKeyGroup][4], uint32_t v_tile) {
  wgmma_fence();
#pragma unroll
  for (int kb = 0; kb < C::kBlockN / kKeyGroup; ++kb) {
    const uint32_t panel = kb / 4, step = (kb % 4) * 32;
    const uint64_t b = fp8_descriptor(v_tile + panel * C::kHeadDim * C::kVPanelKeys + step, 1024,
                                      128);
    WgmmaFp8<C::kHeadDim>::a_regs(o, p[kb], b, 1);
  }
  wgmma_commit();
}

// The online softmax step of hopper_kernel.cuh's softmax_exponentials, with P scaled by
// 2^kPScaleLog2 (see Fp8Config): the exponent's base moves down by kPScaleLog2, the running
// maxima and the correction factors do not change.
template <int kN, int kPScaleLog2>
__device__ inline void softmax_exponentials_scaled(float (&s)[kN / 2], float (&row_max)[2],
                                                   float (&row_sum)[2], float (&correction)[2],
                                                   float scale_log2) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]) * scale_log2);
    const float m = new_max == -INFINITY ? 0.0f : new_max;  // rows with only masked keys
    correction[r] = device::fast_exp2(row_max[r] - m);
    base[r] = m - static_cast<float>(kPScaleLog2);
    row_max[r] = new_max;
    row_sum[r] *= correction[r];
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    s[i] = device::fast_exp2(fmaf(s[i], scale_log2, -base[(i % 4) / 2]));
    row_sum[(i % 4) / 2] += s[i];
  }
}

// Four fp32 values rounded to e4m3 (saturating) in one 32-bit register, the first lowest.
__device__ inline uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE,
                                                           __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x2, x3), __NV_SATFINITE,
                                                           __NV_E4M3);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// O *= correction, and P packed as the e4m3 A registers of each 32-key block: register i's
// four bytes are the accumulators fp8_accumulator_for(block, i, 0..3), in the key order the
// quantize pass gave Vt8 (fp8_layout.h). No value leaves its thread.
template <class C>
__device__ inline void rescale_and_pack(const float (&s)[C::kBlockN / 2], float (&o)[C::kHeadDim / 2],
                                        const float (&correction)[2],
                                        uint32_t (&p)[C::kBlockN / kKeyGroup][4]) {
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] *= correction[(i % 4) / 2];
#pragma unroll
  for (int kb = 0; kb < C::kBlockN / kKeyGroup; ++kb) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      p[kb][i] = pack_e4m3x4(s[fp8_accumulator_for(kb, i, 0)], s[fp8_accumulator_for(kb, i, 1)],
                             s[fp8_accumulator_for(kb, i, 2)], s[fp8_accumulator_for(kb, i, 3)]);
  }
}

// ---- The attention kernel: producer and consumers -------------------------------------------

// One work tile of one consumer warpgroup, as consumer_work_tile in hopper_kernel.cuh with the
// overlapped schedule (S of tile j+1 issued with P V of tile j) and O in its own tile.
template <class C, bool kBf16, bool kCausal>
__device__ __forceinline__ void fp8_consumer_work_tile(const TensorMaps& maps, const KernelArgs& a,
                                                       const SharedPlan<C>& plan, int consumer,
                                                       int m_block, int head, int batch,
                                                       int tiles, int first_kv, uint32_t q_phase,
                                                       float scale_log2, float v_scale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_in_group = warp % 4;
  const int first_row = m_block * C::kBlockM + consumer * C::kRowsPerConsumer;
  const int row0 = first_row + 16 * warp_in_group + lane / 4;
  const uint32_t my_rows = plan.q() + consumer * C::kRowsPerConsumer * C::kQKRowBytes;
  const uint32_t my_out_rows = plan.o() + consumer * C::kRowsPerConsumer * C::Output::kRowBytes;
  auto wait = [&](Barrier b, const RingPosition& ring) { plan.wait(b, ring.slot, ring.phase); };
  auto release = [&](Barrier b, const RingPosition& ring) {
    if (lane == 0) plan.arrive(b, ring.slot);  // one arrival per warp
  };
  auto release_q_if_last = [&](int tile_of_s) {
    if (tile_of_s == tiles - 1 && lane == 0) plan.arrive(q_empty, 0);
  };

  float o[C::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

  auto mask_if_needed = [&](float (&s)[C::kBlockN / 2], int tile) {
    const int key0 = tile * C::kBlockN;
    const bool tail = key0 + C::kBlockN > a.seq_k;
    const bool diagonal = kCausal && key0 + C::kBlockN - 1 > first_row + (a.seq_k - a.seq_q);
    if (tail || diagonal) mask_scores<C::kBlockN, kCausal>(s, a, row0, key0, lane);
  };
  auto softmax = [&](float (&s)[C::kBlockN / 2], float (&correction)[2]) {
    softmax_exponentials_scaled<C::kBlockN, C::kPScaleLog2>(s, row_max, row_sum, correction,
                                                            scale_log2);
  };

  float s[C::kBlockN / 2];
  uint32_t p[C::kBlockN / kKeyGroup][4];
  float correction[2];

  if (tiles == 0) {
    plan.wait(q_full, 0, q_phase);
    if (lane == 0) plan.arrive(q_empty, 0);
  } else {
    plan.wait(q_full, 0, q_phase);
    {
      const RingPosition ring(first_kv, C::kStages);
      wait(k_full, ring);
      wait_for_turn<C>(consumer);
      issue_scores<C>(s, my_rows, plan.k(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<0>();
      fence_registers(s);
      release(k_empty, ring);
      release_q_if_last(0);
      mask_if_needed(s, 0);
      softmax(s, correction);
      rescale_and_pack<C>(s, o, correction, p);
    }
    // Every step commits two groups (S of tile j+1, then P V of tile j): wgmma_wait<1> means
    // "S is done" (hopper_kernel.cuh says why the last P V is peeled off).
    for (int j = 0; j + 1 < tiles; ++j) {
      const RingPosition ring(first_kv + j, C::kStages), next(first_kv + j + 1, C::kStages);
      wait(k_full, next);
      wait(v_full, ring);
      wait_for_turn<C>(consumer);
      issue_scores<C>(s, my_rows, plan.k(next.slot));
      issue_pv<C>(o, p, plan.v(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<1>();
      fence_registers(s);
      release(k_empty, next);
      release_q_if_last(j + 1);
      mask_if_needed(s, j + 1);
      softmax(s, correction);
      wgmma_wait<0>();
      fence_registers(o);
      release(v_empty, ring);
      rescale_and_pack<C>(s, o, correction, p);
    }
    {
      const RingPosition ring(first_kv + tiles - 1, C::kStages);
      wait(v_full, ring);
      wait_for_turn<C>(consumer);
      issue_pv<C>(o, p, plan.v(ring.slot));
      pass_turn<C>(consumer);
      wgmma_wait<0>();
      fence_registers(o);
      release(v_empty, ring);
    }
  }

  // O = sv * O / rowsum (both O and rowsum carry the factor 2^kPScaleLog2); rows that saw no
  // key have sum 0 and output 0.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    inv_sum[r] = total > 0.0f ? v_scale / total : 0.0f;
  }
  // The previous work tile's store may still read the O tile.
  if (threadIdx.x % 128 == 0) tma_store_wait_read();
  named_barrier_sync(1 + consumer, 128);
  stage_output<typename C::Output, kBf16>(o, inv_sum, my_out_rows, warp_in_group, lane);
  fence_shared_for_async_proxy();
  named_barrier_sync(1 + consumer, 128);
  if (threadIdx.x % 128 == 0 && first_row < a.seq_q) {
    for (int panel = 0; panel < C::Output::kPanels; ++panel)
      tma_store_4d(&maps.o, my_out_rows + panel * C::kBlockM * C::Output::kRowBytes,
                   panel * C::Output::kPanelCols, first_row, head, batch);
    tma_store_commit();
  }
}

// maps.q, maps.k: Q8 and K8; maps.v: Vt8; maps.o: O (16-bit). scales: sq, sk, sv (quantize()).
template <class C, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, 1)
    fp8_attention_kernel(const __grid_constant__ TensorMaps maps, const KernelArgs a,
                         const float* __restrict__ scales) {
#if ATTN_M09_DEVICE_CODE
  extern __shared__ __align__(1024) unsigned char shared_raw[];
  const SharedPlan<C> plan{(shared_address(shared_raw) + 1023u) & ~1023u, a.hang};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0);

  if (threadIdx.x == 0) {
    asm volatile("st.shared.u32 [%0], 0;" ::"r"(plan.base + C::kFlagOffset) : "memory");
    mbarrier_init(plan.barrier(q_full), 1);
    mbarrier_init(plan.barrier(q_empty), 4 * C::kConsumers);  // every consumer warp, after its last S
    for (int s = 0; s < C::kStages; ++s) {
      mbarrier_init(plan.barrier(k_full, s), 1);
      mbarrier_init(plan.barrier(v_full, s), 1);
      mbarrier_init(plan.barrier(k_empty, s), 4 * C::kConsumers);
      mbarrier_init(plan.barrier(v_empty, s), 4 * C::kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  auto decode = [&](int work, int& m_block, int& head, int& batch) {
    m_block = a.m_blocks - 1 - work % a.m_blocks;  // query blocks first, longest first
    const int bh = work / a.m_blocks;
    head = bh % a.heads;
    batch = bh / a.heads;
  };

  if (warpgroup == 0) {
    registers_release<C::kProducerRegisters>();
    if (warp == 0 && lane == 0) {
      int kv_count = 0;
      uint32_t fill = 0;
      for (int work = blockIdx.x; work < a.work_tiles; work += gridDim.x, ++fill) {
        int m_block, head, batch;
        decode(work, m_block, head, batch);
        const int kv_head = head / (a.heads / a.kv_heads);
        const int tiles = kv_tiles_for_block<C, kCausal>(a, m_block);
        plan.wait(q_empty, 0, (fill & 1) ^ 1);
        if (plan.gave_up()) break;
        plan.arrive_expect_bytes(q_full, 0, C::kQBytes);
        tma_load_4d(plan.q(), &maps.q, plan.barrier(q_full), 0, m_block * C::kBlockM, head, batch);
        for (int j = 0; j < tiles && !plan.gave_up(); ++j) {
          const RingPosition ring(kv_count + j, C::kStages);
          plan.wait(k_empty, ring.slot, ring.phase ^ 1);
          plan.arrive_expect_bytes(k_full, ring.slot, C::kKVBytes);
          tma_load_4d(plan.k(ring.slot), &maps.k, plan.barrier(k_full, ring.slot), 0,
                      j * C::kBlockN, kv_head, batch);
          plan.wait(v_empty, ring.slot, ring.phase ^ 1);
          plan.arrive_expect_bytes(v_full, ring.slot, C::kKVBytes);
          for (int panel = 0; panel < C::kVPanels; ++panel)
            tma_load_4d(plan.v(ring.slot) + panel * C::kHeadDim * C::kVPanelKeys, &maps.v,
                        plan.barrier(v_full, ring.slot), j * C::kBlockN + panel * C::kVPanelKeys,
                        0, kv_head, batch);
        }
        kv_count += tiles;
      }
      if (plan.gave_up()) {  // copies may still be in flight: keep shared memory alive
        const uint64_t until = global_timer_ns() + 2 * kHangCheckNs;
        while (global_timer_ns() < until) {
        }
      }
    }
  } else {
    registers_claim<C::kConsumerRegisters>();
    const float scale_log2 = a.scale_log2 * scales[0] * scales[1];
    const float v_scale = scales[2];
    first_turn<C>(warpgroup - 1);  // the ring of turns (hopper_kernel.cuh)
    int kv_count = 0;
    uint32_t fill = 0;
    for (int work = blockIdx.x; work < a.work_tiles; work += gridDim.x, ++fill) {
      int m_block, head, batch;
      decode(work, m_block, head, batch);
      const int tiles = kv_tiles_for_block<C, kCausal>(a, m_block);
      fp8_consumer_work_tile<C, kBf16, kCausal>(maps, a, plan, warpgroup - 1, m_block, head,
                                                batch, tiles, kv_count, fill & 1, scale_log2,
                                                v_scale);
      kv_count += tiles;
    }
    if (!plan.gave_up()) last_turn<C>(warpgroup - 1);
    if (threadIdx.x % 128 == 0) tma_store_wait_read();
  }
#endif
}

// ---- Host side ---------------------------------------------------------------------------------

// A 4-D map over 8-bit values (the copy engine moves bytes: UINT8 serves e4m3), dims and
// strides in elements = bytes, innermost first.
inline Status make_fp8_tensor_map(CUtensorMap* map, const void* base, const uint64_t (&dims)[4],
                                  const uint64_t (&strides)[3], const uint32_t (&box)[4],
                                  CUtensorMapSwizzle swizzle, const char* name) {
  const cuuint64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
  const cuuint64_t s[3] = {strides[0], strides[1], strides[2]};
  const cuuint32_t b[4] = {box[0], box[1], box[2], box[3]};
  return encode_tensor_map_4d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, d, s, b, swizzle, name);
}

template <class C, bool kBf16, bool kCausal>
Status launch_fp8_config(const Problem& p, const Fp8Tensors& t, void* o, cudaStream_t stream) {
  const uint64_t d = C::kHeadDim, keys = padded_keys(p.seq_k);
  const CUtensorMapSwizzle qk_swizzle =
      C::kQKRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  TensorMaps maps;
  if (Status s = make_fp8_tensor_map(
          &maps.q, t.q, {d, uint64_t(p.seq_q), uint64_t(p.heads), uint64_t(p.batch)},
          {d, d * p.seq_q, d * p.seq_q * p.heads}, {uint32_t(d), C::kBlockM, 1, 1}, qk_swizzle,
          "Q8");
      !s)
    return s;
  if (Status s = make_fp8_tensor_map(
          &maps.k, t.k, {d, uint64_t(p.seq_k), uint64_t(p.kv_heads), uint64_t(p.batch)},
          {d, d * p.seq_k, d * p.seq_k * p.kv_heads}, {uint32_t(d), C::kBlockN, 1, 1}, qk_swizzle,
          "K8");
      !s)
    return s;
  if (Status s = make_fp8_tensor_map(
          &maps.v, t.vt, {keys, d, uint64_t(p.kv_heads), uint64_t(p.batch)},
          {keys, keys * d, keys * d * p.kv_heads}, {C::kVPanelKeys, uint32_t(d), 1, 1},
          CU_TENSOR_MAP_SWIZZLE_128B, "Vt8");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.o, p.dtype, o, C::kHeadDim, p.seq_q, p.heads, p.batch, p.o,
                                 C::kRowsPerConsumer, "O");
      !s)
    return s;
  KernelArgs a{};
  a.batch = p.batch;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.m_blocks = (p.seq_q + C::kBlockM - 1) / C::kBlockM;
  a.scale_log2 = p.softmax_scale() * device::kLog2e;  // the kernel multiplies by sq * sk
  a.hang = hang_report_buffer();
  if (!a.hang) return Status::error("module 09: cannot allocate the mapped hang-report buffer");
  if (a.hang->hung) *a.hang = HangReport{};
  const int64_t work = static_cast<int64_t>(a.m_blocks) * p.heads * p.batch;
  if (work > 0x7fffffff)
    return Status::error("module 09 FP8: " + std::to_string(work) + " work tiles exceed 2^31-1");
  a.work_tiles = static_cast<int>(work);
  const int blocks = C::kPersistent
                         ? static_cast<int>(std::min<int64_t>(work, multiprocessor_count()))
                         : a.work_tiles;
  auto kernel = fp8_attention_kernel<C, kBf16, kCausal>;
  if (cudaError_t e = device::allow_shared_memory(C::kSharedBytes, kernel); e != cudaSuccess)
    return Status::error(std::string("module 09 FP8: cannot give the kernel ") +
                         std::to_string(C::kSharedBytes) + " bytes of shared memory: " +
                         cudaGetErrorString(e));
  kernel<<<blocks, C::kThreads, C::kSharedBytes, stream>>>(maps, a, t.scales);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("module 09 FP8: launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

// The attention kernel on tensors quantize() wrote, for the configuration C64 or C128.
template <class C64, class C128>
Status attention_with(const Problem& p, const Fp8Tensors& t, void* o, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  if (Status s = check_device_and_build(); !s) return s;
  if (!tma_compatible(o, p.o))
    return Status::error("module 09 FP8 stores O with TMA: its rows must start on 16-byte "
                         "boundaries");
  auto run = [&](auto config, auto causal) {
    using C = decltype(config);
    constexpr bool kCausal = decltype(causal)::value;
    return p.dtype == DType::bf16 ? launch_fp8_config<C, true, kCausal>(p, t, o, stream)
                                  : launch_fp8_config<C, false, kCausal>(p, t, o, stream);
  };
  if (p.causal)
    return p.head_dim == 64 ? run(C64{}, std::true_type{}) : run(C128{}, std::true_type{});
  return p.head_dim == 64 ? run(C64{}, std::false_type{}) : run(C128{}, std::false_type{});
}

// The configurations attention() uses: d = 128 as module 09's bf16 kernel (two consumer
// warpgroups, ping-pong, one block per work tile) with 128-key tiles (S, O and P then take
// 64 + 64 + 16 registers, far below the 240 a consumer has) and three ring slots (an FP8
// tile is half the bytes); d = 64 with three consumers, as the bf16 kernel.
using Fp8Production128 = Fp8Config<128, 128, 2, 3>;
using Fp8Production64 = Fp8Config<64, 128, 3, 3>;

inline Status attention(const Problem& p, const Fp8Tensors& t, void* o, cudaStream_t stream) {
  return attention_with<Fp8Production64, Fp8Production128>(p, t, o, stream);
}

// quantize() then attention(), on a workspace of workspace_plan(p).total bytes.
inline Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
                      void* workspace, cudaStream_t stream) {
  const Fp8Tensors t = carve_workspace(p, workspace);
  if (Status s = quantize(p, q, k, v, t, stream); !s) return s;
  return attention(p, t, o, stream);
}

}  // namespace attn::m09::fp8
