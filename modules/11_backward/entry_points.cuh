// Module 11, given: the launches. Defined once for the exercise and the solution:
//   ATTN_M11_DEFINE_ENTRY_POINTS(BackwardSteps)
// inside namespace attn::m11::ATTN_IMPL defines forward, forward16, forward_lse and backward
// there (backward_attention.h).
//
// The forward with the log-sum-exp: fp32 tensors run forward_rows_kernel; f16/bf16 run module
// 07's kernel (its production configurations, module 07's solution as the warp step) with
// SaveLse as its epilogue hook. The backward: prepare_rows_kernel (D and lse in base 2), then
//   Path::rows          dkdv_rows_kernel + dq_rows_kernel (the fp32 rung; any type);
//   Path::tensor_cores  flash_bwd_kernel (mma.sync) + store_dq_kernel (f16/bf16, sm_80 on);
//   Path::hopper        flash_bwd_producer_kernel (wgmma, a TMA producer warpgroup; rows TMA
//                       cannot read: flash_bwd_wgmma_kernel) + store_dq_kernel (f16/bf16, sm_90a);
//   Path::fastest       fastest_path(p): hopper where this GPU and build have it, else
//                       tensor_cores (f32: rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/head_dim.cuh"
#include "common/device/shared_memory.cuh"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/09_hopper/tensor_maps.h"
#include "modules/11_backward/backward_attention.h"
#include "modules/11_backward/backward_hopper.cuh"
#include "modules/11_backward/backward_kernel.cuh"
#include "modules/11_backward/rows_kernels.cuh"

// Module 07's solution of the warp step, in a namespace of its own (m07::backward_warp), as
// modules 10 and 12 do: module 07's own exercise defines a different WarpMma.
#pragma push_macro("ATTN_IMPL")
#undef ATTN_IMPL
#define ATTN_IMPL backward_warp
#include "solutions/07_tensor_cores/warp_mma.cuh"
#pragma pop_macro("ATTN_IMPL")

namespace attn::m11 {

// Module 07's epilogue hook (tensor_core_kernel.cuh, `Mods::kStoresLse`): each row's running
// max m (base 2, scaled) and sum become its log-sum-exp through Steps::log_sum_exp.
template <class Steps>
struct SaveLse : m07::NoModifiers {
  static constexpr bool kStoresLse = true;
  struct Args {
    float* lse;
  };
  static __device__ __forceinline__ void store_lse(const Args& a, const Problem& p, int b, int h,
                                                   int row, float m_log2, float sum) {
    if (row < p.seq_q) a.lse[(int64_t(b) * p.heads + h) * p.seq_q + row] =
        Steps::log_sum_exp(m_log2, sum);
  }
};

// True on a compute capability 9.x GPU when this build carries the wgmma kernel's sm_90a code
// (asked once of the device).
inline bool hopper_available() {
  static const bool available = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        major != 9)
      return false;
    int* flag = nullptr;
    int value = 0;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return false;
    probe_wgmma_code<<<1, 1>>>(flag);
    const bool ok = cudaGetLastError() == cudaSuccess &&
                    cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
    cudaGetLastError();  // a missing kernel image is an answer here, not an error to keep
    return ok && value == 1;
  }();
  return available;
}

template <class T>
RowsArgs<T> rows_args(const Problem& p, const void* q, const void* k, const void* v,
                      const void* o, const void* dout) {
  RowsArgs<T> a{};
  a.p = p;
  a.q = static_cast<const T*>(q), a.k = static_cast<const T*>(k);
  a.v = static_cast<const T*>(v), a.o = static_cast<const T*>(o);
  a.dout = static_cast<const T*>(dout);
  a.scale = p.softmax_scale();
  a.scale_log2 = a.scale * kLog2e;
  a.rows_pad = padded_rows(p.seq_q);
  return a;
}

inline unsigned row_grid(int rows, int64_t heads) {
  return unsigned((rows + kRowThreads - 1) / kRowThreads * heads);
}

// Calls launch(T{}) with T the element type of p.dtype.
template <class Launch>
Status with_type(DType t, Launch&& launch) {
  if (t == DType::f32) return launch(float{});
  if (t == DType::f16) return launch(__half{});
  return launch(__nv_bfloat16{});
}

