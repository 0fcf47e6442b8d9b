#include "common/registry.h"

#include <algorithm>
#include <cstdio>

namespace attn {

namespace {
// A function-local static: registration runs during static initialization of other
// translation units, in an order C++ does not define, so the list must exist on first use.
std::vector<Kernel>& registry() {
  static std::vector<Kernel> kernels;
  return kernels;
}
}  // namespace

const char* impl_name(Impl impl) { return impl == Impl::exercise ? "exercise" : "solution"; }

std::string Kernel::label() const {
  char number[8];
  std::snprintf(number, sizeof number, "%02d", module);
  return std::string(number) + "_" + name + "/" + impl_name(impl);
}

bool Kernel::accepts(DType t) const {
  return t == DType::f32 ? forward != nullptr : forward16 != nullptr || inference != nullptr;
}

DType Kernel::native_dtype() const {
  if ((backward || f32_on_tensor_cores) && forward16) return DType::bf16;
  return forward ? DType::f32 : DType::bf16;
}

Status refuse_dense_problem(const Problem& p) {
  return Status::error(p.describe() + " is a dense problem; this module runs inference: decode "
                       "over a paged KV cache (--seqlens-k 1,17,4096) or packed variable-length "
                       "prefill (--varlen --seqlens-k 100,37,512)");
}

bool register_kernel(Kernel kernel) {
  registry().push_back(std::move(kernel));
  return true;
}

std::vector<Kernel> registered_kernels() {
  std::vector<Kernel> kernels = registry();
  std::sort(kernels.begin(), kernels.end(), [](const Kernel& a, const Kernel& b) {
    return a.module != b.module ? a.module < b.module : a.impl < b.impl;
  });
  return kernels;
}

const Kernel* find_kernel(int module, Impl impl) {
  for (const Kernel& k : registry())
    if (k.module == module && k.impl == impl) return &k;
  return nullptr;
}

}  // namespace attn
