// Running one registered kernel on host tensors: the piece the CLI, the benchmark and the
// grader share. It hides where the kernel runs (CPU module 00 or a GPU module) and in which
// element type (fp32, or 16-bit from module 07 on), poisons the output first (so unwritten
// elements are caught), and checks every CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/status.h"

namespace attn {

// Host tensors are float whatever p.dtype is; for a 16-bit problem they hold 16-bit values
// (exactly representable, see common/half.h) and are converted on upload.
struct Inputs {
  std::vector<float> q, k, v;
  uint64_t seed = 0;
};

// Uniform random Q, K, V in [-range, range) for `p`'s layout, from `seed`, rounded to p.dtype
// (for f32 nothing changes). The reference computed on them is then the exact answer for the
// very 16-bit inputs the kernel reads: the check measures the kernel's own rounding only.
// A larger range gives larger logits (scores grow with range^2 * head_dim * scale).
Inputs random_inputs(const Problem& p, uint64_t seed, float range = 1.0f);

// Rounds Q, K and V to type t in place (nothing for f32): the one place host inputs are
// rounded, so that the host copies hold exactly what a 16-bit kernel reads. Rounding twice
// changes nothing.
void round_inputs(Inputs& in, DType t);

// Ok when `kernel` takes tensors of type t, else one line that says what to do instead:
// "module 03 computes in f32; --dtype bf16 needs a 16-bit module (07 tensor_cores)" or
// "module 07 takes f16 or bf16 tensors (--dtype bf16 or f16), not f32".
Status supports_dtype(const Kernel& kernel, DType t);

// The one check of a problem for a kernel, in the order a user fixes things: the element
// type, then the shape rules every module shares (validate), then the module's own limits
// (its supports()). run_kernel calls it; so does the CLI, before it allocates anything.
Status check_problem(const Kernel& kernel, const Problem& p);

// Q, K, V uploaded to the device and an O buffer, in the element type p.dtype names: float
// for fp32 problems, the 16-bit patterns (uint16_t holding __half or __nv_bfloat16 bits) for
// f16/bf16 ones. forward() calls the kernel's entry point for that type. The one place that
// knows how a problem's tensors look in device memory: the runner, the CLI's timing and the
// benchmark all use it.
class DeviceTensors {
 public:
  // Uploads in.q, in.k, in.v (converted to p.dtype) and allocates O with p.o_elements()
  // elements plus `o_guard` more after them (see kGuardElements). Throws CudaError.
  DeviceTensors(const Problem& p, const Inputs& in, int64_t o_guard = 0);

  // Fills O (and its guard) with 0xFF bytes: the float poison kPoisonBits, or kPoisonBits16.
  void poison_output();
  // kernel.forward or kernel.forward16 on the device buffers; the kernel must accept p.dtype.
  Status forward(const Kernel& kernel, cudaStream_t stream);
  // O and its guard as floats (16-bit values converted exactly; kPoisonBits16 becomes the
  // float poison, so is_poison() finds unwritten elements in any type).
  std::vector<float> output() const;

 private:
  Problem p_;
  DeviceBuffer<float> q_, k_, v_, o_;             // fp32 problems
  DeviceBuffer<uint16_t> q16_, k16_, v16_, o16_;  // f16/bf16 problems
};

// Elements of poisoned guard space allocated after O: a kernel that writes past the end of
// its output (a missing bounds check in the last block) lands there and is caught.
constexpr int64_t kGuardElements = 4096;

// Splits the guard space (everything after the first o_elements values) off a downloaded
// output and returns how many guard elements were overwritten (no longer the poison).
int64_t split_off_guard(std::vector<float>& out, int64_t o_elements);

// Runs `kernel` once. On success `out` holds p.o_elements() values (device results are
// copied back, converted to float for 16-bit problems) and `guard_writes` (if given) counts
// guard elements that were overwritten. Returns the kernel's own error (unsupported shape, or
// a dtype it does not take: supports_dtype) or a CUDA error; a GPU fault during the launch is
// reported here, with file and line.
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
// `tolerance` kDtypeTolerance (the default) means default_tolerance(p.dtype): 1e-4 for f32,
// 2e-3 for f16, 1e-2 for bf16 (compare.h says why). For a 16-bit problem the reference is
// computed on Q, K, V rounded to p.dtype, the values the kernel received (a no-op for
// random_inputs, which rounds already; it matters for inputs made or loaded elsewhere).
CheckResult check_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                         double tolerance = kDtypeTolerance);

}  // namespace attn
