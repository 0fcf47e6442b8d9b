// Module 09's 3xTF32 rung: fp32 Q, K, V and O, both products on Hopper's tensor cores as
// wgmma m64nNk8 in TF32, each done three times so that the result keeps fp32 accuracy
// (README, section 11). Module 07 (section 10) introduced the split: an fp32 value x is
// big + small, big = x rounded to TF32 (10 mantissa bits), small = x - big exactly, and
//   x y = big_x big_y + big_x small_y + small_x big_y + small_x small_y
// where the last product (2^-22 of x y at most) is dropped. What Hopper changes:
//   - tf32 wgmma takes both operands K-major only (no transpose flag for 32-bit types). Q K^T
//     is K-major already (head_dim is the K dimension and contiguous); O += P V is not (the
//     keys are the K dimension, and V stores head_dim contiguous), so V goes through a
//     transpose.
//   - B comes from shared memory only, so the small parts of K and V must be tiles of their
//     own. One pass before the attention kernel (split()) writes V transposed, big and small,
//     in [batch][kv_head][head_dim][keys] with the keys of each 8-key group in the order of
//     tf32_layout.h, once per call; every query block then reads them with TMA. K needs no
//     transpose: up to kKInKernelKeys keys the producer warps split each K tile in shared
//     memory after TMA lands it raw; beyond, the pass writes K big and small too (which is
//     faster there, see kKInKernelKeys).
//   - A may come from registers. Q's small part lives in registers for the whole work tile
//     (split once, after Q lands; Q's big part is written back over Q in shared memory), and
//     P's big and small parts go from the S accumulators to A registers without a shuffle.
// The three products of a k step of S: Q big x K big and Q big x K small read A from shared
// memory (wgmma "SS"), Q small x K big reads it from registers ("RS"); all three of P V take P
// from registers.
//
// The kernel is module 09's warp-specialised layout: a producer warp issues the copies, two
// consumer warpgroups of 64 query rows compute, and they take turns at the tensor cores
// (ping-pong). Each consumer issues S = Q K^T for a tile, waits, computes the online softmax,
// issues O += P V, waits; while it computes the softmax, the other consumer's products run.
#pragma once

#include <algorithm>
#include <tuple>
#include <type_traits>

#include "common/device/convert.cuh"
#include "modules/09_hopper/hopper_kernel.cuh"
#include "modules/09_hopper/tf32_layout.h"
#include "modules/09_hopper/wgmma_tf32_ops.cuh"

namespace attn::m09::tf32 {

// What this rung handles: f32 tensors, head_dim 64 or 128 (whole 128-byte swizzle panels of
// 32 floats).
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f32)
    return Status::error("module 09's 3xTF32 rung takes f32 tensors, not " +
                         std::string(dtype_name(p.dtype)));
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("module 09 supports head_dim 64 or 128 in fp32 too (its shared-memory "
                         "tiles are whole 128-byte swizzle panels of 32 floats); got " +
                         std::to_string(p.head_dim) + ": run module 07 for other head dims");
  return Status::ok();
}

// x = big + small: big rounded to TF32 (to nearest), small = x - big, exact in fp32 (both are
// multiples of x's last bit and the difference needs at most 13 bits). The tensor cores read
// small's top 19 bits, which costs at most 2^-22 |x|, the size of the dropped product.
__device__ inline void split_tf32(float x, float& big, float& small) {
  big = __uint_as_float(device::to_tf32(x));
  small = x - big;
}

// ---- The split pass ---------------------------------------------------------------------------

// Keys per row of the transposed V: whole 8-key groups (the key order works per group), which
// also makes each row a multiple of 16 bytes, as TMA requires of a stride.
inline int padded_keys(int seq_k) { return (seq_k + kKeyGroup - 1) / kKeyGroup * kKeyGroup; }

struct SplitTensors {
  float* vt_big = nullptr;    // [batch][kv_heads][head_dim][padded_keys(seq_k)], keys permuted
  float* vt_small = nullptr;  // the same
  float* k_big = nullptr;     // [batch][kv_heads][seq_k][head_dim]; nullptr when the kernel
  float* k_small = nullptr;   // splits K itself (Tf32Config::kSplitKInKernel)
};

