// Turning a failed comparison into hints in the learner's terms: not "rel err 0.7" but
// "outputs for queries >= 64 were never written: the grid covers too few queries".
// The hints are general (they know the problem, not the module); each module's grader adds
// the lesson section to read.
#pragma once

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/runner.h"

namespace attn {

// Empty when the check passed. Tries a few "classic bug" models too (a missing softmax scale,
// a causal mask ignored) by recomputing the reference as the buggy code would.
std::vector<std::string> diagnose(const Problem& p, const Inputs& in, const CheckResult& r);

// True when the kernel's output in `r` passes the comparison (same tolerance) against `model`:
// an output computed as a classic bug would compute it. The hints above and the graders'
// module-specific hints use it to name the bug.
bool matches(const Problem& p, const CheckResult& r, const std::vector<double>& model);

}  // namespace attn
