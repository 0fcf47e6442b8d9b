// The CPU emulation of the CUDA execution model: enough of CUDA C++ and of the CUDA runtime
// for the kernels of modules 01-04 (and the harness around them) to compile as plain C++ and
// run on the CPU, so that they can be graded on a machine without an NVIDIA GPU.
//
// How a kernel runs here (common/emulation/runtime.cpp):
//  * every CUDA thread of a block is a fiber (its own stack); the threads of a block take
//    turns, and a thread gives the CPU to the next one only where it has to wait: at
//    __syncthreads(), at a warp shuffle or vote, at __syncwarp(), or when it returns. So a
//    barrier really holds every thread until all of them arrived, and a shuffle really reads
//    the other lanes' values. Blocks run one after the other.
//  * the module's source is compiled with compiler-inserted checks on every load and store
//    (GCC/Clang -fsanitize=thread's instrumentation, calling into runtime.cpp), which
//    find, with the thread and the source line: reads and writes outside cudaMalloc'd
//    buffers and outside __shared__ arrays, shared-memory races (a read of a value another
//    thread wrote since the last __syncthreads(), two writes, a write over a value another
//    thread read), reads of shared memory that no thread of the block has written, global
//    writes and reads that race between threads of one launch, and misaligned vector accesses.
//  * `kernel<<<grid, block, smem, stream>>>(args)` is not C++: the build copies the module's
//    sources through common/emulation/rewrite.cpp, which turns the launch into
//    `kernel, attn::emu::launch_config(...)(args)` and each `__shared__` declaration into a
//    reference to the block's shared memory (see the functions at the end of this file). The
//    learner's files themselves are never changed; compiler messages name their lines.
// What it cannot tell: time (an emulated kernel runs orders of magnitude slower than on a GPU,
// and nothing here models coalescing, bank conflicts, occupancy or caches), and races that
// the one order in which it runs the threads does not expose through the checks above
// (README of module 01, section "Without a GPU").
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef ATTN_EMULATION
#define ATTN_EMULATION 1
#endif

// ---- Function and variable qualifiers -----------------------------------------------------
#define __global__
#define __device__
#define __host__
// No __noinline__: libstdc++ (GCC 12 and later) writes __attribute__((__noinline__)) in its
// own headers, which a macro of that name would break; no module uses it.
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__
#define __managed__
#define __grid_constant__
// The build rewrites every `__shared__` declaration (common/emulation/rewrite.cpp); one that
// reaches the compiler was in a form the rewrite does not know (at namespace scope, or several
// names in one declaration), and this name in the error says so.
#define __shared__ attn_emulation_cannot_rewrite_this_shared_declaration

// ---- Vector types ---------------------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define ATTN_EMU_VEC2(T, name, al) \
  struct alignas(al) name { T x, y; }; \
  inline name make_##name(T x, T y) { return name{x, y}; }
#define ATTN_EMU_VEC3(T, name) \
  struct name { T x, y, z; }; \
  inline name make_##name(T x, T y, T z) { return name{x, y, z}; }
#define ATTN_EMU_VEC4(T, name, al) \
  struct alignas(al) name { T x, y, z, w; }; \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }
ATTN_EMU_VEC2(float, float2, 8)
ATTN_EMU_VEC3(float, float3)
ATTN_EMU_VEC4(float, float4, 16)
ATTN_EMU_VEC2(int, int2, 8)
ATTN_EMU_VEC3(int, int3)
ATTN_EMU_VEC4(int, int4, 16)
ATTN_EMU_VEC2(unsigned, uint2, 8)
ATTN_EMU_VEC4(unsigned, uint4, 16)
ATTN_EMU_VEC2(double, double2, 16)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
#undef ATTN_EMU_VEC2
#undef ATTN_EMU_VEC3
#undef ATTN_EMU_VEC4

