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

// The signature every fp32 module's forward() has (docs/architecture.md, the module
// interface).
using ForwardFn = Status (*)(const Problem& p, const float* q, const float* k, const float* v,
                             float* o, cudaStream_t stream);
// Modules whose tensors are 16-bit (module 07 on): device pointers to p.dtype elements
// (__half or __nv_bfloat16), p.dtype is f16 or bf16. The pointers are untyped because one
// entry point serves both types; forward16 casts them after looking at p.dtype.
using Forward16Fn = Status (*)(const Problem& p, const void* q, const void* k, const void* v,
                               void* o, cudaStream_t stream);
using SupportsFn = Status (*)(const Problem& p);

// The entry points of an inference module (module 10): decode over a paged KV cache and
// packed variable-length prefill (common/paged.h).
struct InferenceEntry;

// The entry point of the modifier module (module 12, common/modifiers.h): forward() with a
// score modifier, a mask and RoPE on top of a dense Problem, and its checks.
struct ModifierSpec;
struct ModifierTensors;
struct ModifierEntry {
  Status (*supports)(const Problem& p, const ModifierSpec& m);
  Status (*forward)(const Problem& p, const ModifierSpec& m, const ModifierTensors& t,
                    const void* q, const void* k, const void* v, void* o, cudaStream_t stream);
};

// The entry points of the backward module (module 11, common/backward.h): the forward that
// keeps the log-sum-exp, and dQ, dK, dV.
struct BackwardEntry;

struct Kernel {
  int module = 0;           // 0, 1, 2, ...
  std::string name;         // "naive"
  std::string title;        // one line for `attn list`
  Backend backend = Backend::gpu;
  Impl impl = Impl::solution;
  SupportsFn supports = nullptr;  // shape checks shared by exercise and solution
  ForwardFn forward = nullptr;      // fp32 tensors (modules 00-06); nullptr if none
  Forward16Fn forward16 = nullptr;  // f16/bf16 tensors (module 07 on); nullptr if none
  // An inference module's entry points (paged decode, varlen prefill); nullptr for the modules
  // that run dense Problems. Such a module's `supports` refuses every dense Problem.
  const InferenceEntry* inference = nullptr;
  // The modifier module's entry point (module 12); nullptr for the others. Such a module also
  // has forward16 for plain problems (no modifier).
  const ModifierEntry* modifiers = nullptr;
  // The backward module's entry points (module 11); nullptr for the others. Such a module also
  // has forward16 (and may have forward) for plain problems, the forward alone.
  const BackwardEntry* backward = nullptr;
  // Whether `forward` (fp32 tensors) computes its products on the tensor cores, as module 07's
  // 3xTF32 does, rather than with FFMA on the CUDA cores. Such a module is a 16-bit module
  // first: its native type stays bf16, and its fp32 speed is not bounded by the FFMA peak.
  bool f32_on_tensor_cores = false;

  std::string label() const;  // "01_naive/solution"
  // Whether the module takes tensors of type t: f32 needs forward, f16 and bf16 forward16 or
  // the inference entry points (16-bit only, as serving engines run them).
  bool accepts(DType t) const;
  // The type the CLI and the benchmark use when none is asked for: f32 when the module has
  // an fp32 forward, else bf16 (the usual training/inference type on Ampere and Hopper); bf16
  // for the backward module even when it has an fp32 forward too (training runs in bf16), and
  // for a 16-bit module whose fp32 forward runs on the tensor cores (module 07's 3xTF32).
  DType native_dtype() const;
};

// The `supports` of an inference module: a dense Problem is not its job. The one line says
// what to run instead: decode over a paged cache (--seqlens-k) or packed prefill (--varlen).
Status refuse_dense_problem(const Problem& p);

// Called by ATTN_REGISTER_MODULE at program start.
bool register_kernel(Kernel kernel);
// All registered kernels, sorted by module number then impl.
std::vector<Kernel> registered_kernels();
// nullptr when the module does not exist.
const Kernel* find_kernel(int module, Impl impl);

}  // namespace attn

