// Running the modifier module (module 12) on host tensors: a dense Problem with a score
// modifier, a mask and RoPE (common/modifiers.h), for the CLI, the benchmark and the grader.
// Like common/runner.h: uploads in p.dtype, poisons the output (and a guard after it) so
// unwritten elements are caught, checks every CUDA error, compares with the double reference
// of the modifiers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/modifiers.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/status.h"

namespace attn {

// The one check of a modified problem for a kernel, in the order a user fixes things: the
// kernel has the modifier entry point, the element type (supports_dtype), the shared shape
// rules (validate(p)), the modifier rules (validate(p, m)), the module's supports(p, m).
Status check_problem(const Kernel& kernel, const Problem& p, const ModifierSpec& m);

// The device copies of the tensors the modifiers read, and the ModifierTensors that point at
// them (null where m uses none):
//   bias      p.dtype, [batch or 1][heads or 1][seq_q][seq_k]; bias_batch_stride is
//             (heads or 1) * seq_q * seq_k when the bias has a batch axis, else 0;
//             bias_head_stride is seq_q * seq_k when it has a head axis, else 0; rows dense
//   seg_q/k   int32 [batch][seq_q] and [batch][seq_k]
//   rel_bias  fp32 [heads][seq_q + seq_k - 1], relative_bias_by_distance of the T5 table
class ModifierBuffers {
 public:
  ModifierBuffers() = default;
  // Uploads what m uses from mi (the bias converted to p.dtype). Throws CudaError, or
  // std::invalid_argument for an f32 problem with a bias.
  ModifierBuffers(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi);
  // Takes a bias already on the device (p.dtype, bias_elements(p, m) values; a benchmark fills
  // large ones there) in place of an uploaded one, with m's strides.
  void use_device_bias(const Problem& p, const ModifierSpec& m, DeviceBuffer<uint16_t> bias);
  const ModifierTensors& tensors() const { return tensors_; }

 private:
  DeviceBuffer<uint16_t> bias_;
  DeviceBuffer<int32_t> seg_q_, seg_k_;
  DeviceBuffer<float> rel_bias_;
  ModifierTensors tensors_;
};

// Q, K, V, O in p.dtype (16-bit: the modifier module takes f16 and bf16) and the modifier
// tensors on the device (ModifierBuffers).
class ModifierDeviceTensors {
 public:
  // Uploads everything (converted to p.dtype) and allocates O with p.o_elements() elements
  // plus `o_guard` more after them (see kGuardElements). Throws CudaError, or
  // std::invalid_argument for an f32 problem.
  ModifierDeviceTensors(const Problem& p, const ModifierSpec& m, const Inputs& in,
                        const ModifierInputs& mi, int64_t o_guard = 0);

  void poison_output();  // O and its guard: 0xFF bytes (kPoisonBits16)
  // kernel.modifiers->forward on these buffers; an error when the kernel has no such entry.
  Status forward(const Kernel& kernel, cudaStream_t stream);
  std::vector<float> output() const;  // O and its guard as floats
  const ModifierTensors& tensors() const { return mods_.tensors(); }

 private:
  Problem p_;
  ModifierSpec m_;
  DeviceBuffer<uint16_t> q_, k_, v_, o_;
  ModifierBuffers mods_;
};

// Like run_kernel (common/runner.h): checks the problem and the inputs (their sizes, and
// validate_inputs), runs the entry point once on poisoned buffers with kGuardElements after O
// and returns O (p.o_elements() values) as floats; `guard_writes` (if given) counts guard
// elements that were overwritten. Errors come back as a Status.
Status run_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                    const Inputs& in, const ModifierInputs& mi, std::vector<float>& out,
                    int64_t* guard_writes = nullptr);

// Like CheckResult (common/runner.h), against reference_attention(p, m, ...).
struct ModifierCheck {
  Status status = Status::ok();  // the kernel ran (or why not)
  Comparison comparison;         // valid when status is ok
  std::vector<float> output;
  std::vector<double> reference;
  int64_t guard_writes = 0;
  bool passed() const { return status.is_ok() && comparison.passed() && guard_writes == 0; }
};
// tolerance kDtypeTolerance: default_tolerance(p.dtype). The reference reads Q, K, V and the
// bias rounded to p.dtype, the values the kernel received.
ModifierCheck check_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                             const Inputs& in, const ModifierInputs& mi,
                             double tolerance = kDtypeTolerance);

// Hints for a failed check in the learner's terms (empty when it passed): a row that sees no
// key and is NaN, the first wrong element with the keys its query sees, and the output
// recomputed as a classic bug would (the score modifier, the mask or RoPE left out; RoPE with
// the other pairing) when the kernel's output matches it.
std::vector<std::string> diagnose_modified(const Problem& p, const ModifierSpec& m,
                                           const ModifierInputs& mi, const Inputs& in,
                                           const ModifierCheck& r);

}  // namespace attn
