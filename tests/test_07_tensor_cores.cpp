// Grader for module 07 (GPU): attention on the tensor cores, f16 and bf16. Built twice:
// grade_07 (exercise), check_07 (solution). Without a GPU it exits 77 (skipped).
//
// The checks, their shapes and the tolerance are tests/tensor_core_cases.h, shared with module
// 08 (the same kernel written with CuTe): the double-precision CPU attention on the same 16-bit
// inputs, relative L2 error within default_tolerance(dtype) (2e-3 for f16, 1e-2 for bf16). This
// file says which module runs and what a failure points at: the hints below and the sections
// of modules/07_tensor_cores/README.md.
#include <string>
#include <vector>

#include "common/runner.h"
#include "modules/07_tensor_cores/tensor_cores.h"
#include "tests/support.h"
#include "tests/tensor_core_cases.h"

using namespace attn;

namespace {

const char* kFragA = "modules/07_tensor_cores/README.md, section 2 (fragments: A from ldmatrix)";
const char* kMma = "modules/07_tensor_cores/README.md, section 3 (S = Q K^T and O += P V)";
const char* kPipeline = "modules/07_tensor_cores/README.md, section 4 (the pipeline you are given)";
const char* kPitfalls = "modules/07_tensor_cores/README.md, section 6 (pitfalls)";

}  // namespace

namespace attn::tensor_core_cases {

const Kernel& kernel() { return testing::kernel_under_test(7, testing::impl_under_test()); }

const Lessons kLessons = {kFragA, kMma, kPitfalls, kPipeline, kPipeline, kPipeline};

// ---- Models of the classic bugs of this module --------------------------------------------

// Finite but wrong outputs: which missing piece reproduces them?
std::vector<std::string> hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  return testing::operand_hints(
      p, in, r,
      "every output is 0: O += P V never accumulated anything (TODO 4, or P's fragments left "
      "at 0 in TODO 3)",
      "the output is the plain average of V: every score was 0, so S = Q K^T never reached "
      "the accumulators (TODO 1 or TODO 2)");
}

}  // namespace attn::tensor_core_cases