inline Status check_grid(const Problem& p) {
  // The row kernels take at least 8 rows per block (prepare_rows_kernel: 256 threads, at most
  // 32 per row).
  const int64_t rows = int64_t(padded_rows(p.seq_q)) * p.batch * p.heads;
  if (rows / 8 + 1 > 0x7fffffff || int64_t(row_grid(p.seq_k, 1)) * p.batch * p.heads > 0x7fffffff)
    return Status::error("module 11: more than 2^31 - 1 blocks");
  return Status::ok();
}

template <class Steps>
Status forward_lse(const Problem& p, const void* q, const void* k, const void* v, void* o,
                   float* lse, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  if (Status s = check_grid(p); !s) return s;
  if (p.dtype != DType::f32) {
    using Warp = m07::backward_warp::WarpMma;
    const typename SaveLse<Steps>::Args args{lse};
    return with_type(p.dtype, [&](auto t) -> Status {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, float>) {
        return Status::error("unreachable");
      } else {
        if (p.head_dim <= 64)
          return m07::launch_config<Warp, T, m07::Config64, m07::DenseBatch, SaveLse<Steps>>(
              p, q, k, v, o, stream, {}, args);
        return m07::launch_config<Warp, T, m07::Config128, m07::DenseBatch, SaveLse<Steps>>(
            p, q, k, v, o, stream, {}, args);
      }
    });
  }
  RowsArgs<float> a = rows_args<float>(p, q, k, v, nullptr, nullptr);
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) -> Status {
    forward_rows_kernel<Steps, float, decltype(d)::value>
        <<<row_grid(p.seq_q, int64_t(p.batch) * p.heads), kRowThreads, 0, stream>>>(
            a, static_cast<float*>(o), lse, (p.seq_q + kRowThreads - 1) / kRowThreads);
    ATTN_CUDA_RETURN(cudaGetLastError());
    return Status::ok();
  });
}

// The fp32 sums of the tensor-core kernel's dQ products, lse in base 2 and D: scratch memory
// of one backward call, allocated and freed on its stream.
struct Scratch {
  float* rows = nullptr;  // lse2 | delta, each batch * heads * rows_pad
  float* dq_sum = nullptr;
  cudaStream_t stream = nullptr;
  ~Scratch() {
    if (rows) cudaFreeAsync(rows, stream);
    if (dq_sum) cudaFreeAsync(dq_sum, stream);
  }
};

// The mma.sync kernel's configurations, the fastest measured on the H100 (README, section 3):
// 128 keys per block (8 warps, 32 keys per pair), query tiles of 64 rows. With 128 keys every query
// tile's dQ atomics serve twice as many keys as with 64 (the atomics are the kernel's heaviest
// memory traffic). One block per SM: the five products' accumulators take most of the 255
// registers a thread may have.
using Production64 = BwdConfig<64, 128, 64, 1>;
using Production128 = BwdConfig<128, 128, 64, 1>;

// The grid of the tensor-core kernels: one block per `keys` keys of each (batch, K/V head),
// key_blocks per head; an error when the blocks exceed a 1-D grid.
inline Status key_block_grid(const Problem& p, int keys, int& key_blocks, unsigned& blocks) {
  key_blocks = (p.seq_k + keys - 1) / keys;
  const int64_t count = int64_t(key_blocks) * p.batch * p.kv_heads;
  if (count > 0x7fffffff) return Status::error("module 11: more than 2^31 - 1 blocks");
  blocks = unsigned(count);
  return Status::ok();
}