// One device allocation holds them; each piece starts on a 256-byte boundary. `with_k`: the
// K planes too.
struct WorkspacePlan {
  size_t vt_big, vt_small, k_big, k_small, total;
};
inline WorkspacePlan workspace_plan(const Problem& p, bool with_k) {
  auto round_up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t k_bytes =
      with_k ? round_up(size_t(p.batch) * p.kv_heads * p.seq_k * p.head_dim * 4) : 0;
  const size_t vt_bytes =
      round_up(size_t(p.batch) * p.kv_heads * p.head_dim * padded_keys(p.seq_k) * 4);
  WorkspacePlan w{};
  w.vt_big = 0;
  w.vt_small = vt_bytes;
  w.k_big = 2 * vt_bytes;
  w.k_small = 2 * vt_bytes + k_bytes;
  w.total = 2 * vt_bytes + 2 * k_bytes;
  return w;
}
inline SplitTensors carve_workspace(const Problem& p, void* workspace, bool with_k) {
  const WorkspacePlan w = workspace_plan(p, with_k);
  auto* base = static_cast<unsigned char*>(workspace);
  auto at = [&](size_t offset) { return reinterpret_cast<float*>(base + offset); };
  return SplitTensors{at(w.vt_big), at(w.vt_small), with_k ? at(w.k_big) : nullptr,
                      with_k ? at(w.k_small) : nullptr};
}

// K big and small: 4 values (16 bytes) per thread and step, dense output rows. (A template,
// so that every program that includes this header may instantiate it.)
template <int kUnused = 0>
__global__ void split_k_kernel(RowWalk k, int64_t rows, int head_dim, float* big, float* small) {
#if __CUDA_ARCH__ >= 900
  allow_dependent_launch();  // the attention kernel may start; it waits before reading K's planes
#endif
  const int chunks = head_dim / 4;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < rows * chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    const float* row = static_cast<const float*>(k.base) + k.offset(c / chunks);
    const float4 x = *reinterpret_cast<const float4*>(row + (c % chunks) * 4);
    float4 b, s;
    split_tf32(x.x, b.x, s.x);
    split_tf32(x.y, b.y, s.y);
    split_tf32(x.z, b.z, s.z);
    split_tf32(x.w, b.w, s.w);
    reinterpret_cast<float4*>(big)[c] = b;
    reinterpret_cast<float4*>(small)[c] = s;
  }
}

// V transposed, big and small: one block moves 64 keys x head_dim values of one
// (batch, kv_head) through shared memory (reads along head_dim, writes along the keys), the
// keys of each 8-key group in the order of tf32_layout.h, zeros for the padding keys. Grid
// row y takes the (batch, kv_head) pairs y, y + gridDim.y, ... (at most 65535 rows).
constexpr int kTransposeKeys = 64;

// One (batch, kv_head) pair's 64-key tile of the transposed V, big and small.
template <int kHeadDim>
__device__ inline void split_v_tile(float (&tile)[kTransposeKeys][kHeadDim + 1], const RowWalk& v,
                                    int seq_k, int padded, int64_t bh, float* big, float* small) {
  const int key0 = blockIdx.x * kTransposeKeys;
  constexpr int kChunks = kHeadDim / 4;
  for (int c = threadIdx.x; c < kTransposeKeys * kChunks; c += blockDim.x) {
    const int key = c / kChunks, col = (c % kChunks) * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (key0 + key < seq_k)
      x = *reinterpret_cast<const float4*>(static_cast<const float*>(v.base) +
                                           v.offset(bh * seq_k + key0 + key) + col);
    tile[key][col] = x.x;
    tile[key][col + 1] = x.y;
    tile[key][col + 2] = x.z;
    tile[key][col + 3] = x.w;
  }
  __syncthreads();
  // Four positions (one 16-byte store per plane) per thread and step: row d, positions p..p+3.
  constexpr int kQuads = kTransposeKeys / 4;
  for (int c = threadIdx.x; c < kHeadDim * kQuads; c += blockDim.x) {
    const int d = c / kQuads, p = (c % kQuads) * 4;
    if (key0 + p >= padded) continue;
    float b[4], s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int position = p + e;
      const int key = position / kKeyGroup * kKeyGroup + tf32_key_at_position(position % kKeyGroup);
      split_tf32(tile[key][d], b[e], s[e]);  // zero past seq_k (see the load)
    }
    const int64_t at = (bh * kHeadDim + d) * padded + key0 + p;
    *reinterpret_cast<float4*>(big + at) = make_float4(b[0], b[1], b[2], b[3]);
    *reinterpret_cast<float4*>(small + at) = make_float4(s[0], s[1], s[2], s[3]);
  }
}

template <int kHeadDim>
__global__ void __launch_bounds__(256) split_v_transposed_kernel(RowWalk v, int seq_k, int padded,
                                                                 int64_t pairs, float* big,
                                                                 float* small) {
  __shared__ float tile[kTransposeKeys][kHeadDim + 1];  // +1: the column reads spread over banks
#if __CUDA_ARCH__ >= 900
  allow_dependent_launch();  // the attention kernel may start; it waits before reading V's planes
#endif
  for (int64_t bh = blockIdx.y; bh < pairs; bh += gridDim.y) {  // batch * kv_heads + kv_head
    split_v_tile<kHeadDim>(tile, v, seq_k, padded, bh, big, small);
    __syncthreads();  // the next pair's loads overwrite the tile
  }
}