// ---- The runtime API, as far as the course uses it -------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
  int regsPerMultiprocessor;
};

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);
namespace attn::emu {
cudaError_t set_function_attribute(const void* func, cudaFuncAttribute attr, int value);
}
template <class F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return ::attn::emu::set_function_attribute(reinterpret_cast<const void*>(func), attr, value);
}

// ---- Inside a kernel: where am I ------------------------------------------------------------
namespace attn::emu {

struct Where {
  const char* file;
  int line;
};

// What the built-in variables read; the runtime points t_builtins at the running thread's.
struct Builtins {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern __thread const Builtins* t_builtins;

}  // namespace attn::emu

#define threadIdx (::attn::emu::t_builtins->thread_idx)
#define blockIdx (::attn::emu::t_builtins->block_idx)
#define blockDim (::attn::emu::t_builtins->block_dim)
#define gridDim (::attn::emu::t_builtins->grid_dim)
constexpr int warpSize = 32;

// ---- Synchronization: barriers and warp-level operations --------------------------------------
namespace attn::emu {

void syncthreads(Where where);
int syncthreads_reduce(Where where, int kind, int predicate);  // kind: 0 count, 1 and, 2 or
void syncwarp(Where where, unsigned mask = 0xffffffffu);
// A warp shuffle of up to 8 bytes: kind 0 idx (arg = source lane), 1 up, 2 down, 3 xor.
uint64_t shuffle(Where where, unsigned mask, int kind, uint64_t bits, int arg, int width);
// A warp vote: kind 0 ballot, 1 all, 2 any.
unsigned vote(Where where, unsigned mask, int kind, int predicate);
unsigned active_mask();
[[noreturn]] void trap(Where where);

template <class T>
T shuffle_as(Where where, unsigned mask, T value, int kind, int arg, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>,
                "warp shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &value, sizeof(T));
  bits = shuffle(where, mask, kind, bits, arg, width);
  T result;
  memcpy(&result, &bits, sizeof(T));
  return result;
}

}  // namespace attn::emu

#define __syncthreads() ::attn::emu::syncthreads({__FILE__, __LINE__})
#define __syncthreads_count(p) ::attn::emu::syncthreads_reduce({__FILE__, __LINE__}, 0, (p))
#define __syncthreads_and(p) ::attn::emu::syncthreads_reduce({__FILE__, __LINE__}, 1, (p))
#define __syncthreads_or(p) ::attn::emu::syncthreads_reduce({__FILE__, __LINE__}, 2, (p))
#define __syncwarp(...) ::attn::emu::syncwarp({__FILE__, __LINE__}, ##__VA_ARGS__)
#define __shfl_sync(mask, var, ...) \
  ::attn::emu::shuffle_as({__FILE__, __LINE__}, (mask), (var), 0, __VA_ARGS__)
#define __shfl_up_sync(mask, var, ...) \
  ::attn::emu::shuffle_as({__FILE__, __LINE__}, (mask), (var), 1, __VA_ARGS__)
#define __shfl_down_sync(mask, var, ...) \
  ::attn::emu::shuffle_as({__FILE__, __LINE__}, (mask), (var), 2, __VA_ARGS__)
#define __shfl_xor_sync(mask, var, ...) \
  ::attn::emu::shuffle_as({__FILE__, __LINE__}, (mask), (var), 3, __VA_ARGS__)
#define __ballot_sync(mask, p) ::attn::emu::vote({__FILE__, __LINE__}, (mask), 0, (p))
#define __all_sync(mask, p) int(::attn::emu::vote({__FILE__, __LINE__}, (mask), 1, (p)))
#define __any_sync(mask, p) int(::attn::emu::vote({__FILE__, __LINE__}, (mask), 2, (p)))
#define __activemask() ::attn::emu::active_mask()
#define __trap() ::attn::emu::trap({__FILE__, __LINE__})
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __nanosleep(unsigned) {}

// ---- Device math and intrinsics -------------------------------------------------------------
// The fast-math intrinsics compute the exact function here: the emulation checks correctness,
// and the GPU's approximations are within the course's tolerances.
inline float __expf(float x) { return expf(x); }
inline float __exp2f(float x) { return exp2f(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(floorf(x)); }
inline int __float2int_ru(float x) { return int(ceilf(x)); }
inline float __int2float_rn(int i) { return float(i); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
long long clock64();

// CUDA's min and max: overloads in the global namespace, as the device headers declare them.
#define ATTN_EMU_MINMAX(T)                          \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
ATTN_EMU_MINMAX(int)
ATTN_EMU_MINMAX(unsigned)
ATTN_EMU_MINMAX(long)
ATTN_EMU_MINMAX(unsigned long)
ATTN_EMU_MINMAX(long long)
ATTN_EMU_MINMAX(unsigned long long)
#undef ATTN_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline unsigned min(int a, unsigned b) { return min(unsigned(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, unsigned(b)); }
inline unsigned max(int a, unsigned b) { return max(unsigned(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, unsigned(b)); }
inline long long min(int a, long long b) { return min((long long)a, b); }
inline long long min(long long a, int b) { return min(a, (long long)b); }
inline long long max(int a, long long b) { return max((long long)a, b); }
inline long long max(long long a, int b) { return max(a, (long long)b); }

// Cache-hinted loads and stores are plain loads and stores here (checked like any other).
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// Atomics: checked for bounds, never counted as races (that is what they are for).
namespace attn::emu {
// The runtime reads and writes the atomic's memory itself, outside the checked code.
void atomic_read(const void* address, void* value, size_t bytes);
void atomic_write(void* address, const void* value, size_t bytes);
template <class T, class Op>
__attribute__((always_inline)) inline T atomic_update(T* address, Op op) {
  T old;
  atomic_read(address, &old, sizeof(T));
  const T updated = op(old);
  atomic_write(address, &updated, sizeof(T));
  return old;
}
}  // namespace attn::emu
template <class T> inline T atomicAdd(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return T(o + v); });
}
template <class T> inline T atomicSub(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return T(o - v); });
}
template <class T> inline T atomicExch(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T) { return v; });
}
template <class T> inline T atomicMax(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return o < v ? v : o; });
}
template <class T> inline T atomicMin(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return v < o ? v : o; });
}
template <class T> inline T atomicAnd(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return T(o & v); });
}
template <class T> inline T atomicOr(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return T(o | v); });
}
template <class T> inline T atomicXor(T* a, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return T(o ^ v); });
}
template <class T> inline T atomicCAS(T* a, T compare, T v) {
  return ::attn::emu::atomic_update(a, [&](T o) { return o == compare ? v : o; });
}

