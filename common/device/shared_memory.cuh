// The device layer: the opt-in for more than 48 KiB of dynamic shared memory.
//
// A launch may ask for up to 48 KiB of dynamic shared memory by default; beyond that (up to
// 227 KiB a block on Hopper, 163 KiB on A100) the kernel must first be allowed it with
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) (the
// attribute stays set for the program). Launchers call this before every launch; it sets the
// attribute once per kernel and remembers it:
//   ATTN_CUDA_RETURN(device::allow_shared_memory(C::kSmemBytes, kernel));
// It remembers kernels by address, so a launcher needs no function-local static of its own
// (a static in an inline launcher is one object for the whole program, while a kernel's
// address may differ between files: CMakeLists.txt, -static-global-template-stub).
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <map>
#include <mutex>

namespace attn::device {

// The kernels (by address) already allowed, and how many bytes; one lock for the whole table.
struct AllowedSharedMemory {
  std::mutex mutex;
  std::map<const void*, int> bytes;
};
inline AllowedSharedMemory& allowed_shared_memory() {
  static AllowedSharedMemory allowed;
  return allowed;
}

template <class Kernel>
cudaError_t allow_one(int bytes, Kernel kernel) {
  AllowedSharedMemory& allowed = allowed_shared_memory();
  const std::lock_guard<std::mutex> lock(allowed.mutex);
  const void* key = reinterpret_cast<const void*>(kernel);
  if (auto it = allowed.bytes.find(key); it != allowed.bytes.end() && it->second >= bytes)
    return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) allowed.bytes[key] = bytes;
  return e;
}

// Allows every kernel in `kernels` `bytes` of dynamic shared memory; tries them all and
// returns the first error, or cudaSuccess.
template <class... Kernels>
cudaError_t allow_shared_memory(int bytes, Kernels... kernels) {
  cudaError_t first = cudaSuccess;
  for (cudaError_t e : {allow_one(bytes, kernels)...})
    if (first == cudaSuccess) first = e;
  return first;
}

}  // namespace attn::device
