// RAII device buffers. A DeviceBuffer owns cudaMalloc'd memory and frees it when it goes out
// of scope, so an early return or a thrown CudaError never leaks GPU memory.
// Host-side tensors are plain std::vector<float>.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/cuda_check.h"

namespace attn {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) ATTN_CUDA_CHECK(cudaMalloc(&data_, bytes()));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    copy_from(host);
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // no throw from a destructor; errors surface on the next call
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }

  T* get() { return data_; }
  const T* get() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void copy_from(const std::vector<T>& host) {
    if (host.size() != count_) throw std::invalid_argument("DeviceBuffer::copy_from: size mismatch");
    if (count_ > 0) ATTN_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    if (count_ > 0) ATTN_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fill every byte with 0xFF. For float this is the NaN bit pattern 0xFFFFFFFF, which no
  // arithmetic produces (CUDA's computed NaN is 0x7FFFFFFF), so after a launch any element
  // still equal to it was never written: see kPoisonBits in poison.h.
  void poison() {
    if (count_ > 0) ATTN_CUDA_CHECK(cudaMemset(data_, 0xFF, bytes()));
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace attn
