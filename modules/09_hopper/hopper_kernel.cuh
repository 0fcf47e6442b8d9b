// Module 09's given pipeline: a FlashAttention-3 style forward kernel for Hopper.
//
// One thread block computes a 128-row tile of queries for one (batch, head) and runs three
// warpgroups of 128 threads each:
//   warpgroup 0, the producer: one thread issues every copy (TMA). Q once, then K and V tiles
//                 into a ring of kStages shared-memory slots.
//   warpgroups 1 and 2, the consumers: each owns 64 of the 128 query rows and runs the
//                 online softmax of modules 03/07 on its wgmma accumulators.
// Barriers in shared memory hand each ring slot back and forth (section 4 of the lesson):
//   full[s]:  completes when slot s's bytes have landed (the copy engine counts them);
//   empty[s]: completes when all 8 consumer warps have finished reading slot s.
// Shared memory holds every tile as 64-column panels of 128-byte rows in the 128-byte
// swizzle, the layout both the copy engine and wgmma understand (hopper_ptx.cuh).
//
// What the learner writes (exercise.cu, HopperSteps): the two products with their matrix
// descriptors, and the producer's and consumers' side of the barrier protocol. Everything
// else (softmax, masks, tensor maps, the launch) is here.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (the types only: no libcuda link)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/device/math.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/09_hopper/hopper_ptx.cuh"
#include "modules/09_hopper/wgmma_ops.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_M09_DEVICE_CODE 1  // this compilation pass targets sm_90a: wgmma and setmaxnreg exist
#else
#define ATTN_M09_DEVICE_CODE 0
#endif

namespace attn::m09 {

// ---- Tile shapes and the shared-memory plan ----------------------------------------------------

template <int kHeadDim_>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;                  // consumer warpgroups
  static constexpr int kRowsPerConsumer = 64;           // one wgmma is 64 rows tall
  static constexpr int kBlockM = kConsumers * kRowsPerConsumer;  // query rows per block
  static constexpr int kBlockN = 128;                   // keys per K/V tile
  static constexpr int kStages = 2;                     // K/V ring slots
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kPanelCols = 64;                 // 64 16-bit values = one 128-byte row
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = 128;

  // Byte offsets inside the (1024-byte aligned) dynamic shared memory.
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 2;
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * 2;  // one K (or V) tile
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr uint32_t kBarrierOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBarriers = 1 + 4 * kStages;  // q_full, k_full[], k_empty[], v_full[], v_empty[]
  static constexpr uint32_t kSharedBytes = kBarrierOffset + kBarriers * 8 + 1024;  // + alignment slack

  // Registers per thread after setmaxnreg: the producer needs few, the consumers hold the
  // S and O accumulators (kBlockN/2 + kHeadDim/2 floats) and P. 128 x (24 + 240 + 240)
  // = 64512 of the SM's 65536 registers.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
};

// The block's barriers. Q has one (filled once); each ring slot has four.
enum Barrier : int { q_full = 0, k_full = 1, k_empty = 2, v_full = 3, v_empty = 4 };
inline const char* barrier_name(int b) {
  switch (b) {
    case q_full: return "Q full";
    case k_full: return "K full";
    case k_empty: return "K empty";
    case v_full: return "V full";
    case v_empty: return "V empty";
  }
  return "unknown";
}

// Where one block's tiles and barriers live (shared-memory addresses, as wgmma and TMA take
// them), and the barrier operations by name: plan.wait(k_full, slot, phase).
template <class C>
struct SharedPlan {
  using Config = C;
  uint32_t base;
  HangReport* hang;  // where a stuck wait reports (mapped host memory)

  __device__ uint32_t q() const { return base + C::kQOffset; }
  __device__ uint32_t k(int slot) const { return base + C::kKOffset + slot * C::kKVBytes; }
  __device__ uint32_t v(int slot) const { return base + C::kVOffset + slot * C::kKVBytes; }
  __device__ uint32_t barrier(Barrier b, int slot = 0) const {
    const int index = b == q_full ? 0 : 1 + (b - 1) * C::kStages + slot;
    return base + C::kBarrierOffset + 8 * index;
  }
  __device__ void wait(Barrier b, int slot, uint32_t phase) const {
    mbarrier_wait(barrier(b, slot), phase, hang, b, slot);
  }
  __device__ void arrive(Barrier b, int slot) const { mbarrier_arrive(barrier(b, slot)); }
  __device__ void arrive_expect_bytes(Barrier b, int slot, uint32_t bytes) const {
    mbarrier_arrive_expect_bytes(barrier(b, slot), bytes);
  }
};

