// Running an inference module (module 10) on host tensors: the paged decode and the packed
// prefill, for the CLI, the benchmark and the grader. Like common/runner.h: uploads in
// p.dtype, poisons the output (and a guard after it) so unwritten elements are caught, checks
// every CUDA error, compares with the double reference.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/paged.h"
#include "common/registry.h"
#include "common/status.h"

namespace attn {

// The layout of a decode output [batch, seq_q, heads, d] as a dense BSHD Problem
// (batch, heads, seq_q, seq_k = 1, head_dim), so compare_output and diagnose can name
// (b, h, i, d) of a wrong element. For a prefill output [total_q, heads, d]: batch 1,
// seq_q = total_q.
Problem output_shape(const PagedProblem& p);
Problem output_shape(const VarlenProblem& p);

// Ok when `kernel` is an inference module that accepts p (dtype, validate, its supports).
Status check_problem(const Kernel& kernel, const PagedProblem& p);
Status check_problem(const Kernel& kernel, const VarlenProblem& p);

class PagedDeviceTensors {
 public:
  // Uploads Q, the caches, the block table and the lengths; allocates O (plus o_guard poisoned
  // elements after it) and the kernel's workspace. Throws CudaError.
  PagedDeviceTensors(const Kernel& kernel, const PagedProblem& p, const PagedInputs& in,
                     int64_t o_guard = 0);
  void poison_output();
  Status decode(cudaStream_t stream);  // kernel.inference->decode on these buffers
  std::vector<float> output() const;   // O and its guard as floats
  const PagedDevicePtrs& ptrs() const { return ptrs_; }

 private:
  const Kernel* kernel_;
  PagedProblem p_;
  DeviceBuffer<uint16_t> q_, k_cache_, v_cache_, o_;
  DeviceBuffer<int32_t> table_, seqlens_;
  DeviceBuffer<unsigned char> workspace_;
  PagedDevicePtrs ptrs_;
};

class VarlenDeviceTensors {
 public:
  VarlenDeviceTensors(const Kernel& kernel, const VarlenProblem& p, const VarlenInputs& in,
                      int64_t o_guard = 0);
  void poison_output();
  Status prefill(cudaStream_t stream);
  std::vector<float> output() const;

 private:
  const Kernel* kernel_;
  VarlenProblem p_;
  DeviceBuffer<uint16_t> q_, k_, v_, o_;
  DeviceBuffer<int32_t> cu_q_, cu_k_;
};

// Like run_kernel (common/runner.h): checks the problem and the inputs, runs the entry point
// once on poisoned buffers with kGuardElements after O, and returns O (q_elements() values,
// or total_q * heads * head_dim) as floats; `guard_writes` (if given) counts guard elements
// that were overwritten. Errors (a refusal, bad inputs, a CUDA error) come back as a Status.
Status run_decode(const Kernel& kernel, const PagedProblem& p, const PagedInputs& in,
                  std::vector<float>& out, int64_t* guard_writes = nullptr);
Status run_prefill(const Kernel& kernel, const VarlenProblem& p, const VarlenInputs& in,
                   std::vector<float>& out, int64_t* guard_writes = nullptr);

// Like CheckResult (common/runner.h), for the two inference entry points.
struct InferenceCheck {
  Status status = Status::ok();
  Comparison comparison;  // against output_shape(p)
  std::vector<float> output;
  std::vector<double> reference;
  int64_t guard_writes = 0;
  bool passed() const { return status.is_ok() && comparison.passed() && guard_writes == 0; }
};
// tolerance kDtypeTolerance: default_tolerance(p.dtype).
InferenceCheck check_decode(const Kernel& kernel, const PagedProblem& p, const PagedInputs& in,
                            double tolerance = kDtypeTolerance);
InferenceCheck check_prefill(const Kernel& kernel, const VarlenProblem& p,
                             const VarlenInputs& in, double tolerance = kDtypeTolerance);

}  // namespace attn