// One of the kernels without a producer (C: BwdConfig for the mma.sync kernel, HopperBwdConfig
// for the wgmma kernel), one block per key block.
template <class Steps, class T, class C, bool kHopper>
Status launch_key_blocks(const RowsArgs<T>& a, bool vec, float* dq_sum, cudaStream_t stream) {
  const Problem& p = a.p;
  using Kernel = void (*)(RowsArgs<T>, int, float*);
  auto pick = [](auto causal, auto vec) -> Kernel {
    if constexpr (kHopper)
      return flash_bwd_wgmma_kernel<Steps, T, C, decltype(causal)::value, decltype(vec)::value>;
    else
      return flash_bwd_kernel<Steps, T, C, decltype(causal)::value, decltype(vec)::value>;
  };
  using No = std::false_type;
  using Yes = std::true_type;
  static const Kernel kernels[2][2] = {{pick(No{}, No{}), pick(No{}, Yes{})},
                                       {pick(Yes{}, No{}), pick(Yes{}, Yes{})}};
  const cudaError_t opt_in = device::allow_shared_memory(
      C::kSmemBytes, kernels[0][0], kernels[0][1], kernels[1][0], kernels[1][1]);
  ATTN_CUDA_RETURN(opt_in);
  int key_blocks = 0;
  unsigned blocks = 0;
  if (Status s = key_block_grid(p, C::kKeys, key_blocks, blocks); !s) return s;
  kernels[p.causal ? 1 : 0][vec ? 1 : 0]<<<blocks, C::kThreads, C::kSmemBytes, stream>>>(
      a, key_blocks, dq_sum);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The wgmma kernel with a producer warpgroup (C::kProducer): TMA reads rows that start on
// 16-byte boundaries; other layouts run the same kernel without the producer.
template <class Steps, class T, class C>
Status launch_producer(const RowsArgs<T>& a, bool vec, float* dq_sum, cudaStream_t stream) {
  const Problem& p = a.p;
  if (!vec || !m09::tma_compatible(a.q, p.q) || !m09::tma_compatible(a.k, p.k) ||
      !m09::tma_compatible(a.v, p.v) || !m09::tma_compatible(a.dout, p.o) ||
      !m09::tma_compatible(a.dk, p.k) || !m09::tma_compatible(a.dv, p.v))
    return launch_key_blocks<Steps, T, typename C::WithoutProducer, true>(a, vec, dq_sum, stream);
  BwdTensorMaps maps;
  // Q and dO in boxes of a query tile's rows, K and V (and dK and dV) of a key block's.
  struct Map {
    CUtensorMap* map;
    const void* base;
    int seq, heads;
    Strides strides;
    int box_rows;
    const char* name;
  };
  for (const Map& m : {Map{&maps.q, a.q, p.seq_q, p.heads, p.q, C::kQueries, "Q"},
                       Map{&maps.dout, a.dout, p.seq_q, p.heads, p.o, C::kQueries, "dO"},
                       Map{&maps.k, a.k, p.seq_k, p.kv_heads, p.k, C::kKeys, "K"},
                       Map{&maps.v, a.v, p.seq_k, p.kv_heads, p.v, C::kKeys, "V"},
                       Map{&maps.dk, a.dk, p.seq_k, p.kv_heads, p.k, C::kKeys, "dK"},
                       Map{&maps.dv, a.dv, p.seq_k, p.kv_heads, p.v, C::kKeys, "dV"}})
    if (Status s = m09::make_tensor_map(m.map, p.dtype, m.base, p.head_dim, m.seq, m.heads,
                                        p.batch, m.strides, m.box_rows, m.name);
        !s)
      return s;
  m09::HangReport* hang = m09::hang_report_buffer();
  if (!hang) return Status::error("module 11: cannot allocate the mapped hang-report buffer");
  if (hang->hung) *hang = m09::HangReport{};  // an earlier launch's report, read by now
  using Kernel = void (*)(const BwdTensorMaps, RowsArgs<T>, int, float*, m09::HangReport*);
  static const Kernel kernels[2] = {flash_bwd_producer_kernel<Steps, T, C, false>,
                                    flash_bwd_producer_kernel<Steps, T, C, true>};
  const cudaError_t opt_in =
      device::allow_shared_memory(C::kSmemBytes, kernels[0], kernels[1]);
  ATTN_CUDA_RETURN(opt_in);
  int key_blocks = 0;
  unsigned blocks = 0;
  if (Status s = key_block_grid(p, C::kKeys, key_blocks, blocks); !s) return s;
  kernels[p.causal ? 1 : 0]<<<blocks, C::kThreads, C::kSmemBytes, stream>>>(maps, a, key_blocks,
                                                                            dq_sum, hang);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The dQ sums (zeroed), one of the two tensor-core kernels, dQ's store. kHopper: the wgmma
// kernel (C is HopperBwdConfig), else the mma.sync kernel (C is BwdConfig).
template <class Steps, class T, class C, bool kHopper>
Status launch_tensor_cores(RowsArgs<T> a, Scratch& scratch, cudaStream_t stream) {
  const Problem& p = a.p;
  constexpr int D = C::D;
  if (Status s = require_sm80("module 11"); !s) return s;
  const int64_t sums = int64_t(p.batch) * p.heads * a.rows_pad * D;
  ATTN_CUDA_RETURN(cudaMallocAsync(&scratch.dq_sum, sums * sizeof(float), stream));
  ATTN_CUDA_RETURN(cudaMemsetAsync(scratch.dq_sum, 0, sums * sizeof(float), stream));
  const bool vec = p.head_dim % 8 == 0 && rows_aligned16(a.q, p.q, 2) &&
                   rows_aligned16(a.k, p.k, 2) && rows_aligned16(a.v, p.v, 2) &&
                   rows_aligned16(a.dout, p.o, 2) && rows_aligned16(a.dk, p.k, 2) &&
                   rows_aligned16(a.dv, p.v, 2);
  constexpr bool kProducer = [] {  // the wgmma kernel with a producer warpgroup
    if constexpr (kHopper) return C::kProducer;
    else return false;
  }();
  if constexpr (kProducer) {
    if (Status s = launch_producer<Steps, T, C>(a, vec, scratch.dq_sum, stream); !s) return s;
  } else {
    if (Status s = launch_key_blocks<Steps, T, C, kHopper>(a, vec, scratch.dq_sum, stream); !s)
      return s;
  }
  constexpr bool kBlocked = [] {  // the wgmma kernel's bulk reductions add 64 x 64 blocks
    if constexpr (kHopper) return C::kDqBulk;
    else return false;
  }();
  const int row_blocks = RowChunks<T, D>::row_blocks(a.rows_pad);
  const unsigned blocks = unsigned(row_blocks * int64_t(p.batch) * p.heads);
  if (p.head_dim % 8 == 0 && rows_aligned16(a.dq, p.q, 2))
    store_dq_kernel<T, D, kBlocked, true><<<blocks, kPrepareBlock, 0, stream>>>(a, scratch.dq_sum,
                                                                                row_blocks);
  else
    store_dq_kernel<T, D, kBlocked, false><<<blocks, kPrepareBlock, 0, stream>>>(
        a, scratch.dq_sum, row_blocks);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// The kernel Path::fastest runs, from the measurements of bench_11 on the H200 (README,
// section 5): on a Hopper GPU with this build's sm_90a code the wgmma kernel (with its producer
// warpgroup it is ahead of the mma.sync kernel at both head dims from N = 1024 on), else the
// mma.sync kernel.
inline Path fastest_path(const Problem& p) {
  if (p.dtype == DType::f32) return Path::rows;
  return hopper_available() ? Path::hopper : Path::tensor_cores;
}

// C64, C128: the mma.sync kernel's configurations for head dims up to 64 and up to 128; H64,
// H128: the wgmma kernel's (the benchmark's ladder times others).
template <class Steps, class C64 = Production64, class C128 = Production128,
          class H64 = HopperBwdConfig<64>, class H128 = HopperBwdConfig<128>>
Status backward(const Problem& p, const void* q, const void* k, const void* v, const void* o,
                const void* dout, const float* lse, void* dq, void* dk, void* dv,
                cudaStream_t stream, Path path = Path::fastest) {
  if (Status s = supports(p); !s) return s;
  if (Status s = check_grid(p); !s) return s;
  if (p.dtype == DType::f32) path = Path::rows;  // the tensor cores take 16-bit operands
  if (path == Path::fastest) path = fastest_path(p);
  if (path == Path::hopper && !hopper_available())
    return Status::error("module 11: the wgmma kernel needs a Hopper GPU (compute capability "
                         "9.x) and a build with sm_90a code (-DCMAKE_CUDA_ARCHITECTURES=90)");
  return with_type(p.dtype, [&](auto t) -> Status {
    using T = decltype(t);
    RowsArgs<T> a = rows_args<T>(p, q, k, v, o, dout);
    a.dq = static_cast<T*>(dq), a.dk = static_cast<T*>(dk), a.dv = static_cast<T*>(dv);
    Scratch scratch;
    scratch.stream = stream;
    const int64_t rows = int64_t(p.batch) * p.heads * a.rows_pad;
    ATTN_CUDA_RETURN(cudaMallocAsync(&scratch.rows, 2 * rows * sizeof(float), stream));
    a.lse2 = scratch.rows;
    a.delta = scratch.rows + rows;
    return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) -> Status {
      constexpr int D = decltype(d)::value;
      using Rows = RowChunks<T, D>;
      const int row_blocks = Rows::row_blocks(a.rows_pad);
      const unsigned blocks = unsigned(row_blocks * int64_t(p.batch) * p.heads);
      if (p.head_dim % Rows::kElems == 0 && rows_aligned16(a.o, p.o, sizeof(T)) &&
          rows_aligned16(a.dout, p.o, sizeof(T)))
        prepare_rows_kernel<T, D, true><<<blocks, kPrepareBlock, 0, stream>>>(a, lse, row_blocks);
      else
        prepare_rows_kernel<T, D, false><<<blocks, kPrepareBlock, 0, stream>>>(a, lse, row_blocks);
      ATTN_CUDA_RETURN(cudaGetLastError());
      if constexpr (!std::is_same_v<T, float>) {
        using C = std::conditional_t<D == 64, C64, C128>;
        if (path == Path::tensor_cores)
          return launch_tensor_cores<Steps, T, C, false>(a, scratch, stream);
        if (path == Path::hopper)
          return launch_tensor_cores<Steps, T, std::conditional_t<D == 64, H64, H128>, true>(
              a, scratch, stream);
      }
      dkdv_rows_kernel<Steps, T, D>
          <<<row_grid(p.seq_k, int64_t(p.batch) * p.kv_heads), kRowThreads, 0, stream>>>(
              a, (p.seq_k + kRowThreads - 1) / kRowThreads);
      ATTN_CUDA_RETURN(cudaGetLastError());
      dq_rows_kernel<Steps, T, D>
          <<<row_grid(p.seq_q, int64_t(p.batch) * p.heads), kRowThreads, 0, stream>>>(
              a, (p.seq_q + kRowThreads - 1) / kRowThreads);
      ATTN_CUDA_RETURN(cudaGetLastError());
      return Status::ok();
    });
  });
}

}  // namespace attn::m11