// The four tensor maps (built on the host, passed by value as __grid_constant__ parameters:
// the copy engine reads them from the kernel's parameter space) and the problem's sizes.
struct TensorMaps {
  CUtensorMap q, k, v, o;
};

struct KernelArgs {
  int batch, heads, kv_heads, seq_q, seq_k;
  int m_blocks;      // ceil(seq_q / kBlockM)
  float scale_log2;  // softmax_scale * log2(e): scores in base-2 units
  HangReport* hang;  // mapped host memory: see hang_report()
};

// The K/V tile j of this block lives in ring slot j % kStages; its `use`-th fill is
// j / kStages, and the barriers' phase parity for that fill is use % 2.
struct RingPosition {
  int slot;
  uint32_t phase;
  __device__ RingPosition(int tile, int stages) : slot(tile % stages), phase((tile / stages) & 1) {}
};

// Number of K/V tiles block `m_block` must visit: all of them, or with the causal mask up to
// the last key its last row may see (bottom-right alignment, as in module 04).
template <class C, bool kCausal>
__device__ inline int kv_tiles_for_block(const KernelArgs& a, int m_block) {
  int keys = a.seq_k;
  if (kCausal) {
    const int last_row = min(a.seq_q, (m_block + 1) * C::kBlockM) - 1;
    keys = min(a.seq_k, max(0, last_row + (a.seq_k - a.seq_q) + 1));
  }
  return (keys + C::kBlockN - 1) / C::kBlockN;
}

// ---- Consumer helpers: the online softmax on wgmma accumulators --------------------------------
//
// A consumer thread holds, for each 8-column block j of a 64 x N accumulator, registers
// 4j..4j+3: rows row0 = 16*warp + lane/4 (r = 0, 1) and row0 + 8 (r = 2, 3), columns
// 8j + 2*(lane%4) + r%2. So each thread owns two rows, and the four threads of a quad
// (lanes 4i..4i+3) share them: row reductions are two shuffles.

__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <bool kBf16>
__device__ inline uint32_t pack_pair(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Sets the scores of keys this thread's rows may not see to -inf: keys past seq_k (the last
// tile is zero-filled by TMA, and a zero score is not "no key"), and with kCausal the keys
// after the diagonal.
template <int kN, bool kCausal>
__device__ inline void mask_scores(float (&s)[kN / 2], const KernelArgs& a, int row0, int key0,
                                   int lane) {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int row = row0 + 8 * ((i % 4) / 2);
    const int key = key0 + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
    bool hidden = key >= a.seq_k;
    if (kCausal) hidden = hidden || key > row + (a.seq_k - a.seq_q);
    if (hidden) s[i] = -INFINITY;
  }
}

// The online softmax step of module 03 for this thread's two rows: new running maxima, the
// rescale of O and of the running sums, and P = 2^(s - m) packed to 16 bits as wgmma's A
// fragments (the accumulator layout of two adjacent 8-column blocks IS the A-operand layout of
// one k16 step, so P never leaves the registers).
template <int kN, int kD, bool kBf16>
__device__ inline void online_softmax(float (&s)[kN / 2], float (&o)[kD / 2], float (&row_max)[2],
                                      float (&row_sum)[2], uint32_t (&p)[kN / 16][4],
                                      float scale_log2) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
  float correction[2], base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]) * scale_log2);
    // A row that has seen only masked keys keeps max -inf; use 0 so that 2^(-inf - 0) = 0
    // instead of 2^(-inf + inf) = NaN.
    base[r] = new_max == -INFINITY ? 0.0f : new_max;
    correction[r] = exp2f(row_max[r] - base[r]);
    row_max[r] = new_max;
    row_sum[r] *= correction[r];
  }
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] *= correction[(i % 4) / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    s[i] = exp2f(fmaf(s[i], scale_log2, -base[(i % 4) / 2]));
    row_sum[(i % 4) / 2] += s[i];  // this thread's part; the quad's parts are added at the end
  }
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack_pair<kBf16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// Writes this warpgroup's normalised O rows into its 64 rows of the Q tile (Q is no longer
// read), in the 128-byte swizzle the O tensor map expects; the TMA store takes it from there.
template <class C, bool kBf16>
__device__ inline void stage_output(const float (&o)[C::kHeadDim / 2], const float (&inv_sum)[2],
                                    uint32_t rows_base, int warp, int lane) {
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; i += 2) {
    const int row = 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    const int panel = col / C::kPanelCols;
    const int chunk = (col % C::kPanelCols) / 8;
    const uint32_t address = rows_base + panel * C::kBlockM * C::kRowBytes + row * C::kRowBytes +
                             ((chunk ^ (row % 8)) * 16) + (col % 8) * 2;
    const float inv = inv_sum[(i % 4) / 2];
    const uint32_t packed = pack_pair<kBf16>(o[i] * inv, o[i + 1] * inv);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(packed) : "memory");
  }
}

