#include "common/runner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/half.h"
#include "common/random.h"
#include "common/reference.h"

namespace attn {

Inputs random_inputs(const Problem& p, uint64_t seed, float range) {
  Inputs in;
  in.seed = seed;
  in.q.resize(size_t(p.q_elements()));
  in.k.resize(size_t(p.kv_elements()));
  in.v.resize(size_t(p.kv_elements()));
  // Different streams per tensor: the same seed must not make Q equal K.
  fill_uniform(in.q, seed * 3 + 0, -range, range);
  fill_uniform(in.k, seed * 3 + 1, -range, range);
  fill_uniform(in.v, seed * 3 + 2, -1.0f, 1.0f);
  // Round to the problem's element type in place (identity for f32): the host copies then
  // hold exactly what the device buffers will, and the reference sees the kernel's inputs.
  round_inputs(in, p.dtype);
  return in;
}

void round_inputs(Inputs& in, DType t) {
  if (t == DType::f32) return;
  round_to_dtype(in.q, t);
  round_to_dtype(in.k, t);
  round_to_dtype(in.v, t);
}

namespace {

// "module 03": how a message names a module.
std::string module_name(int module) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", module);
  return name;
}

// The registered modules that take 16-bit tensors, e.g. "07 tensor_cores".
std::string sixteen_bit_modules() {
  std::string names;
  for (const Kernel& k : registered_kernels()) {
    if (k.impl != Impl::solution || !k.forward16) continue;
    char number[8];
    std::snprintf(number, sizeof number, "%02d ", k.module);
    names += (names.empty() ? "" : ", ") + (number + k.name);
  }
  return names.empty() ? "module 07 on" : names;
}

}  // namespace

Status supports_dtype(const Kernel& kernel, DType t) {
  if (kernel.accepts(t)) return Status::ok();
  if (t != DType::f32)
    return Status::error(module_name(kernel.module) + " computes in f32; --dtype " +
                         dtype_name(t) + " needs a 16-bit module (" + sixteen_bit_modules() +
                         ")");
  return Status::error(module_name(kernel.module) +
                       " takes f16 or bf16 tensors (--dtype bf16 or f16), not f32");
}

// ---------------------------------------------------------------------------------------------
// DeviceTensors

DeviceTensors::DeviceTensors(const Problem& p, const Inputs& in, int64_t o_guard) : p_(p) {
  const size_t o_count = size_t(p.o_elements() + o_guard);
  if (p.dtype == DType::f32) {
    q_ = DeviceBuffer<float>(in.q);
    k_ = DeviceBuffer<float>(in.k);
    v_ = DeviceBuffer<float>(in.v);
    o_ = DeviceBuffer<float>(o_count);
  } else {
    // The 16-bit patterns, built on the host (round to nearest even) and copied as they are:
    // the device buffers hold what a framework's f16/bf16 tensor would.
    q16_ = DeviceBuffer<uint16_t>(to_bits16(in.q, p.dtype));
    k16_ = DeviceBuffer<uint16_t>(to_bits16(in.k, p.dtype));
    v16_ = DeviceBuffer<uint16_t>(to_bits16(in.v, p.dtype));
    o16_ = DeviceBuffer<uint16_t>(o_count);
  }
}

void DeviceTensors::poison_output() {
  o_.poison();  // an empty buffer (the other type) does nothing
  o16_.poison();
}

Status DeviceTensors::forward(const Kernel& kernel, cudaStream_t stream) {
  if (Status s = supports_dtype(kernel, p_.dtype); !s) return s;
  if (p_.dtype == DType::f32)
    return kernel.forward(p_, q_.get(), k_.get(), v_.get(), o_.get(), stream);
  return kernel.forward16(p_, q16_.get(), k16_.get(), v16_.get(), o16_.get(), stream);
}

std::vector<float> DeviceTensors::output() const {
  if (p_.dtype == DType::f32) return o_.to_host();
  return from_bits16(o16_.to_host(), p_.dtype);
}

// ---------------------------------------------------------------------------------------------
// Running and checking

namespace {

Status run_on_gpu(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out) {
  try {
    DeviceTensors tensors(p, in, kGuardElements);
    tensors.poison_output();
    Status s = tensors.forward(kernel, nullptr);
    if (!s) return s;
    // A bad launch configuration is reported by cudaGetLastError, a fault inside the
    // kernel only once we wait for it.
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    out = tensors.output();
    return Status::ok();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
}

Status run_on_cpu(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out) {
  out.assign(size_t(p.o_elements() + kGuardElements), poison_value());
  return kernel.forward(p, in.q.data(), in.k.data(), in.v.data(), out.data(), nullptr);
}

}  // namespace

Status check_problem(const Kernel& kernel, const Problem& p) {
  // The type first: a module that cannot take these tensors has nothing to say about shapes.
  if (Status s = supports_dtype(kernel, p.dtype); !s) return s;
  if (Status s = validate(p); !s) return s;
  return kernel.supports(p);
}

int64_t split_off_guard(std::vector<float>& out, int64_t o_elements) {
  const auto guard_begin = out.begin() + o_elements;
  const int64_t written =
      std::count_if(guard_begin, out.end(), [](float x) { return !is_poison(x); });
  out.erase(guard_begin, out.end());
  return written;
}

Status run_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out, int64_t* guard_writes) {
  if (Status s = check_problem(kernel, p); !s) return s;
  Status s = kernel.backend == Backend::gpu ? run_on_gpu(kernel, p, in, out)
                                            : run_on_cpu(kernel, p, in, out);
  if (!s) return s;
  const int64_t written = split_off_guard(out, p.o_elements());
  if (guard_writes) *guard_writes = written;
  return Status::ok();
}

CheckResult check_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                         double tolerance) {
  CheckResult r;
  r.backend = kernel.backend;
  r.status = run_kernel(kernel, p, in, r.output, &r.guard_writes);
  if (r.status) {
    if (p.dtype == DType::f32) {
      r.reference = reference_attention(p, in.q, in.k, in.v);
    } else {
      // The kernel read Q, K, V rounded to p.dtype; so must the reference (rounding twice
      // changes nothing, so this is free of effect for inputs that are rounded already).
      Inputs rounded = in;
      round_inputs(rounded, p.dtype);
      r.reference = reference_attention(p, rounded.q, rounded.k, rounded.v);
    }
    r.comparison = compare_output(p, r.output, r.reference, tolerance);
  }
  return r;
}

}  // namespace attn
