// The device layer: one element of a tensor to float and back, for the kernels that take any
// of the course's element types (fp32, f16, bf16) and compute in fp32: a load converts once,
// the arithmetic is fp32 whatever the storage, a store rounds once (to nearest).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// Two 16-bit elements packed in one 32-bit word (the lower index in the low half, as mma and
// ldmatrix lay them out) to floats. A bf16 is the top half of a float: the high element is the
// word with its low half cleared, the low one the word shifted up, one integer instruction each.
template <class T>
__device__ __forceinline__ float2 pair_to_float2(uint32_t pair) {
  static_assert(sizeof(T) == 2, "a pair of 16-bit elements");
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
  else
    return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// fp32 -> tf32 (fp32's sign and exponent, 10 of its 23 mantissa bits: the bit pattern with its
// low 13 bits zero), rounded to nearest, ties away from zero, in two integer instructions: add
// half a tf32 ulp (bit 12) to the bit pattern, then clear the low 13 bits; a carry out of the
// mantissa bumps the exponent, as rounding up should. Equal to cvt.rna.tf32.f32 for every
// finite x and for +-inf; a NaN can come out as another value, so use it where the rest of the
// computation keeps a NaN alive (3xTF32: small = x - big is NaN). Modules 07 and 09 split
// fp32 operands with it.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
#endif

}  // namespace attn::device