// ---- The kernel ---------------------------------------------------------------------------------

template <class C, class Steps, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, 1)
    hopper_attention_kernel(const __grid_constant__ TensorMaps maps, const KernelArgs a) {
#if ATTN_M09_DEVICE_CODE
  extern __shared__ __align__(1024) unsigned char shared_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: every tile must start on such a boundary.
  const SharedPlan<C> plan{(shared_address(shared_raw) + 1023u) & ~1023u, a.hang};

  // Heaviest blocks first: the m-block index is the slowest-moving part of blockIdx.x and runs
  // backwards, so with the causal mask the longest rows start in the first wave.
  const int bh_count = a.batch * a.heads;
  const int m_block = a.m_blocks - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count);
  const int head = bh % a.heads, batch = bh / a.heads;
  const int kv_head = head / (a.heads / a.kv_heads);
  const int tiles = kv_tiles_for_block<C, kCausal>(a, m_block);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4;

  if (threadIdx.x == 0) {
    mbarrier_init(plan.barrier(q_full), 1);
    for (int s = 0; s < C::kStages; ++s) {
      mbarrier_init(plan.barrier(k_full, s), 1);  // the producer's arrive_expect_bytes
      mbarrier_init(plan.barrier(v_full, s), 1);
      mbarrier_init(plan.barrier(k_empty, s), 4 * C::kConsumers);  // one arrival per consumer warp
      mbarrier_init(plan.barrier(v_empty, s), 4 * C::kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---------------- Producer ----------------
    registers_release<C::kProducerRegisters>();
    if (warp == 0 && lane == 0 && tiles > 0) {
      Steps::load_q(plan, &maps.q, m_block * C::kBlockM, head, batch);
      for (int j = 0; j < tiles; ++j)
        Steps::load_kv_tile(plan, &maps.k, &maps.v, RingPosition(j, C::kStages), j * C::kBlockN,
                            kv_head, batch);
    }
    return;
  }

  // ---------------- Consumers ----------------
  registers_claim<C::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warp_in_group = warp % 4;
  const int first_row = m_block * C::kBlockM + consumer * C::kRowsPerConsumer;
  const int row0 = first_row + 16 * warp_in_group + lane / 4;  // this thread's first row
  // This consumer's 64 rows of the Q tile (and later of the O tile), in every panel.
  const uint32_t my_rows = plan.q() + consumer * C::kRowsPerConsumer * C::kRowBytes;

  float o[C::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

  if (tiles > 0) Steps::wait_q(plan);
  for (int j = 0; j < tiles; ++j) {
    const RingPosition ring(j, C::kStages);
    const int key0 = j * C::kBlockN;

    float s[C::kBlockN / 2];
    Steps::wait_k(plan, ring);
    Steps::template scores<C, kBf16>(s, my_rows, plan.k(ring.slot));
    Steps::release_k(plan, ring, lane);

    // Only tiles that reach past seq_k or cross this warpgroup's diagonal need the mask.
    const bool tail = key0 + C::kBlockN > a.seq_k;
    const bool diagonal = kCausal && key0 + C::kBlockN - 1 > first_row + (a.seq_k - a.seq_q);
    if (tail || diagonal) mask_scores<C::kBlockN, kCausal>(s, a, row0, key0, lane);

    uint32_t p[C::kBlockN / 16][4];
    online_softmax<C::kBlockN, C::kHeadDim, kBf16>(s, o, row_max, row_sum, p, a.scale_log2);

    Steps::wait_v(plan, ring);
    Steps::template accumulate_pv<C, kBf16>(o, p, plan.v(ring.slot));
    Steps::release_v(plan, ring, lane);
  }

  // O = O / rowsum; rows that saw no key (causal, seq_q > seq_k) have sum 0 and output 0.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    inv_sum[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
  stage_output<C, kBf16>(o, inv_sum, my_rows, warp_in_group, lane);
  fence_shared_for_async_proxy();              // the copy engine reads what st.shared wrote
  named_barrier_sync(1 + consumer, 128);        // all 128 threads of this warpgroup have written
  if (threadIdx.x % 128 == 0 && first_row < a.seq_q) {
    for (int panel = 0; panel < C::kPanels; ++panel)
      tma_store_4d(&maps.o, my_rows + panel * C::kBlockM * C::kRowBytes, panel * C::kPanelCols,
                   first_row, head, batch);
    tma_store_commit();
    tma_store_wait_read();  // shared memory must outlive the copy's reads
  }
#endif
}

// ---- Host side: tensor maps and the launch ------------------------------------------------------

// cuTensorMapEncodeTiled is a driver function; the runtime hands out its address so the course
// links only the runtime (cudart), as the other modules do.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_function() {
  static EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &address, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess)
      return nullptr;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &address, cudaEnableDefault, &found) !=
        cudaSuccess)
      return nullptr;