#define ATTN_STRINGIFY_(x) #x
#define ATTN_STRINGIFY(x) ATTN_STRINGIFY_(x)

// Impl::exercise or Impl::solution, from the ATTN_IMPL this file is compiled with. A macro,
// not an inline function: `attn` compiles files with both values into one program, and an
// inline function must be the same in every file.
#define ATTN_IMPL_ENUM                                                                     \
  (std::string(ATTN_STRINGIFY(ATTN_IMPL)) == "exercise" ? ::attn::Impl::exercise            \
                                                        : ::attn::Impl::solution)

// Registers the implementation this file is compiled for (ATTN_IMPL = exercise or solution).
#define ATTN_REGISTER_MODULE(number, name, title, backend, supports_fn, forward_fn)          \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, backend, ATTN_IMPL_ENUM, supports_fn, forward_fn, nullptr});    \
  }

// Registers a GPU module that only takes 16-bit tensors (forward = nullptr): module 07 on.
// Its native dtype is bf16; `attn run --module 7 --dtype f16` runs it on f16 tensors.
#define ATTN_REGISTER_MODULE_16BIT(number, name, title, supports_fn, forward16_fn)           \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, ::attn::Backend::gpu, ATTN_IMPL_ENUM, supports_fn, nullptr,     \
      forward16_fn});                                                                      \
  }

// Registers a GPU module that takes 16-bit tensors (forward16_fn) and fp32 tensors too
// (forward_fn), whose fp32 products also run on the tensor cores (module 07: 3xTF32). Its
// native dtype stays bf16; `attn run --module 7 --dtype f32` runs forward_fn.
#define ATTN_REGISTER_MODULE_16BIT_AND_F32(number, name, title, supports_fn, forward_fn,     \
                                           forward16_fn)                                   \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, ::attn::Backend::gpu, ATTN_IMPL_ENUM, supports_fn, forward_fn,  \
      forward16_fn, nullptr, nullptr, nullptr, true});                                     \
  }

// Registers an inference module (module 10): `entry` is a `static const attn::InferenceEntry`
// with its decode / prefill / append entry points; `supports_fn` is the dense SupportsFn
// (attn::refuse_dense_problem, or one that says more). It takes f16 and bf16 tensors, bf16 by
// default: `attn run --module 10 --seqlens-k 1,17,4096 --dtype f16`.
#define ATTN_REGISTER_MODULE_INFERENCE(number, name, title, supports_fn, entry)              \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, ::attn::Backend::gpu, ATTN_IMPL_ENUM, supports_fn, nullptr,     \
      nullptr, &(entry)});                                                                 \
  }

// Registers the modifier module (module 12): forward16_fn runs plain problems, `entry` (a
// `static const attn::ModifierEntry`) the ones with modifiers: `attn run --module 12 --alibi`.
#define ATTN_REGISTER_MODULE_MODIFIERS(number, name, title, supports_fn, forward16_fn, entry) \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, ::attn::Backend::gpu, ATTN_IMPL_ENUM, supports_fn, nullptr,     \
      forward16_fn, nullptr, &(entry)});                                                   \
  }

// Registers the backward module (module 11): forward_fn (fp32, may be nullptr) and forward16_fn
// run plain problems, `entry` (a `static const attn::BackwardEntry`) the forward with the
// log-sum-exp and the backward: `attn run --module 11 --backward`. It takes f32 (when
// forward_fn is given), f16 and bf16 tensors, bf16 by default.
#define ATTN_REGISTER_MODULE_BACKWARD(number, name, title, supports_fn, forward_fn,           \
                                      forward16_fn, entry)                                  \
  namespace {                                                                              \
  const bool attn_registered_ = ::attn::register_kernel(::attn::Kernel{                    \
      number, name, title, ::attn::Backend::gpu, ATTN_IMPL_ENUM, supports_fn, forward_fn,  \
      forward16_fn, nullptr, nullptr, &(entry)});                                          \
  }
