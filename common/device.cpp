#include "common/device.h"

#include <cuda_runtime.h>

#include <dlfcn.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/cuda_check.h"

namespace attn {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

bool nvidia_driver_present() {
  // The CUDA runtime talks to the GPU through the driver's library, libcuda.so.1, which the
  // NVIDIA driver installs (the toolkit only ships a stub for linking). Without it the
  // runtime reports "driver version is insufficient", which is misleading on a machine that
  // has no NVIDIA GPU at all.
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (err == cudaSuccess && count > 0) return "";
  if (!nvidia_driver_present())
    return "no NVIDIA GPU or driver found on this machine (libcuda.so.1 is not installed)";
  if (err == cudaSuccess || err == cudaErrorNoDevice) return "no CUDA device found";
  if (err == cudaErrorInsufficientDriver)
    return std::string("the NVIDIA driver is older than this CUDA runtime needs (") +
           cudaGetErrorString(err) + "): update the driver or build with an older toolkit";
  return std::string("no CUDA device available: ") + cudaGetErrorString(err);
}

double available_host_memory_bytes() {
  // MemAvailable: what the kernel can hand out without swapping (free + reclaimable cache).
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0.0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024.0;
    meminfo.ignore(256, '\n');
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

int fp32_lanes_per_sm(int cc_major, int cc_minor) {
  if (cc_major == 8 && cc_minor == 0) return 64;  // A100: 64 FP32 lanes per SM
  return 128;  // Volta/Turing 64+64 INT, Ampere GA10x, Ada, Hopper: 128
}

int current_compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return 0;
  return 10 * major + minor;
}

int current_sm_count() {
  int device = 0, n = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  return n;
}

Status require_sm80(const char* module) {
  const int cc = current_compute_capability();
  if (cc >= 80) return Status::ok();
  return Status::error(std::string(module) + " needs an Ampere or newer GPU (sm_80+: bf16 "
                       "mma.sync, cp.async); this one is sm_" + std::to_string(cc));
}

DeviceInfo query_device(int device) {
  cudaDeviceProp prop{};
  ATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = prop.l2CacheSize;
  info.smem_per_block_optin = int(prop.sharedMemPerBlockOptin);
  info.smem_per_sm = int(prop.sharedMemPerMultiprocessor);
  info.regs_per_sm = prop.regsPerMultiprocessor;
  info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  // Clock fields left cudaDeviceProp in CUDA 13; the attributes remain.
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.sm_clock_khz, cudaDevAttrClockRate, device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  size_t free_bytes = 0, total_bytes = 0;
  ATTN_CUDA_CHECK(cudaSetDevice(device));
  ATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_memory = free_bytes;
  info.peak_fp32_tflops = double(info.sm_count) * fp32_lanes_per_sm(prop.major, prop.minor) * 2.0 *
                          info.sm_clock_khz * 1e3 / 1e12;
  info.peak_bandwidth_gbs = 2.0 * info.mem_clock_khz * 1e3 * (info.mem_bus_bits / 8.0) / 1e9;
  return info;
}

std::string DeviceInfo::summary() const {
  char line[256];
  std::snprintf(line, sizeof line, "%s (sm_%d%d, %d SMs, %.1f GiB)", name.c_str(), cc_major,
                cc_minor, sm_count, double(total_memory) / (1 << 30));
  return line;
}

}  // namespace attn