#endif
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiledFn>(address) : nullptr;
  }();
  return fn;
}

// A 4-D map over (head_dim, seq, heads, batch) with the tensor's own strides, read in boxes of
// 64 columns x `box_rows` rows, written to shared memory in the 128-byte swizzle. Rows past
// `seq` read as zeros and are never written.
inline Status make_tensor_map(CUtensorMap* map, DType dtype, const void* base, int head_dim,
                              int seq, int heads, int batch, const Strides& s, int box_rows,
                              const char* name) {
  EncodeTiledFn encode = encode_tiled_function();
  if (!encode)
    return Status::error("module 09: the CUDA driver does not provide cuTensorMapEncodeTiled "
                         "(TMA needs a driver for CUDA 12 or newer)");
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.seq) * 2,
                                 static_cast<cuuint64_t>(s.head) * 2,
                                 static_cast<cuuint64_t>(s.batch) * 2};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(
      map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      4, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::error(std::string("module 09: cuTensorMapEncodeTiled refused the ") + name +
                         " tensor (error " + std::to_string(static_cast<int>(r)) + ")");
  return Status::ok();
}

// TMA reads rows whose start and stride are multiples of 16 bytes.
inline bool tma_compatible(const void* base, const Strides& s) {
  auto aligned = [](int64_t elements) { return (elements * 2) % 16 == 0 && elements > 0; };
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && aligned(s.seq) && aligned(s.head) &&
         aligned(s.batch);
}

// The mapped host buffer stuck waits write to (one per process), and its reading for the
// grader: empty while no kernel has given up.
inline HangReport* hang_report_buffer() {
  static HangReport* buffer = [] {
    HangReport* b = nullptr;
    if (cudaHostAlloc(&b, sizeof(HangReport), cudaHostAllocMapped) != cudaSuccess) return b;
    *b = HangReport{};
    return b;
  }();
  return buffer;
}

inline std::string hang_report() {
  HangReport* r = hang_report_buffer();
  if (!r || !r->hung) return "";
  return "module 09: thread " + std::to_string(r->thread) + " of block " +
         std::to_string(r->block) + " waited more than 10 s on the " +
         barrier_name(r->barrier) + " barrier of slot " + std::to_string(r->slot) +
         " for phase parity " + std::to_string(r->phase) +
         " and stopped the kernel: the barrier never completed (a wrong phase bit, an "
         "arrive_expect_bytes count that differs from the bytes the copies bring, or a "
         "missing arrive)";
}

