// Host stand-ins for a module's entry points in the emulation tests read what the harness
// uploaded and write their answer back through the CPU emulation's cudaMemcpy.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/half.h"
#include "common/problem.h"

namespace attn::testing {

// `count` elements of type T from a device pointer (none when count <= 0).
template <class T>
std::vector<T> download(const void* device, int64_t count) {
  std::vector<T> host(size_t(std::max<int64_t>(count, 0)));
  if (count > 0) cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

// Writes O (rounded to t) to the start of the device buffer.
inline void upload_output(const std::vector<double>& o, DType t, void* device) {
  const std::vector<uint16_t> bits = to_bits16(std::vector<float>(o.begin(), o.end()), t);
  cudaMemcpy(device, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
}

}  // namespace attn::testing
