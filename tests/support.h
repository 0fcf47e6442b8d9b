// Helpers every module's grader uses: seeds, the kernel under test, and one call that checks
// a kernel against the double-precision reference and explains a failure in the learner's
// terms (see common/diagnose.h) with a pointer to the lesson.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/diagnose.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"

namespace attn::testing {

// The run's base seed: $ATTN_SEED if set, else fresh. Printed by the test main.
uint64_t base_seed();
// A new seed for each check (base + a counter), so checks draw different inputs.
uint64_t next_seed();

// The implementation this test binary is built against (ATTN_IMPL = exercise or solution).
inline Impl impl_under_test() { return ATTN_IMPL_ENUM; }
const Kernel& kernel_under_test(int module, Impl impl);

// Module-specific explanations of a failed check, e.g. "the output matches the online softmax
// without rescaling acc": a grader recomputes the output as a classic bug would and names
// the bug when it matches. Called only when the check failed, the kernel ran, the output has
// no NaN and nothing before or after O was written: diagnose() explains those cases.
using ExtraHints = std::vector<std::string> (*)(const Problem& p, const Inputs& in,
                                                const CheckResult& r);

// Module-specific explanations of a kernel that did not run (`s` is its error: a refusal, or
// a fault inside the kernel such as module 09's trap when a barrier wait never ends).
using ErrorHints = std::vector<std::string> (*)(const Problem& p, const Status& s);

struct CheckOptions {
  float range = 1.0f;            // Q, K entries in [-range, range): larger gives larger logits
  double tolerance = kDtypeTolerance;  // relative L2; negative: default_tolerance(p.dtype)
  const char* lesson = "";       // "README section 3" -- where to read up when this fails
  ExtraHints extra_hints = nullptr;
  ErrorHints error_hints = nullptr;
};

// Fresh random inputs, run, compare. Fails the current doctest case with the seed, the
// comparison and the hints when the output is wrong, unwritten, NaN or the kernel errors.
// Also fails if anything outside O's rows was written (padding between strided rows).
// Returns true when it passed.
bool check_against_reference(const Kernel& kernel, const Problem& p, const CheckOptions& o = {});

// ---- What a grader needs of the GPU, and a run that cannot go on ---------------------------

// A grader whose module needs more than a CUDA GPU (module 09: compute capability 9.x and a
// build with sm_90a code) registers a check at namespace scope:
//   const bool hopper_required = testing::require_gpu(needs_hopper);
// The GPU test main (tests/main_gpu.cpp) asks every check before any case runs; the first
// that gives a reason ends the grader with "skipped: <reason>" and exit code 77, which CTest
// and `./course grade` report as skipped, never as passed.
using GpuRequirement = std::string (*)(const DeviceInfo& device);  // "" when it is met
bool require_gpu(GpuRequirement check);
std::string unmet_gpu_requirement(const DeviceInfo& device);  // "" when every check is met

// After a fault inside a kernel (a trap, an illegal address) the CUDA context is unusable:
// every later CUDA call fails with the same error, so every later check would fail with it
// too. The checks below notice it (the kernel did not run and the device still reports an
// error), say so in a hint, and stop the run after the current test case (through the
// doctest context the GPU test main registers with set_run_context); later checks in the
// same case return false at once. run_stopped() tells a grader's own loops to stop as well.
void set_run_context(doctest::Context* context);
bool run_stopped();

// Under compute-sanitizer every memory access is checked and kernels run 10-100x slower.
// With ATTN_SANITIZER_LIGHT=1 (set by `./course verify` for the sanitizer runs) checks of
// problems above kSanitizerMaxFlops are skipped with a message; the smaller shapes still take
// every code path (partial tiles, several tiles, grid limits, masks).
constexpr double kSanitizerMaxFlops = 6e8;
bool sanitizer_light();

// The grid-limit cases launch 70000 (batch, head) pairs of a few queries each. racecheck
// follows every shared-memory access of every block and does not get through them in 10
// minutes, so under it (ATTN_SANITIZER_LIGHT=1 and ATTN_SANITIZER_TOOL=racecheck, both set by
// `./course verify`) they are skipped with a message; memcheck and synccheck still run them,
// and the smaller cases take the same code paths through the racecheck. Returns true when the
// caller should skip the check.
bool skip_grid_limits_under_racecheck();

// Under the CPU emulation (grade_NN_cpu / check_NN_cpu, common/emulation/) a kernel runs
// thousands of times slower than on a GPU, one fiber per CUDA thread and every shared and
// global access checked: as under the sanitizers, checks of problems above kEmulationMaxFlops
// are skipped with a message (on 2 cores a grade then takes 5-15 s). The smaller shapes (odd
// sizes, partial tiles, seq_q != seq_k, masked rows, every head dim) take every code path.
constexpr double kEmulationMaxFlops = kSanitizerMaxFlops;
bool emulated();

// The grid-limit cases: batch * heads past the 65535 limit of gridDim.y, so that a kernel that
// puts batch * heads in gridDim.y fails: batch 7, heads 10000 (70000) on a GPU. The emulation
// lowers the gridDim.y/z limit to attn::emu::kGridYZLimit (255) to keep the case small, and
// there it is batch 3, heads 100 (300), with a message saying so.
Problem grid_limit_problem(int seq_q, int seq_k, int head_dim, bool causal = false);

// The same with inputs the caller made (e.g. scores that rise with the key index); `in.seed`
// is printed as the seed. `o.range` only labels the report.
bool check_inputs_against_reference(const Kernel& kernel, const Problem& p, const Inputs& in,
                                    const CheckOptions& o = {});

// The report and pass rule of the two calls above for a result the caller produced itself
// (e.g. a run on Q, K, V that point into one packed buffer): wrong, unwritten or NaN output,
// a kernel error, writes past O (r.guard_writes) or between O's rows all fail the check.
// `r.reference` and `r.comparison` must be filled when `r.status` is ok.
bool report_against_reference(const Kernel& kernel, const Problem& p, const Inputs& in,
                              const CheckResult& r, const CheckOptions& o = {});

// Graders name a bug when the output matches a model of it: attn::matches (common/diagnose.h).
using ::attn::matches;
// Whether the hints may recompute the problem with a bug model: a model costs as much as the
// reference, so the biggest checks (batch * heads * seq_q * seq_k * head_dim > 3e8) skip them.
bool models_affordable(const Problem& p);

// The two models the tensor-core graders (modules 07 and 08) try first on a wrong but finite
// output, each with the module's words for it: every output 0 (`all_zero`: P V never reached
// O), or the plain average of the visible V rows (`zero_scores`: every score was 0, so S = Q K^T
// read zeros). Returns the one that matches, or nothing (also when !models_affordable(p)).
std::vector<std::string> operand_hints(const Problem& p, const Inputs& in, const CheckResult& r,
                                       const char* all_zero, const char* zero_scores);

// Inputs whose scores rise with the key index by about `step` per key (plus a little noise),
// so an online softmax's running max moves at every tile: the classic rescale bugs are
// invisible when the first tile holds the row max. q entries in [0.75, 1.25), key j shifted
// by step * j / (scale * head_dim) in every entry (all K heads, kv_heads of them).
Inputs rising_inputs(const Problem& p, uint64_t seed, double step);

// Q, K and V as views into ONE packed buffer, as a fused QKV projection writes it:
// [B, S, H + 2*KVH, D], per token the H query heads, then the KVH key heads, then the KVH
// value heads ([B, S, 3, H, D] when KVH = H). The three share the row stride (H + 2*KVH) * D;
// K starts H*D elements after Q and V (H + KVH)*D after it. The buffer starts `shift`
// elements into its allocation (an odd shift puts every pointer off a 16-byte boundary
// although every stride may be a multiple of 4). O gets its own buffer, `o_shift` elements
// in, with `o_pad` unused elements after every row.
struct PackedQkv {
  int batch, heads, kv_heads, seq, head_dim;
  bool causal = false;
  int shift = 0, o_shift = 0, o_pad = 0;
};

// check_against_reference for that layout, in dtype `t` (kernel.forward for f32,
// kernel.forward16 for f16/bf16): fresh random inputs (rounded to t), the double reference on
// the slices the kernel sees, and writes before O or past its end count as writes past O.
bool check_packed_qkv(const Kernel& kernel, const PackedQkv& c, DType t, const CheckOptions& o);

// Problem::make with the element type set: the 16-bit graders' shapes (modules 07 and 09).
inline Problem make_problem(int batch, int heads, int seq_q, int seq_k, int head_dim,
                            bool causal, DType t, Layout layout = Layout::BHSD,
                            int kv_heads = 0) {
  Problem p = Problem::make(batch, heads, seq_q, seq_k, head_dim, causal, layout, kv_heads);
  p.dtype = t;
  return p;
}

}  // namespace attn::testing