// Whether this build carries sm_90a code for module 09 (a build for other GPUs compiles the
// kernel with an empty body): asked once of the device. (A template, so that the exercise and
// the solution can both include this header.)
template <int kUnused = 0>
__global__ void probe_sm90a_code(int* has_code) {
  *has_code = ATTN_M09_DEVICE_CODE;
}

// Module 09 runs only on compute capability 9.x, from a build that compiled it for sm_90a.
inline Status check_device_and_build() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return Status::error("module 09: cannot query the GPU");
  if (major != 9)
    return Status::error("module 09 needs a Hopper GPU (compute capability 9.x: H100, H200, "
                         "GH200); this GPU is compute capability " + std::to_string(major) +
                         "." + std::to_string(minor));
  static int has_code = -1;  // asked once per process
  if (has_code < 0) {
    int* flag = nullptr;
    has_code = 0;
    if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
      probe_sm90a_code<<<1, 1>>>(flag);
      int value = 0;
      if (cudaGetLastError() == cudaSuccess &&
          cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess)
        has_code = value;
      cudaFree(flag);
      cudaGetLastError();  // a missing kernel image is an answer here, not an error to keep
    }
  }
  if (!has_code)
    return Status::error("module 09: this build has no sm_90a code; configure with "
                         "-DCMAKE_CUDA_ARCHITECTURES=90 (the module then compiles with "
                         "-gencode=arch=compute_90a,code=sm_90a)");
  return Status::ok();
}

template <class C, class Steps, bool kBf16, bool kCausal>
Status launch_config(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream) {
  TensorMaps maps;
  if (Status s = make_tensor_map(&maps.q, p.dtype, q, C::kHeadDim, p.seq_q, p.heads, p.batch,
                                 p.q, C::kBlockM, "Q");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.k, p.dtype, k, C::kHeadDim, p.seq_k, p.kv_heads, p.batch,
                                 p.k, C::kBlockN, "K");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.v, p.dtype, v, C::kHeadDim, p.seq_k, p.kv_heads, p.batch,
                                 p.v, C::kBlockN, "V");
      !s)
    return s;
  if (Status s = make_tensor_map(&maps.o, p.dtype, o, C::kHeadDim, p.seq_q, p.heads, p.batch,
                                 p.o, C::kRowsPerConsumer, "O");
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
  const int64_t blocks = static_cast<int64_t>(a.m_blocks) * p.heads * p.batch;
  if (blocks > 0x7fffffff)
    return Status::error("module 09: " + std::to_string(blocks) +
                         " thread blocks exceed the grid's 2^31-1 limit");
  auto kernel = hopper_attention_kernel<C, Steps, kBf16, kCausal>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           C::kSharedBytes);
      e != cudaSuccess)
    return Status::error(std::string("module 09: cannot give the kernel ") +
                         std::to_string(C::kSharedBytes) + " bytes of shared memory: " +
                         cudaGetErrorString(e));
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSharedBytes, stream>>>(maps, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("module 09: launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

// forward() of exercise and solution: checks, then the configuration for this head_dim, dtype
// and mask.
template <class Steps>
Status launch(const Problem& p, const void* q, const void* k, const void* v, void* o,
              cudaStream_t stream) {
  if (Status s = check_device_and_build(); !s) return s;
  if (!tma_compatible(q, p.q) || !tma_compatible(k, p.k) || !tma_compatible(v, p.v) ||
      !tma_compatible(o, p.o))
    return Status::error("module 09 loads tiles with TMA, which needs every row to start on a "
                         "16-byte boundary (aligned base pointers and strides that are "
                         "multiples of 8 elements); module 07 runs this layout");
  auto run = [&](auto config, auto bf16, auto causal) {
    return launch_config<decltype(config), Steps, decltype(bf16)::value, decltype(causal)::value>(
        p, q, k, v, o, stream);
  };
  auto by_mask = [&](auto config, auto bf16) {
    return p.causal ? run(config, bf16, std::true_type{}) : run(config, bf16, std::false_type{});
  };
  auto by_dtype = [&](auto config) {
    return p.dtype == DType::bf16 ? by_mask(config, std::true_type{})
                                  : by_mask(config, std::false_type{});
  };
  return p.head_dim == 64 ? by_dtype(Config<64>{}) : by_dtype(Config<128>{});
}

}  // namespace attn::m09
