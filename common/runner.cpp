#include "common/runner.h"

#include <algorithm>

#include "common/buffers.h"
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
  return in;
}

namespace {

Status run_on_gpu(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out) {
  try {
    DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o(size_t(p.o_elements() + kGuardElements));
    o.poison();
    Status s = kernel.forward(p, q.get(), k.get(), v.get(), o.get(), nullptr);
    if (!s) return s;
    // A bad launch configuration is reported by cudaGetLastError, a fault inside the
    // kernel only once we wait for it.
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    out = o.to_host();
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

Status run_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                  std::vector<float>& out, int64_t* guard_writes) {
  if (Status s = validate(p); !s) return s;
  if (Status s = kernel.supports(p); !s) return s;
  Status s = kernel.backend == Backend::gpu ? run_on_gpu(kernel, p, in, out)
                                            : run_on_cpu(kernel, p, in, out);
  if (!s) return s;
  // Split the guard space off the output and count what was written there.
  const auto guard_begin = out.begin() + p.o_elements();
  if (guard_writes)
    *guard_writes = std::count_if(guard_begin, out.end(), [](float x) { return !is_poison(x); });
  out.erase(guard_begin, out.end());
  return Status::ok();
}

CheckResult check_kernel(const Kernel& kernel, const Problem& p, const Inputs& in,
                         double tolerance) {
  CheckResult r;
  r.backend = kernel.backend;
  r.status = run_kernel(kernel, p, in, r.output, &r.guard_writes);
  if (r.status) {
    r.reference = reference_attention(p, in.q, in.k, in.v);
    r.comparison = compare_output(p, r.output, r.reference, tolerance);
  }
  return r;
}

}  // namespace attn