// The split pass on `stream`: V always; K too when `with_k` (a configuration that splits K
// in the kernel, Tf32Config::kSplitKInKernel, reads the caller's K instead). k, v as
// forward_3xtf32 takes them (fp32, p's strides, rows 16-byte aligned).
inline Status split(const Problem& p, const float* k, const float* v, const SplitTensors& t,
                    cudaStream_t stream, bool with_k) {
  const RowWalk kw{k, p.k, p.kv_heads, p.seq_k}, vw{v, p.v, p.kv_heads, p.seq_k};
  const int64_t kv_rows = int64_t(p.batch) * p.kv_heads * p.seq_k;
  const int64_t chunks = kv_rows * (p.head_dim / 4);
  const int blocks = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((chunks + 255) / 256, 4 * multiprocessor_count())));
  const int64_t pairs = int64_t(p.batch) * p.kv_heads;
  const int padded = padded_keys(p.seq_k);
  const dim3 transpose_grid((padded + kTransposeKeys - 1) / kTransposeKeys,
                            static_cast<unsigned>(std::min<int64_t>(pairs, 65535)));
  if (kv_rows > 0) {
    if (with_k)
      split_k_kernel<><<<blocks, 256, 0, stream>>>(kw, kv_rows, p.head_dim, t.k_big, t.k_small);
    if (p.head_dim == 64)
      split_v_transposed_kernel<64>
          <<<transpose_grid, 256, 0, stream>>>(vw, p.seq_k, padded, pairs, t.vt_big,
                                               t.vt_small);
    else
      split_v_transposed_kernel<128>
          <<<transpose_grid, 256, 0, stream>>>(vw, p.seq_k, padded, pairs, t.vt_big,
                                               t.vt_small);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("module 09 3xTF32: split launch failed: ") +
                         cudaGetErrorString(e));
  return Status::ok();
}

// ---- The attention kernel: tile shapes and shared memory --------------------------------------

// Two consumer warpgroups of 64 query rows; K/V tiles of kBlockN keys. A ring slot holds a
// tile's big plane and its small plane back to back (SharedPlan<C>::k(slot), v(slot)).
// Shared memory at d = 128, kBlockN = 64: Q 64 KB + one K slot 64 KB + one V slot 64 KB =
// 192 KB of the SM's 227 KB, so one slot each: the next K tile loads while both consumers
// compute P V, the next V tile while they compute S (the ping-pong order leaves two products
// of time, about 3000 cycles, for each). At d = 64 every tile is half as large and two slots
// fit.
template <int kHeadDim_, int kBlockN_ = 64, int kStages_ = 1, bool kSplitKInKernel_ = false>
struct Tf32Config {
  static constexpr int kHeadDim = kHeadDim_;
  // Where K is split. false: the split pass writes K big and small, the producer loads both
  // planes. true: the producer loads the caller's K (raw fp32) into the big plane, and its
  // four warps split it in shared memory (big rounded in place, small into the small plane)
  // before they release the tile to the consumers: the split pass then only handles V, which
  // must be transposed anyway.
  static constexpr bool kSplitKInKernel = kSplitKInKernel_;
  static constexpr int kConsumers = 2;
  static constexpr int kRowsPerConsumer = 64;
  static constexpr int kBlockM = kConsumers * kRowsPerConsumer;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr Schedule kSchedule = Schedule::pingpong;
  static constexpr bool kSeparateO = false;  // O is staged in the consumer's own Q rows
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kPanelFloats = 32;  // one 128-byte swizzle row
  static constexpr int kRowBytes = 128;
  static constexpr int kQKPanels = kHeadDim / kPanelFloats;  // panels of a Q or K tile
  static constexpr int kVPanels = kBlockN / kPanelFloats;     // panels of a transposed V tile
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kBlockN == 64 || kBlockN == 128, "K/V tiles of 64 or 128 keys");

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 4;
  static constexpr uint32_t kPlaneBytes = kBlockN * kHeadDim * 4;  // one plane of a K or V tile
  static constexpr uint32_t kKVBytes = 2 * kPlaneBytes;            // big and small
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr uint32_t kBarrierOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBarriers = 3 + 4 * kStages;  // SharedPlan's numbering
  static constexpr uint32_t kFlagOffset = kBarrierOffset + kBarriers * 8;
  static constexpr uint32_t kWorkOffset = kFlagOffset + 8;
  // kSplitKInKernel: one more barrier per slot, "K landed" (the copy's bytes), which the
  // producer warps wait on before they split; k_full then counts their four arrivals.
  static constexpr uint32_t kLandedOffset = kWorkOffset + 8;
  static constexpr uint32_t kSharedBytes = kLandedOffset + 8 * kStages + 1024;  // + alignment
  static_assert(kPlaneBytes % 1024 == 0, "every tile must start on a 1024-byte boundary");
  static_assert(kSharedBytes <= 227 * 1024, "more shared memory than an SM has");

  // Registers after setmaxnreg: a consumer holds O (kHeadDim / 2), S (kBlockN / 2), P's big
  // and small parts (kBlockN / 2 each) and Q's small part (kHeadDim / 2): 224 at d = 128
  // with 64-key tiles.
  // (kSplitKInKernel: the producer's four warps split K, which needs a few registers more.)
  static constexpr int kProducerRegisters = kSplitKInKernel ? 40 : 24;
  static constexpr int kConsumerRegisters = kSplitKInKernel ? 232 : 240;
};