// ---- Launches: kernel<<<grid, block, smem, stream>>>(args) -----------------------------------
// The rewrite turns the launch into `kernel, attn::emu::launch_config(file, line, grid, block,
// smem, stream)(args)`: launch_config(...)(args) keeps copies of the arguments, and the comma
// operator below, which sees the kernel's parameter types, runs the kernel on them. Each CUDA
// thread gets its own copy of the arguments, converted to the parameter types, as on a GPU.
namespace attn::emu {

// gridDim.y and gridDim.z stop at 65535 on a GPU. The graders check that a kernel does not
// put batch * heads there by launching more heads than that; here the limit is lower, so
// that the check runs on 300 heads instead of 70000 (tests/support.h, grid_limit_problem).
constexpr unsigned kGridYZLimit = 255;

struct LaunchSpec {
  dim3 grid, block;
  size_t dynamic_smem;
  cudaStream_t stream;
  Where where;
  const void* kernel;
};

// Runs body(context) once per thread of every block of the launch (returns when all ran or
// the emulation found an error, which cudaGetLastError / cudaDeviceSynchronize then report).
void run_launch(const LaunchSpec& spec, void (*body)(void*), void* context);
// A launch that was never performed: the comma operator below did not match the kernel.
void launch_not_performed(const Where& where);

template <class... Args>
struct PendingLaunch {
  LaunchSpec spec;
  std::tuple<Args...> args;
  bool performed = false;
  PendingLaunch(const LaunchSpec& s, std::tuple<Args...>&& a) : spec(s), args(std::move(a)) {}
  PendingLaunch(const PendingLaunch&) = delete;
  ~PendingLaunch() {
    if (!performed) launch_not_performed(spec.where);
  }
};

struct LaunchConfig {
  LaunchSpec spec;
  template <class... Args>
  PendingLaunch<std::decay_t<Args>...> operator()(Args&&... args) const {
    return PendingLaunch<std::decay_t<Args>...>(
        spec, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...));
  }
};

