// The device layer: one element of a tensor to float and back, for the kernels that take any
// of the course's element types (fp32, f16, bf16) and compute in fp32: a load converts once,
// the arithmetic is fp32 whatever the storage, a store rounds once (to nearest).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attn::device {

#if defined(__CUDACC__)
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
#endif

}  // namespace attn::device
