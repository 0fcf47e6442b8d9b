// The module registry: every module's exercise and solution register their entry point here,
// so the CLI (`attn run --module 1 --impl exercise`) and the benchmark find them by number.
//
// Each module folder has a register.cpp with one ATTN_REGISTER_MODULE line. The build compiles
// it twice, once with ATTN_IMPL=exercise and once with ATTN_IMPL=solution, next to the matching
// implementation, so both implementations live in one program under different namespaces.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn {

enum class Impl { exercise, solution };
const char* impl_name(Impl impl);

// Where a module's pointers live: module 00 runs on the CPU with host pointers, the others
// launch kernels on device pointers.
enum class Backend { cpu, gpu };

// The signature every module's forward() has (see DESIGN.md, "The module interface").
using ForwardFn = Status (*)(const Problem& p, const float* q, const float* k, const float* v,
                             float* o, cudaStream_t stream);
using SupportsFn = Status (*)(const Problem& p);

struct Kernel {
  int module = 0;           // 0, 1, 2, ...
  std::string name;         // "naive"
  std::string title;        // one line for `attn list`
  Backend backend = Backend::gpu;
  Impl impl = Impl::solution;
  SupportsFn supports = nullptr;  // shape checks shared by exercise and solution
  ForwardFn forward = nullptr;

  std::string label() const;  // "01_naive/solution"
};

// Called by ATTN_REGISTER_MODULE at program start.
bool register_kernel(Kernel kernel);
// All registered kernels, sorted by module number then impl.
std::vector<Kernel> registered_kernels();
// nullptr when the module does not exist.
const Kernel* find_kernel(int module, Impl impl);

}  // namespace attn

#define ATTN_STRINGIFY_(x) #x
#define ATTN_STRINGIFY(x) ATTN_STRINGIFY_(x)

// Registers the implementation this file is compiled for (ATTN_IMPL = exercise or solution).
#define ATTN_REGISTER_MODULE(number, name, title, backend, supports_fn, forward_fn)          \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, backend,                                                        \
      std::string(ATTN_STRINGIFY(ATTN_IMPL)) == "exercise" ? ::attn::Impl::exercise        \
                                                           : ::attn::Impl::solution,       \
      supports_fn, forward_fn});                                                           \
  }
