// Running a backward module (module 11) on host tensors: the forward with its log-sum-exp,
// then dQ, dK, dV, for the CLI, the benchmark and the grader. Like common/runner.h: uploads in
// p.dtype, poisons every output (and a guard after each) so unwritten elements are caught,
// checks every CUDA error, compares each result with the double reference of
// common/backward.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/buffers.h"
#include "common/compare.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/status.h"

namespace attn {

// Q, K, V (common/runner.h) and dO, all rounded to p.dtype, in p's layout.
struct BackwardInputs {
  Inputs in;
  std::vector<float> dout;  // p.o_elements()
};
// Uniform random Q, K, V in [-range, range) (random_inputs) and dO in [-1, 1), from `seed`.
BackwardInputs random_backward_inputs(const Problem& p, uint64_t seed, float range = 1.0f);
// dO alone, as random_backward_inputs draws it from `seed` (rounded to p.dtype): for Q, K, V
// read from files.
std::vector<float> random_dout(const Problem& p, uint64_t seed);

// The tolerance on the relative L2 error of each gradient (dQ, dK, dV), and of O:
//   f32  1e-4 (the course's fp32 tolerance)
//   f16  1e-2, bf16 4e-2: the backward rounds P and dS to 16 bits before their products and
//        every gradient to 16 bits at the end, each once more than the forward rounds;
//        a correct kernel measures about a quarter of it (modules/11_backward/README.md).
double backward_tolerance(DType t);

// The one check of a backward problem for a kernel: it has the backward entry point, the
// element type, validate(p), then the module's supports(p).
Status check_backward_problem(const Kernel& kernel, const Problem& p);

// Q, K, V, dO on the device in p.dtype, and O, lse, dQ, dK, dV each with `guard` poisoned
// elements after it. Throws CudaError.
class BackwardDeviceTensors {
 public:
  BackwardDeviceTensors(const Problem& p, const BackwardInputs& in, int64_t guard = 0);
  void poison_outputs();  // O, lse, dQ, dK, dV and their guards: 0xFF bytes
  // kernel.backward->forward (O, lse) and kernel.backward->backward (dQ, dK, dV).
  Status forward(const Kernel& kernel, cudaStream_t stream);
  Status backward(const Kernel& kernel, cudaStream_t stream);
  // Downloads as floats, guard included (kPoisonBits16 becomes the float poison).
  std::vector<float> o() const;
  std::vector<float> lse() const;
  std::vector<float> dq() const;
  std::vector<float> dk() const;
  std::vector<float> dv() const;

 private:
  Problem p_;
  // 16-bit problems keep uint16_t patterns in the byte buffers, f32 ones floats.
  DeviceBuffer<unsigned char> q_, k_, v_, dout_, o_, dq_, dk_, dv_;
  DeviceBuffer<float> lse_;
};

// One forward + backward on poisoned buffers, everything compared with reference_backward.
struct BackwardCheck {
  Status status = Status::ok();  // both entry points ran (or why not)
  Comparison o, dq, dk, dv;      // valid when status is ok
  // lse: elements off by more than 1e-3 (relative, or absolute below 1) or not matching the
  // +inf of a row with no key; the first such row as its index in lse, (b * heads + h) *
  // seq_q + i, -1 if none.
  int64_t lse_bad = 0;
  int64_t lse_first_bad = -1;
  int64_t guard_writes = 0;  // summed over the five outputs
  int64_t guard_o = 0, guard_lse = 0, guard_dq = 0, guard_dk = 0, guard_dv = 0;  // each one's
  std::vector<float> out_o, out_lse, out_dq, out_dk, out_dv;
  BackwardReference reference;
  bool passed() const {
    return status.is_ok() && o.passed() && dq.passed() && dk.passed() && dv.passed() &&
           lse_bad == 0 && guard_writes == 0;
  }
};
// tolerance kDtypeTolerance means backward_tolerance(p.dtype). The reference reads the
// inputs rounded to p.dtype, the values the kernel received.
BackwardCheck check_backward(const Kernel& kernel, const Problem& p, const BackwardInputs& in,
                             double tolerance = kDtypeTolerance);
// The comparing half of check_backward, for outputs that are on the host already: r.out_o,
// r.out_lse, r.out_dq, r.out_dk, r.out_dv (guards split off) in; r.reference, r.o, r.dq, r.dk,
// r.dv, r.lse_bad and r.lse_first_bad out. dK and dV are compared as K- and V-shaped tensors
// (kv_heads heads of seq_k rows, p.k's and p.v's strides), dQ as a Q-shaped one. Throws
// std::invalid_argument when an output does not hold its tensor's number of elements.
void compare_backward(const Problem& p, const BackwardInputs& in, BackwardCheck& r,
                      double tolerance = kDtypeTolerance);

// Hints for a failed check in the learner's terms (empty when it passed): which gradient is
// wrong, NaN in a row that sees no key, and the gradients recomputed as a classic bug would
// (the D term left out, the scale left out or applied twice on dQ/dK, P recomputed without
// the log-sum-exp or with it in the wrong base, dK/dV of a K/V head not summed over its query
// heads, dQ alone wrong: a race on its accumulation) when the kernel's result matches one.
std::vector<std::string> diagnose_backward(const Problem& p, const BackwardInputs& in,
                                           const BackwardCheck& r);

}  // namespace attn
