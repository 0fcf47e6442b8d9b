// doctest main for the graders built against the CPU emulation (grade_NN_cpu, check_NN_cpu):
// the module's kernel runs on the CPU, one fiber per CUDA thread (common/emulation/).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/support.h"

int main(int argc, char** argv) {
  std::printf("emulated on the CPU: correctness only, no timing (no GPU needed; small shapes)\n");
  std::printf("seed %llu (replay with ATTN_SEED=%llu)\n",
              (unsigned long long)attn::testing::base_seed(),
              (unsigned long long)attn::testing::base_seed());
  doctest::Context context(argc, argv);
  return context.run();
}