#define ATTN_M11_DEFINE_ENTRY_POINTS(Steps)                                                   \
  Status forward_lse(const Problem& p, const void* q, const void* k, const void* v, void* o, \
                     float* lse, cudaStream_t stream) {                                       \
    return ::attn::m11::forward_lse<Steps>(p, q, k, v, o, lse, stream);                       \
  }                                                                                           \
  Status forward16(const Problem& p, const void* q, const void* k, const void* v, void* o,    \
                   cudaStream_t stream) {                                                     \
    if (Status s = supports(p); !s) return s;                                                 \
    return ::attn::m07::launch<::attn::m07::backward_warp::WarpMma>(p, q, k, v, o, stream);   \
  }                                                                                           \
  Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,  \
                 cudaStream_t stream) {                                                       \
    float* lse = nullptr;                                                                     \
    const size_t bytes = sizeof(float) * size_t(p.batch) * p.heads * p.seq_q;                 \
    ATTN_CUDA_RETURN(cudaMallocAsync(&lse, bytes, stream));                                   \
    const Status s = forward_lse(p, q, k, v, o, lse, stream);                                 \
    ATTN_CUDA_RETURN(cudaFreeAsync(lse, stream));                                             \
    return s;                                                                                 \
  }                                                                                           \
  Status backward(const Problem& p, const void* q, const void* k, const void* v,              \
                  const void* o, const void* dout, const float* lse, void* dq, void* dk,      \
                  void* dv, cudaStream_t stream) {                                            \
    return ::attn::m11::backward<Steps>(p, q, k, v, o, dout, lse, dq, dk, dv, stream);        \
  }                                                                                           \
  bool hopper_kernel_available() { return ::attn::m11::hopper_available(); }                 \
  Status backward_on(Path path, const Problem& p, const void* q, const void* k, const void* v,\
                     const void* o, const void* dout, const float* lse, void* dq, void* dk,   \
                     void* dv, cudaStream_t stream) {                                         \
    return ::attn::m11::backward<Steps>(p, q, k, v, o, dout, lse, dq, dk, dv, stream, path);  \
  }
