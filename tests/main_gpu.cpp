// doctest main for GPU tests. Without a usable GPU it prints why and exits with 77, which
// CTest reports as "skipped" (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "common/device.h"
#include "tests/support.h"

int main(int argc, char** argv) {
  if (attn::cuda_device_count() == 0) {
    std::printf("skipped: %s\n", attn::no_device_reason().c_str());
    return 77;
  }
  std::printf("device %s\n", attn::query_device().summary().c_str());
  std::printf("seed %llu (replay with ATTN_SEED=%llu)\n",
              (unsigned long long)attn::testing::base_seed(),
              (unsigned long long)attn::testing::base_seed());
  doctest::Context context(argc, argv);
  return context.run();
}
