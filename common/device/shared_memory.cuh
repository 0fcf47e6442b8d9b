// The device layer: the opt-in for more than 48 KiB of dynamic shared memory.
//
// A launch may ask for up to 48 KiB of dynamic shared memory by default; beyond that (up to
// 227 KiB a block on Hopper, 163 KiB on A100) the kernel must first be allowed it with
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), once per
// kernel (the attribute stays set for the program). Launchers call this from a function-local
// static, so the attribute is set on the first launch only:
//   static const cudaError_t opt_in = device::allow_shared_memory(C::kSmemBytes, kernel_a, kernel_b);
//   ATTN_CUDA_RETURN(opt_in);
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

namespace attn::device {

// Allows every kernel in `kernels` `bytes` of dynamic shared memory; tries them all and
// returns the first error, or cudaSuccess.
template <class... Kernels>
cudaError_t allow_shared_memory(int bytes, Kernels... kernels) {
  cudaError_t first = cudaSuccess;
  for (cudaError_t e : {cudaFuncSetAttribute(kernels, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             bytes)...})
    if (first == cudaSuccess) first = e;
  return first;
}

}  // namespace attn::device
