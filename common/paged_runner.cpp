#include "common/paged_runner.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common/half.h"
#include "common/runner.h"

namespace attn {

Problem output_shape(const PagedProblem& p) {
  // O [batch, seq_q, heads, d] is BSHD with seq_q queries per sequence; seq_k = 1 only fills
  // the shape (compare_output reads O's strides and sizes, not the keys).
  Problem o = Problem::make(p.batch, p.heads, p.seq_q, 1, p.head_dim, false, Layout::BSHD,
                            p.kv_heads);
  o.dtype = p.dtype;
  return o;
}

Problem output_shape(const VarlenProblem& p) {
  Problem o = Problem::make(1, p.heads, int(p.total_q()), 1, p.head_dim, false, Layout::BSHD,
                            p.kv_heads);
  o.dtype = p.dtype;
  return o;
}

namespace {

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

// The inference entry of `kernel`, or why it has none.
Status require_inference(const Kernel& kernel, bool has_entry, const char* what) {
  if (!kernel.inference)
    return Status::error(module_name(kernel) + " runs dense attention; " + what +
                         " runs on an inference module (module 10)");
  if (!has_entry) return Status::error(module_name(kernel) + " has no " + what + " entry point");
  return Status::ok();
}

}  // namespace

Status check_problem(const Kernel& kernel, const PagedProblem& p) {
  if (Status s = require_inference(kernel, kernel.inference && kernel.inference->decode,
                                   "paged decoding");
      !s)
    return s;
  // As for dense problems (runner.h): the element type, the shared shape rules, the module.
  if (Status s = supports_dtype(kernel, p.dtype); !s) return s;
  if (Status s = validate(p); !s) return s;
  return kernel.inference->supports_paged ? kernel.inference->supports_paged(p) : Status::ok();
}

Status check_problem(const Kernel& kernel, const VarlenProblem& p) {
  if (Status s = require_inference(kernel, kernel.inference && kernel.inference->prefill,
                                   "variable-length prefill");
      !s)
    return s;
  if (Status s = supports_dtype(kernel, p.dtype); !s) return s;
  if (Status s = validate(p); !s) return s;
  return kernel.inference->supports_varlen ? kernel.inference->supports_varlen(p) : Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Device tensors

namespace {
// Inputs are uploaded as the 16-bit patterns of p.dtype (inference modules take no f32:
// check_problem refuses it first).
DeviceBuffer<uint16_t> upload16(const std::vector<float>& values, DType t) {
  if (t == DType::f32)
    throw std::invalid_argument("inference tensors are f16 or bf16, not f32");
  return DeviceBuffer<uint16_t>(to_bits16(values, t));
}
}  // namespace

PagedDeviceTensors::PagedDeviceTensors(const Kernel& kernel, const PagedProblem& p,
                                       const PagedInputs& in, int64_t o_guard)
    : kernel_(&kernel), p_(p) {
  q_ = upload16(in.q, p.dtype);
  k_cache_ = upload16(in.k_cache, p.dtype);
  v_cache_ = upload16(in.v_cache, p.dtype);
  o_ = DeviceBuffer<uint16_t>(size_t(p.q_elements() + o_guard));
  table_ = DeviceBuffer<int32_t>(in.block_table);
  seqlens_ = DeviceBuffer<int32_t>(std::vector<int32_t>(p.seqlens_k.begin(), p.seqlens_k.end()));
  const size_t workspace_bytes = kernel.inference && kernel.inference->decode_workspace_bytes
                                     ? kernel.inference->decode_workspace_bytes(p)
                                     : 0;
  workspace_ = DeviceBuffer<unsigned char>(workspace_bytes);
  ptrs_.q = q_.get();
  ptrs_.k_cache = k_cache_.get();
  ptrs_.v_cache = v_cache_.get();
  ptrs_.block_table = table_.get();
  ptrs_.seqlens_k = seqlens_.get();
  ptrs_.o = o_.get();
  ptrs_.workspace = workspace_.get();
  ptrs_.workspace_bytes = workspace_.bytes();
}

void PagedDeviceTensors::poison_output() {
  o_.poison();
  // The split partials too: a combine step that reads a partial no split wrote then reads
  // NaN and fails the check, instead of whatever an earlier launch left there.
  workspace_.poison();
}

Status PagedDeviceTensors::decode(cudaStream_t stream) {
  if (Status s = require_inference(*kernel_, kernel_->inference && kernel_->inference->decode,
                                   "paged decoding");
      !s)
    return s;
  return kernel_->inference->decode(p_, ptrs_, stream);
}

std::vector<float> PagedDeviceTensors::output() const {
  return from_bits16(o_.to_host(), p_.dtype);
}

VarlenDeviceTensors::VarlenDeviceTensors(const Kernel& kernel, const VarlenProblem& p,
                                         const VarlenInputs& in, int64_t o_guard)
    : kernel_(&kernel), p_(p) {
  q_ = upload16(in.q, p.dtype);
  k_ = upload16(in.k, p.dtype);
  v_ = upload16(in.v, p.dtype);
  o_ = DeviceBuffer<uint16_t>(size_t(int64_t(in.q.size()) + o_guard));
  cu_q_ = DeviceBuffer<int32_t>(p.cu_seqlens_q());
  cu_k_ = DeviceBuffer<int32_t>(p.cu_seqlens_k());
}

void VarlenDeviceTensors::poison_output() { o_.poison(); }

Status VarlenDeviceTensors::prefill(cudaStream_t stream) {
  if (Status s = require_inference(*kernel_, kernel_->inference && kernel_->inference->prefill,
                                   "variable-length prefill");
      !s)
    return s;
  return kernel_->inference->prefill(p_, q_.get(), k_.get(), v_.get(), cu_q_.get(), cu_k_.get(),
                                     o_.get(), stream);
}

std::vector<float> VarlenDeviceTensors::output() const {
  return from_bits16(o_.to_host(), p_.dtype);
}

// ---------------------------------------------------------------------------------------------
// Checking

namespace {

// One run on poisoned buffers, as run_kernel (runner.cpp) does for dense problems: O and the
// guard after it come back, the guard is split off and its overwritten elements counted.
template <class Tensors, class Launch>
Status run_once(Tensors& tensors, Launch launch, int64_t o_elements, std::vector<float>& out,
                int64_t* guard_writes) {
  try {
    tensors.poison_output();
    if (Status s = launch(tensors); !s) return s;
    // A bad launch configuration is reported by cudaGetLastError, a fault inside the kernel
    // only once we wait for it.
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    out = tensors.output();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
  const int64_t written = split_off_guard(out, o_elements);  // common/runner.h
  if (guard_writes) *guard_writes = written;
  return Status::ok();
}

}  // namespace

Status run_decode(const Kernel& kernel, const PagedProblem& p, const PagedInputs& in,
                  std::vector<float>& out, int64_t* guard_writes) {
  if (Status s = check_problem(kernel, p); !s) return s;
  if (Status s = validate_inputs(p, in); !s) return s;
  try {
    PagedDeviceTensors tensors(kernel, p, in, kGuardElements);  // uploads round to p.dtype
    return run_once(
        tensors, [](PagedDeviceTensors& t) { return t.decode(nullptr); }, p.q_elements(), out,
        guard_writes);
  } catch (const CudaError& e) {  // an allocation or upload
    return Status::error(e.what());
  }
}

Status run_prefill(const Kernel& kernel, const VarlenProblem& p, const VarlenInputs& in,
                   std::vector<float>& out, int64_t* guard_writes) {
  if (Status s = check_problem(kernel, p); !s) return s;
  if (Status s = validate_inputs(p, in); !s) return s;
  try {
    VarlenDeviceTensors tensors(kernel, p, in, kGuardElements);
    return run_once(
        tensors, [](VarlenDeviceTensors& t) { return t.prefill(nullptr); },
        int64_t(in.q.size()), out, guard_writes);
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
}

InferenceCheck check_decode(const Kernel& kernel, const PagedProblem& p, const PagedInputs& in,
                            double tolerance) {
  InferenceCheck r;
  r.status = run_decode(kernel, p, in, r.output, &r.guard_writes);
  if (!r.status) return r;
  // The kernel read the inputs rounded to p.dtype; so does the reference (a no-op for
  // random_paged_inputs, which rounds already; it matters for inputs loaded elsewhere).
  PagedInputs rounded = in;
  round_inputs(rounded, p.dtype);
  r.reference = paged_reference(p, rounded);
  r.comparison = compare_output(output_shape(p), r.output, r.reference, tolerance);
  return r;
}

InferenceCheck check_prefill(const Kernel& kernel, const VarlenProblem& p,
                             const VarlenInputs& in, double tolerance) {
  InferenceCheck r;
  r.status = run_prefill(kernel, p, in, r.output, &r.guard_writes);
  if (!r.status) return r;
  VarlenInputs rounded = in;
  round_inputs(rounded, p.dtype);
  r.reference = varlen_reference(p, rounded);
  r.comparison = compare_output(output_shape(p), r.output, r.reference, tolerance);
  return r;
}

}  // namespace attn
