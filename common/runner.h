// Running one registered kernel on host tensors: the piece the CLI, the benchmark and the
// grader share. It hides where the kernel runs (CPU module 00 or a GPU module), poisons the
// output first (so unwritten elements are caught), and checks every CUDA error.
#pragma once

#include <cstdint>
#include <vector>

#include "common/compare.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/status.h"

namespace attn {

struct Inputs {
  std::vector<float> q, k, v;
  uint64_t seed = 0;
};

// Uniform random Q, K, V in [-range, range) for `p`'s layout, from `seed`.
// A larger range gives larger logits (scores grow with range^2 * head_dim * scale).
Inputs random_inputs(const Problem& p, uint64_t seed, float range = 1.0f);

// Elements of poisoned guard space allocated after O: a kernel that writes past the end of
// its output (a missing bounds check in the last block) lands there and is caught.
constexpr int64_t kGuardElements = 4096;

// Runs `kernel` once. On success `out` holds p.o_elements() values (device results are
// copied back) and `guard_writes` (if given) counts guard elements that were overwritten.
// Returns the kernel's own error (unsupported shape) or a CUDA error; a GPU fault during
// the launch is reported here, with file and line.
Status run_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out, int64_t* guard_writes = nullptr);

// run_kernel + the double reference + compare_output.
struct CheckResult {
  Status status = Status::ok();  // the kernel ran (or why not)
  Comparison comparison;         // valid when status is ok
  std::vector<float> output;
  std::vector<double> reference;
  int64_t guard_writes = 0;      // writes past the end of O (see kGuardElements)
  Backend backend = Backend::gpu;
  bool passed() const { return status.is_ok() && comparison.passed() && guard_writes == 0; }
};
CheckResult check_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                         double tolerance = kFp32Tolerance);

}  // namespace attn
