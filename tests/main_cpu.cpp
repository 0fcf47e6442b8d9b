// doctest main for tests that need no GPU: prints the seed so any failure can be replayed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/support.h"

int main(int argc, char** argv) {
  std::printf("seed %llu (replay with ATTN_SEED=%llu)\n",
              (unsigned long long)attn::testing::base_seed(),
              (unsigned long long)attn::testing::base_seed());
  doctest::Context context(argc, argv);
  return context.run();
}