// The address of fp32 element (row, col) of a tile stored as 128-byte swizzled panels of 32
// columns, `panel_bytes` apart: chunk c (4 floats) of row r sits at chunk c ^ (r % 8).
__device__ inline uint32_t swizzled_f32(uint32_t tile, int panel_bytes, int row, int col) {
  const int panel = col / 32, within = col % 32;
  return tile + panel * panel_bytes + row * 128 + (((within / 4) ^ (row % 8)) * 16) +
         (within % 4) * 4;
}

// Q's split, once per work tile, after Q has landed: each thread reads the elements of its A
// fragments (k step kk: rows g and g + 8 of its warp, columns 8kk + t and 8kk + t + 4), keeps
// their small parts in registers and writes their big parts back over Q, where the SS
// products read them. Each element of the consumer's 64 rows belongs to exactly one thread.
template <class C>
__device__ inline void split_q(uint32_t my_rows, int warp_in_group, int lane,
                               uint32_t (&q_small)[C::kHeadDim / 8][4]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 8; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * warp_in_group + g + 8 * (i % 2);
      const int col = 8 * kk + t + 4 * (i / 2);
      const uint32_t address = swizzled_f32(my_rows, C::kBlockM * C::kRowBytes, row, col);
      float x, big, small;
      asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x) : "r"(address) : "memory");
      split_tf32(x, big, small);
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(address), "f"(big) : "memory");
      q_small[kk][i] = __float_as_uint(small);
    }
  }
}

// P's split after the softmax: big and small parts as the A registers of O += P V, in the
// order tf32_layout.h gives (accumulator 4j + r of 8-key block j -> register
// tf32_a_register_for(r) of step j). No value leaves its thread.
template <class C>
__device__ inline void split_p(const float (&s)[C::kBlockN / 2], uint32_t (&p_big)[C::kBlockN / 8][4],
                               uint32_t (&p_small)[C::kBlockN / 8][4]) {
#pragma unroll
  for (int j = 0; j < C::kBlockN / 8; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float big, small;
      split_tf32(s[4 * j + r], big, small);
      p_big[j][tf32_a_register_for(r)] = __float_as_uint(big);
      p_small[j][tf32_a_register_for(r)] = __float_as_uint(small);
    }
  }
}

// kSplitKInKernel: the producer warpgroup's 128 threads split a K tile that landed raw in the
// big plane. The two planes share one layout (the swizzle moves 16-byte chunks, which the
// split keeps whole), so chunk c of the small plane is the split of chunk c of the big one.
template <class C>
__device__ inline void split_k_tile(uint32_t k_tile, int thread) {
  for (uint32_t at = thread * 16; at < C::kPlaneBytes; at += 128 * 16) {
    float4 x, big, small;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
                 : "r"(k_tile + at)
                 : "memory");
    split_tf32(x.x, big.x, small.x);
    split_tf32(x.y, big.y, small.y);
    split_tf32(x.z, big.z, small.z);
    split_tf32(x.w, big.w, small.w);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(k_tile + at), "f"(big.x),
                 "f"(big.y), "f"(big.z), "f"(big.w)
                 : "memory");
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(k_tile + C::kPlaneBytes + at),
                 "f"(small.x), "f"(small.y), "f"(small.z), "f"(small.w)
                 : "memory");
  }
}

// Writes this warpgroup's normalised O rows (fp32) over its rows of the Q tile, in the panels
// and swizzle the O tensor map expects; the TMA store takes it from there.
template <class C>
__device__ inline void stage_output_f32(const float (&o)[C::kHeadDim / 2], const float (&inv_sum)[2],
                                        uint32_t my_rows, int warp_in_group, int lane) {
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; i += 2) {
    const int row = 16 * warp_in_group + lane / 4 + 8 * ((i % 4) / 2);
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    const float inv = inv_sum[(i % 4) / 2];
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(
                     swizzled_f32(my_rows, C::kBlockM * C::kRowBytes, row, col)),
                 "f"(o[i] * inv), "f"(o[i + 1] * inv)
                 : "memory");
  }
}

