// Seeded random inputs. Every check draws fresh inputs from a printed seed, so a failure
// can be replayed exactly (`attn run ... --seed N`). The generator is our own small one
// (splitmix64) so the same seed gives the same numbers with any compiler or standard library.
#pragma once

#include <cstdint>
#include <vector>

namespace attn {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  // Uniform in [lo, hi).
  float uniform(float lo, float hi);

 private:
  uint64_t state_;
};

// Fills `values` with uniform numbers in [lo, hi). Values are never all zero: zeros hide
// unwritten outputs and wrong indexing.
void fill_uniform(std::vector<float>& values, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// A seed that differs from run to run (time and address entropy), for "fresh" inputs.
uint64_t fresh_seed();

}  // namespace attn