inline LaunchConfig launch_config(const char* file, int line, dim3 grid, dim3 block,
                                  size_t dynamic_smem = 0, cudaStream_t stream = nullptr) {
  return LaunchConfig{LaunchSpec{grid, block, dynamic_smem, stream, Where{file, line}, nullptr}};
}

template <class... Params, class... Args>
void operator,(void (*kernel)(Params...), PendingLaunch<Args...>&& pending) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "the launch passes a different number of arguments than the kernel takes");
  pending.performed = true;
  struct Call {
    void (*kernel)(Params...);
    const std::tuple<Args...>* args;
    static void run(void* self) {
      const Call* call = static_cast<const Call*>(self);
      std::tuple<Args...> mine = *call->args;  // this thread's own copy of the arguments
      std::apply(call->kernel, mine);
    }
  };
  Call call{kernel, &pending.args};
  pending.spec.kernel = reinterpret_cast<const void*>(kernel);
  run_launch(pending.spec, &Call::run, &call);
}

// ---- __shared__ declarations ----------------------------------------------------------------
// `__shared__ float tile[32][64];` becomes `float (&tile)[32][64] =
// attn::emu::shared_variable<float[32][64]>(...)`: every thread of the block gets a reference
// to the same object in the block's shared memory, which the runtime lays out with unused gaps
// between the arrays (to catch out-of-bounds indices) and fills with NaN bytes at the start of
// every block (shared memory starts with garbage on a GPU as well).
struct SharedDeclaration {
  const char* name;          // "k_tile"
  const char* type;          // "float" (the element type as written)
  size_t bytes, align, element_bytes;
  int rank;                  // 0 for a scalar
  const size_t* extents;     // rank entries
  Where where;
};
void* shared_allocate(const void* site, const SharedDeclaration& declaration);
void* dynamic_shared_allocate(const void* site, const SharedDeclaration& declaration);

template <class T, class Indices>
struct Extents;
template <class T, size_t... I>
struct Extents<T, std::index_sequence<I...>> {
  static constexpr size_t values[sizeof...(I) + 1] = {std::extent_v<T, I>..., 0};
};

template <class T, class Site>
T& shared_variable(size_t align, const char* name, const char* type, const char* file, int line,
                   Site) {
  static const char site = 0;  // one per declaration and per template instance around it
  constexpr int rank = int(std::rank_v<T>);
  const SharedDeclaration d{name, type, sizeof(T),
                            align > alignof(T) ? align : alignof(T),
                            sizeof(std::remove_all_extents_t<T>), rank,
                            Extents<T, std::make_index_sequence<rank>>::values, Where{file, line}};
  return *static_cast<T*>(shared_allocate(&site, d));
}

template <class T, class Site>
T* dynamic_shared(size_t align, const char* name, const char* type, const char* file, int line,
                  Site) {
  static const char site = 0;
  const SharedDeclaration d{name, type, 0, align > alignof(T) ? align : alignof(T), sizeof(T), 1,
                            nullptr, Where{file, line}};
  return static_cast<T*>(dynamic_shared_allocate(&site, d));
}

}  // namespace attn::emu