// The six tensor maps: Q and O (the caller's tensors), K and V's big and small planes (the
// split pass's).
struct Tf32Maps {
  CUtensorMap q, k_big, k_small, v_big, v_small, o;
};

// One work tile (64 query rows) of one consumer warpgroup.
template <class C, class Steps, bool kCausal>
__device__ __forceinline__ void tf32_consumer_work_tile(const Tf32Maps& maps, const KernelArgs& a,
                                                        const SharedPlan<C>& plan, int consumer,
                                                        int m_block, int head, int batch,
                                                        int tiles) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_in_group = warp % 4;
  const int first_row = m_block * C::kBlockM + consumer * C::kRowsPerConsumer;
  const int row0 = first_row + 16 * warp_in_group + lane / 4;
  const uint32_t my_rows = plan.q() + consumer * C::kRowsPerConsumer * C::kRowBytes;

  float o[C::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  float s[C::kBlockN / 2];
  uint32_t p_big[C::kBlockN / 8][4], p_small[C::kBlockN / 8][4];
  uint32_t q_small[C::kHeadDim / 8][4];
  float correction[2];

  plan.wait(q_full, 0, 0);
  split_q<C>(my_rows, warp_in_group, lane, q_small);
  fence_shared_for_async_proxy();         // the tensor cores read what st.shared wrote
  named_barrier_sync(1 + consumer, 128);  // ... from all 128 threads of the warpgroup

  for (int j = 0; j < tiles; ++j) {
    const RingPosition ring(j, C::kStages);
    plan.wait(k_full, ring.slot, ring.phase);
    wait_for_turn<C>(consumer);
    Steps::template issue_scores_3xtf32<C>(s, my_rows, q_small, plan.k(ring.slot));
    pass_turn<C>(consumer);
    wgmma_wait<0>();
    fence_registers(s);
    if (lane == 0) plan.arrive(k_empty, ring.slot);

    const int key0 = j * C::kBlockN;
    const bool tail = key0 + C::kBlockN > a.seq_k;
    const bool diagonal = kCausal && key0 + C::kBlockN - 1 > first_row + (a.seq_k - a.seq_q);
    if (tail || diagonal) mask_scores<C::kBlockN, kCausal>(s, a, row0, key0, lane);
    softmax_exponentials<C::kBlockN, true>(s, row_max, row_sum, correction, a.scale_log2);
    if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] *= correction[(i % 4) / 2];
    }
    split_p<C>(s, p_big, p_small);

    plan.wait(v_full, ring.slot, ring.phase);
    wait_for_turn<C>(consumer);
    Steps::template issue_pv_3xtf32<C>(o, p_big, p_small, plan.v(ring.slot));
    pass_turn<C>(consumer);
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) plan.arrive(v_empty, ring.slot);
  }

  // O = O / rowsum; rows that saw no key (causal, seq_q > seq_k) have sum 0 and output 0.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    inv_sum[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
  // The warpgroup's S products, the only readers of its Q rows, have completed: O goes there.
  stage_output_f32<C>(o, inv_sum, my_rows, warp_in_group, lane);
  fence_shared_for_async_proxy();
  named_barrier_sync(1 + consumer, 128);
  if (threadIdx.x % 128 == 0 && first_row < a.seq_q) {
    for (int panel = 0; panel < C::kQKPanels; ++panel)
      tma_store_4d(&maps.o, my_rows + panel * C::kBlockM * C::kRowBytes,
                   panel * C::kPanelFloats, first_row, head, batch);
    tma_store_commit();
    tma_store_wait_read();
  }
}

