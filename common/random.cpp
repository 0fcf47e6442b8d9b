#include "common/random.h"

#include <chrono>
#include <random>

namespace attn {

uint64_t Rng::next_u64() {
  // splitmix64: a tiny generator with good statistical quality for test data.
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const double unit = double(next_u64() >> 11) * 0x1.0p-53;  // 53 random bits in [0, 1)
  return float(lo + (double(hi) - lo) * unit);
}

void fill_uniform(std::vector<float>& values, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  for (float& x : values) x = rng.uniform(lo, hi);
}

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t now = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  // Kept to 6 digits so a learner can retype it after `--seed`.
  return ((uint64_t(device()) << 32) ^ now) % 1000000;
}

}  // namespace attn
