// What GPU we run on and what it can do at most: the ceilings every measured number is
// printed beside (a TFLOP/s figure means little without the peak it is a fraction of).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace attn {

// Number of CUDA devices; 0 when there is no GPU or no driver (never throws).
int cuda_device_count();
// One line for "no GPU" situations: why cudaGetDeviceCount found nothing ("no NVIDIA GPU or
// driver found on this machine ..." when the NVIDIA driver is not installed at all).
std::string no_device_reason();
// Whether the NVIDIA driver's library (libcuda.so.1) can be loaded.
bool nvidia_driver_present();

// Host memory available to a new allocation, in bytes (0 when it cannot be read).
double available_host_memory_bytes();

struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_memory = 0, free_memory = 0;
  int l2_bytes = 0;
  int smem_per_block_optin = 0;  // shared memory a block may use after opting in
  int smem_per_sm = 0;
  int regs_per_sm = 0;
  int max_threads_per_sm = 0;
  int sm_clock_khz = 0;          // boost clock as the driver reports it
  int mem_clock_khz = 0;
  int mem_bus_bits = 0;
  // Ceilings from the spec sheet arithmetic, not measured:
  //  fp32: SMs x FP32 lanes per SM x 2 flops (FMA) x clock
  //  bandwidth: 2 (double data rate) x memory clock x bus width
  double peak_fp32_tflops = 0.0;
  double peak_bandwidth_gbs = 0.0;

  std::string summary() const;  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
};

// Queries device `device` (throws CudaError if it cannot).
DeviceInfo query_device(int device = 0);

// Two attributes of the current device (cudaGetDevice), cheap enough to ask at every launch
// (host-side lookups, unlike query_device): the compute capability as 10 * major + minor and
// the SM count; 0 when there is no usable GPU.
int current_compute_capability();
int current_sm_count();

// Ok on a GPU of compute capability 8.0 or newer (the tensor-core modules' bf16 mma.sync and
// cp.async need it; the course also builds for sm_75). Otherwise one line: "<module> needs an
// Ampere or newer GPU (sm_80+: bf16 mma.sync, cp.async); this one is sm_75".
Status require_sm80(const char* module);

// FP32 lanes per SM for a compute capability (128 on Volta..Hopper except sm_80 with 64).
int fp32_lanes_per_sm(int cc_major, int cc_minor);

}  // namespace attn