// One block per work tile (query block, head, batch), query blocks of a head side by side (they
// read the same K and V, from L2), the longest causal ones first.
template <class C, class Steps, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, 1)
    tf32_attention_kernel(const __grid_constant__ Tf32Maps maps, const KernelArgs a) {
#if ATTN_M09_DEVICE_CODE
  extern __shared__ __align__(1024) unsigned char shared_raw[];
  const SharedPlan<C> plan{(shared_address(shared_raw) + 1023u) & ~1023u, a.hang};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0);

  if (threadIdx.x == 0) {
    asm volatile("st.shared.u32 [%0], 0;" ::"r"(plan.base + C::kFlagOffset) : "memory");
    mbarrier_init(plan.barrier(q_full), 1);
    for (int s = 0; s < C::kStages; ++s) {
      // kSplitKInKernel: each producer warp arrives once its part of the split is written.
      mbarrier_init(plan.barrier(k_full, s), C::kSplitKInKernel ? 4 : 1);
      mbarrier_init(plan.barrier(v_full, s), 1);
      mbarrier_init(plan.barrier(k_empty, s), 4 * C::kConsumers);  // one arrival per consumer warp
      mbarrier_init(plan.barrier(v_empty, s), 4 * C::kConsumers);
      if constexpr (C::kSplitKInKernel) mbarrier_init(plan.base + C::kLandedOffset + 8 * s, 1);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int work = static_cast<int>(blockIdx.x);
  const int m_block = a.m_blocks - 1 - work % a.m_blocks;
  const int bh = work / a.m_blocks;
  const int head = bh % a.heads, batch = bh / a.heads;
  const int tiles = kv_tiles_for_block<C, kCausal>(a, m_block);

  if (warpgroup == 0) {
    registers_release<C::kProducerRegisters>();
    // One thread issues the copies. With kSplitKInKernel all four warps stay: they split each
    // K tile once it has landed.
    const bool issuer = warp == 0 && lane == 0;
    if (issuer || C::kSplitKInKernel) {
      const int kv_head = head / (a.heads / a.kv_heads);
      if (issuer) {
        plan.arrive_expect_bytes(q_full, 0, C::kQBytes);
        for (int panel = 0; panel < C::kQKPanels; ++panel)
          tma_load_4d(plan.q() + panel * C::kBlockM * C::kRowBytes, &maps.q,
                      plan.barrier(q_full), panel * C::kPanelFloats, m_block * C::kBlockM, head,
                      batch);
        // The kernel may have started before the split pass ended (programmatic dependent
        // launch): the first copy of a plane the pass writes waits for it.
        if constexpr (!C::kSplitKInKernel)
          if (tiles > 0) wait_for_prerequisite_grid();
      }
      for (int j = 0; j < tiles && !plan.gave_up(); ++j) {
        const RingPosition ring(j, C::kStages);
        const uint32_t k_tile = plan.k(ring.slot), v_tile = plan.v(ring.slot);
        if constexpr (C::kSplitKInKernel) {
          // The caller's K into the big plane, completing on "K landed"; then every producer
          // thread splits its chunks, and each warp releases the tile to the consumers.
          const uint32_t landed = plan.base + C::kLandedOffset + 8 * ring.slot;
          if (issuer) {
            plan.wait(k_empty, ring.slot, ring.phase ^ 1);
            mbarrier_arrive_expect_bytes(landed, C::kPlaneBytes);
            for (int panel = 0; panel < C::kQKPanels; ++panel)
              tma_load_4d(k_tile + panel * C::kBlockN * C::kRowBytes, &maps.k_big, landed,
                          panel * C::kPanelFloats, j * C::kBlockN, kv_head, batch);
          }
          mbarrier_wait(landed, ring.phase, plan.hang, k_full, ring.slot,
                        plan.base + C::kFlagOffset);
          split_k_tile<C>(k_tile, threadIdx.x);
          fence_shared_for_async_proxy();  // the consumers' wgmmas read what st.shared wrote
          __syncwarp();
          if (lane == 0) plan.arrive(k_full, ring.slot);
          if (!issuer) continue;
          if (j == 0) wait_for_prerequisite_grid();  // V's planes come from the split pass
        } else {
          plan.wait(k_empty, ring.slot, ring.phase ^ 1);
          plan.arrive_expect_bytes(k_full, ring.slot, C::kKVBytes);
          for (int panel = 0; panel < C::kQKPanels; ++panel) {
            const uint32_t at = panel * C::kBlockN * C::kRowBytes;
            tma_load_4d(k_tile + at, &maps.k_big, plan.barrier(k_full, ring.slot),
                        panel * C::kPanelFloats, j * C::kBlockN, kv_head, batch);
            tma_load_4d(k_tile + C::kPlaneBytes + at, &maps.k_small,
                        plan.barrier(k_full, ring.slot), panel * C::kPanelFloats,
                        j * C::kBlockN, kv_head, batch);
          }
        }
        plan.wait(v_empty, ring.slot, ring.phase ^ 1);
        plan.arrive_expect_bytes(v_full, ring.slot, C::kKVBytes);
        for (int panel = 0; panel < C::kVPanels; ++panel) {
          const uint32_t at = panel * C::kHeadDim * C::kRowBytes;
          const int key = j * C::kBlockN + panel * C::kPanelFloats;
          tma_load_4d(v_tile + at, &maps.v_big, plan.barrier(v_full, ring.slot), key, 0, kv_head,
                      batch);
          tma_load_4d(v_tile + C::kPlaneBytes + at, &maps.v_small,
                      plan.barrier(v_full, ring.slot), key, 0, kv_head, batch);
        }
      }
      if (plan.gave_up()) {  // copies may still be in flight: keep shared memory alive
        const uint64_t until = global_timer_ns() + 2 * kHangCheckNs;
        while (global_timer_ns() < until) {
        }
      }
    }
  } else {
    registers_claim<C::kConsumerRegisters>();
    first_turn<C>(warpgroup - 1);  // the ring of turns (hopper_kernel.cuh)
    tf32_consumer_work_tile<C, Steps, kCausal>(maps, a, plan, warpgroup - 1, m_block, head, batch,
                                               tiles);
    if (!plan.gave_up()) last_turn<C>(warpgroup - 1);
  }
#endif
}

// ---- Host side ---------------------------------------------------------------------------------

// A 4-D map over fp32 values read in boxes of 32 floats (one 128-byte swizzle row) x box_rows;
// dims innermost first, strides in elements.
inline Status make_f32_map(CUtensorMap* map, const void* base, const uint64_t (&dims)[4],
                           const uint64_t (&strides)[3], uint32_t box_rows, const char* name) {
  const cuuint64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
  const cuuint64_t s[3] = {strides[0] * 4, strides[1] * 4, strides[2] * 4};
  const cuuint32_t b[4] = {32, box_rows, 1, 1};
  return encode_tensor_map_4d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, d, s, b,
                              CU_TENSOR_MAP_SWIZZLE_128B, name);
}

