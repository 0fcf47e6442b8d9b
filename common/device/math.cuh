// The device layer: softmax arithmetic shared by every kernel of the course.
//
// Every kernel from module 03 on computes exp(x) as exp2(x * log2(e)): the GPU's special
// function unit evaluates 2^x in one instruction (ex2.approx), while expf is a longer
// sequence. Multiplying q by softmax_scale * log2(e) once, when it is loaded, puts every
// score in base-2 units for free (module 03's lesson, section 2).
#pragma once

namespace attn::device {

// log2(e): exp(x) = 2^(x * kLog2e).
constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special-function unit: one MUFU.EX2, flushing subnormal results to 0 (ftz);
// 2^-inf = +0. exp2f without --use_fast_math adds a range check and two multiplies per call
// to get subnormal results right, which a softmax never needs (a probability below 2^-126 is
// 0 for every purpose here). The tensor-core kernels (modules 07 and 09) call this.
#if defined(__CUDACC__)
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// tanh(x) on the special-function unit: one MUFU.TANH (sm_75+), relative error at most ~2^-11
// (PTX ISA, tanh.approx.f32). tanhf is a longer sequence of exp and division; module 12's
// soft-capping calls this once per score, beside the softmax's own exp2 on the same unit.
__device__ __forceinline__ float fast_tanh(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}
#endif

}  // namespace attn::device
