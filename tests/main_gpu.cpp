// doctest main for GPU tests. Without a usable GPU, or on one the grader's module cannot use
// (tests/support.h, require_gpu: module 09 needs compute capability 9.x), it prints why and
// exits with 77, which CTest reports as "skipped" (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "common/device.h"
#include "tests/support.h"

int main(int argc, char** argv) {
  if (attn::cuda_device_count() == 0) {
    std::printf("skipped: %s\n", attn::no_device_reason().c_str());
    return 77;
  }
  const attn::DeviceInfo device = attn::query_device();
  std::printf("device %s\n", device.summary().c_str());
  // What this grader's module needs beyond a CUDA GPU (tests/support.h, require_gpu).
  if (const std::string why = attn::testing::unmet_gpu_requirement(device); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  std::printf("seed %llu (replay with ATTN_SEED=%llu)\n",
              (unsigned long long)attn::testing::base_seed(),
              (unsigned long long)attn::testing::base_seed());
  doctest::Context context(argc, argv);
  attn::testing::set_run_context(&context);  // a fault that loses the GPU ends the run
  return context.run();
}