template <class C, class Steps, bool kCausal, bool kDependentLaunch = true>
Status launch_tf32_config(const Problem& p, const float* q, const float* k, const SplitTensors& t,
                          float* o, cudaStream_t stream) {
  const uint64_t d = C::kHeadDim, keys = padded_keys(p.seq_k);
  const uint64_t sk = p.seq_k, kvh = p.kv_heads, b = p.batch;
  Tf32Maps maps;
  auto user = [&](CUtensorMap* map, const float* base, int seq, const Strides& s, int rows,
                  const char* name) {
    return make_f32_map(map, base, {d, uint64_t(seq), uint64_t(p.heads), b},
                        {uint64_t(s.seq), uint64_t(s.head), uint64_t(s.batch)}, rows, name);
  };
  if (Status s = user(&maps.q, q, p.seq_q, p.q, C::kBlockM, "Q"); !s) return s;
  if (Status s = user(&maps.o, o, p.seq_q, p.o, C::kRowsPerConsumer, "O"); !s) return s;
  if constexpr (C::kSplitKInKernel) {
    // The caller's K, with its strides; the kernel splits it (k_small is not read).
    if (Status s = make_f32_map(&maps.k_big, k, {d, sk, kvh, b},
                                {uint64_t(p.k.seq), uint64_t(p.k.head), uint64_t(p.k.batch)},
                                C::kBlockN, "K");
        !s)
      return s;
    maps.k_small = maps.k_big;
  } else {
    for (auto [map, base, name] : {std::tuple{&maps.k_big, t.k_big, "K big"},
                                   std::tuple{&maps.k_small, t.k_small, "K small"}})
      if (Status s = make_f32_map(map, base, {d, sk, kvh, b}, {d, d * sk, d * sk * kvh},
                                  C::kBlockN, name);
          !s)
        return s;
  }
  for (auto [map, base, name] : {std::tuple{&maps.v_big, t.vt_big, "V big (transposed)"},
                                 std::tuple{&maps.v_small, t.vt_small, "V small (transposed)"}})
    if (Status s = make_f32_map(map, base, {keys, d, kvh, b}, {keys, keys * d, keys * d * kvh},
                                C::kHeadDim, name);
        !s)
      return s;
  KernelArgs a{};
  a.batch = p.batch;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.m_blocks = (p.seq_q + C::kBlockM - 1) / C::kBlockM;
  a.scale_log2 = p.softmax_scale() * device::kLog2e;
  a.hang = hang_report_buffer();
  if (!a.hang) return Status::error("module 09: cannot allocate the mapped hang-report buffer");
  if (a.hang->hung) *a.hang = HangReport{};
  const int64_t work = static_cast<int64_t>(a.m_blocks) * p.heads * p.batch;
  if (work > 0x7fffffff)
    return Status::error("module 09 3xTF32: " + std::to_string(work) +
                         " work tiles exceed 2^31-1 blocks");
  a.work_tiles = static_cast<int>(work);
  auto kernel = tf32_attention_kernel<C, Steps, kCausal>;
  if (cudaError_t e = device::allow_shared_memory(C::kSharedBytes, kernel); e != cudaSuccess)
    return Status::error(std::string("module 09 3xTF32: cannot give the kernel ") +
                         std::to_string(C::kSharedBytes) + " bytes of shared memory: " +
                         cudaGetErrorString(e));
  // A programmatic dependent launch (hopper_ptx.cuh): the kernel's blocks may start while the
  // split pass's last blocks run; the producer waits for the pass before it copies its planes.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(a.work_tiles));
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = C::kSharedBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = kDependentLaunch ? 1 : 0;
  if (cudaError_t e = cudaLaunchKernelEx(&config, kernel, maps, a); e != cudaSuccess)
    return Status::error(std::string("module 09 3xTF32: launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

// The split tensors' device memory, one buffer per process that grows when a larger problem
// comes (cudaMalloc synchronises, so only the first call of a size pays; the course's programs
// use one GPU).
inline Status workspace_for(const Problem& p, bool with_k, void** out) {
  static void* buffer = nullptr;
  static size_t bytes = 0;
  const size_t need = workspace_plan(p, with_k).total;
  if (need > bytes) {
    if (buffer) cudaFree(buffer);
    buffer = nullptr;
    bytes = 0;
    if (cudaError_t e = cudaMalloc(&buffer, need); e != cudaSuccess) {
      cudaGetLastError();
      return Status::error("module 09 3xTF32: cannot allocate " + std::to_string(need >> 20) +
                           " MiB for the split K and V: " + cudaGetErrorString(e));
    }
    bytes = need;
  }
  *out = buffer;
  return Status::ok();
}

// The configurations: d = 128, 64-key tiles, one ring slot (Tf32Config says why); d = 64,
// 64-key tiles, two slots. K is split in the kernel up to kKInKernelKeys keys and by the pass
// beyond: measured both ways in one run (bench_09_tf32's 3xtf32_wgmma_kin and _kpass rungs),
// the kernel's split saves the pass's K traffic, 8-19% of the time at 512 keys, 3-9% at 1024,
// and costs up to 7% from 4096 keys on, where that traffic is small beside the products and
// the producer warps' shared-memory reads and writes compete with the wgmmas'.
constexpr int kKInKernelKeys = 2048;  // tests/test_09_hopper.cpp takes both sides of it
using Tf32Short128 = Tf32Config<128, 64, 1, true>;
using Tf32Short64 = Tf32Config<64, 64, 2, true>;
using Tf32Long128 = Tf32Config<128, 64, 1, false>;
using Tf32Long64 = Tf32Config<64, 64, 2, false>;

// The split pass, then the attention kernel of configuration C64 or C128 (kDependentLaunch:
// as a programmatic dependent launch, see launch_tf32_config).
template <class Steps, class C64, class C128, bool kDependentLaunch = true>
Status forward_3xtf32_with(const Problem& p, const float* q, const float* k, const float* v,
                           float* o, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  if (Status s = check_device_and_build(); !s) return s;
  auto tma_rows = [](const float* base, const Strides& s) {
    return rows_aligned16(base, s) && s.seq > 0 && s.head > 0 && s.batch > 0;
  };
  if (!tma_rows(q, p.q) || !tma_rows(k, p.k) || !tma_rows(v, p.v) || !tma_rows(o, p.o))
    return Status::error("module 09 loads fp32 tiles with TMA, which needs every row to start "
                         "on a 16-byte boundary (aligned base pointers and strides that are "
                         "multiples of 4 floats); module 07 runs this layout");
  const bool k_in_kernel = p.head_dim == 64 ? C64::kSplitKInKernel : C128::kSplitKInKernel;
  void* workspace = nullptr;
  if (Status s = workspace_for(p, !k_in_kernel, &workspace); !s) return s;
  const SplitTensors t = carve_workspace(p, workspace, !k_in_kernel);
  if (Status s = split(p, k, v, t, stream, !k_in_kernel); !s) return s;
  auto run = [&](auto config, auto causal) {
    using C = decltype(config);
    return launch_tf32_config<C, Steps, decltype(causal)::value, kDependentLaunch>(p, q, k, t, o,
                                                                                  stream);
  };
  if (p.causal)
    return p.head_dim == 64 ? run(C64{}, std::true_type{}) : run(C128{}, std::true_type{});
  return p.head_dim == 64 ? run(C64{}, std::false_type{}) : run(C128{}, std::false_type{});
}

// forward_3xtf32 of exercise and solution: the production configurations for p.
template <class Steps>
Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream) {
  if (p.seq_k <= kKInKernelKeys)
    return forward_3xtf32_with<Steps, Tf32Short64, Tf32Short128>(p, q, k, v, o, stream);
  return forward_3xtf32_with<Steps, Tf32Long64, Tf32Long128>(p, q, k, v, o, stream);
}

// Whether forward_3xtf32 splits K in the kernel for p (the split pass then skips K).
inline bool splits_k_in_kernel(const Problem& p) { return p.seq_k <= kKInKernelKeys; }

}  // namespace attn::m09::tf32
