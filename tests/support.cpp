#include "tests/support.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/cuda_check.h"
#include "common/diagnose.h"
#include "common/half.h"
#include "common/random.h"
#include "common/reference.h"

namespace attn::testing {

uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("ATTN_SEED")) return uint64_t(std::strtoull(env, nullptr, 10));
    return fresh_seed();
  }();
  return seed;
}

uint64_t next_seed() {
  static uint64_t counter = 0;
  return base_seed() + counter++;
}

const Kernel& kernel_under_test(int module, Impl impl) {
  const Kernel* k = find_kernel(module, impl);
  REQUIRE_MESSAGE(k != nullptr, "module " << module << " is not registered in this binary");
  return *k;
}

namespace {

std::vector<GpuRequirement>& gpu_requirements() {
  static std::vector<GpuRequirement> checks;
  return checks;
}

doctest::Context* run_context = nullptr;
bool stopped = false;

// Whether the last failure left the CUDA context unusable: a fault inside a kernel is sticky,
// so the device still reports it; a refusal or a bad launch configuration is not. Never on
// the CPU emulation, whose errors do not stick.
bool gpu_context_lost(const Kernel& kernel, const CheckResult& r) {
  if (r.status || kernel.backend != Backend::gpu || emulated()) return false;
  return cudaDeviceSynchronize() != cudaSuccess;
}

void stop_run() {
  stopped = true;
  // --abort-after=1: doctest ends the run after this test case (a case that failed before
  // counts too, which is what we want: no later case can run).
  if (run_context) run_context->setOption("abort-after", 1);
}

// Elements of the O buffer that are not part of any row (padding in strided layouts) must
// keep the poison: a kernel that writes there has its indexing wrong.
int64_t writes_outside_rows(const Problem& p, const std::vector<float>& out) {
  std::vector<char> inside(out.size(), 0);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int64_t row = Problem::offset(p.o, b, h, i);
        for (int d = 0; d < p.head_dim; ++d) inside[size_t(row + d)] = 1;
      }
  int64_t outside = 0;
  for (size_t e = 0; e < out.size(); ++e) outside += !inside[e] && !is_poison(out[e]);
  return outside;
}

}  // namespace

bool require_gpu(GpuRequirement check) {
  gpu_requirements().push_back(check);
  return true;
}

std::string unmet_gpu_requirement(const DeviceInfo& device) {
  for (GpuRequirement check : gpu_requirements())
    if (std::string why = check(device); !why.empty()) return why;
  return "";
}

void set_run_context(doctest::Context* context) { run_context = context; }

bool run_stopped() { return stopped; }

bool check_against_reference(const Kernel& kernel, const Problem& p, const CheckOptions& o) {
  if (stopped) return false;
  return check_inputs_against_reference(kernel, p, random_inputs(p, next_seed(), o.range), o);
}

bool sanitizer_light() {
  static const bool light = [] {
    const char* env = std::getenv("ATTN_SANITIZER_LIGHT");
    return env && env[0] == '1';
  }();
  return light;
}

bool skip_grid_limits_under_racecheck() {
  static const bool racecheck = [] {
    const char* tool = std::getenv("ATTN_SANITIZER_TOOL");
    return sanitizer_light() && tool && std::string(tool) == "racecheck";
  }();
  if (racecheck) MESSAGE("grid-limit case not run under racecheck (70000 blocks are too many for it)");
  return racecheck;
}

bool emulated() {
#ifdef ATTN_EMULATION
  return true;
#else
  return false;
#endif
}

Problem grid_limit_problem(int seq_q, int seq_k, int head_dim, bool causal) {
  if (emulated()) {
    MESSAGE("emulated: batch*heads = 300 instead of 70000; the emulation's gridDim.y limit is "
            "255 instead of 65535");
    return Problem::make(3, 100, seq_q, seq_k, head_dim, causal);
  }
  return Problem::make(7, 10000, seq_q, seq_k, head_dim, causal);
}

bool check_inputs_against_reference(const Kernel& kernel, const Problem& p, const Inputs& in,
                                    const CheckOptions& o) {
  if (stopped) return false;
  if (sanitizer_light() && attention_flops(p) > kSanitizerMaxFlops) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT (too large for a sanitizer): " << p.describe());
    return true;
  }
  if (emulated() && attention_flops(p) > kEmulationMaxFlops) {
    MESSAGE("not run under the CPU emulation (too large to emulate; a GPU grade runs it): "
            << p.describe());
    return true;
  }
  return report_against_reference(kernel, p, in, check_kernel(kernel, p, in, o.tolerance), o);
}

bool report_against_reference(const Kernel& kernel, const Problem& p, const Inputs& in,
                              const CheckResult& r, const CheckOptions& o) {
  const uint64_t seed = in.seed;
  std::ostringstream report;
  report << kernel.label() << " on " << p.describe() << (o.range != 1.0f ? " (large logits)" : "")
         << ", seed " << seed << " (replay: ATTN_SEED=" << base_seed() << ")\n";
  if (r.status) report << "  " << r.comparison.summary() << "\n";
  for (const std::string& hint : diagnose(p, in, r)) report << "  hint: " << hint << "\n";
  if (!r.status && o.error_hints)
    for (const std::string& hint : o.error_hints(p, r.status)) report << "  hint: " << hint << "\n";
  const bool lost = gpu_context_lost(kernel, r);
  if (lost)
    report << "  hint: after this fault the GPU context is unusable (every later CUDA call "
           << "fails with the same error), so the remaining checks are not run: fix this one "
           << "and grade again\n";
  bool passed = r.passed();
  if (r.status) {
    const int64_t outside = writes_outside_rows(p, r.output);
    if (outside > 0) {
      report << "  hint: " << outside << " elements between O's rows were written: the kernel "
             << "ignores the strides (p.o.seq / p.o.head / p.o.batch) or stores columns >= "
             << "head_dim\n";
      passed = false;
    }
  }
  const bool finite_and_contained = r.comparison.nan_count == 0 && r.guard_writes == 0;
  if (!passed && r.status && finite_and_contained && o.extra_hints)
    for (const std::string& hint : o.extra_hints(p, in, r)) report << "  hint: " << hint << "\n";
  if (!passed && o.lesson[0]) report << "  read: " << o.lesson << "\n";
  CHECK_MESSAGE(passed, report.str());
  if (lost) stop_run();
  return passed;
}

bool models_affordable(const Problem& p) {
  const double work = double(p.batch) * p.heads * p.seq_q * double(p.seq_k) * p.head_dim;
  return work <= 3e8;
}

std::vector<std::string> operand_hints(const Problem& p, const Inputs& in, const CheckResult& r,
                                       const char* all_zero, const char* zero_scores) {
  if (!models_affordable(p)) return {};
  if (std::all_of(r.output.begin(), r.output.end(), [](float x) { return x == 0.0f; }))
    return {all_zero};
  // S = 0 everywhere gives the softmax of zeros, i.e. the plain average of the visible V rows.
  const std::vector<float> zero_q(in.q.size(), 0.0f);
  if (matches(p, r, reference_attention(p, zero_q, in.k, in.v))) return {zero_scores};
  return {};
}

Inputs rising_inputs(const Problem& p, uint64_t seed, double step) {
  Inputs in = random_inputs(p, seed);
  const double scale = p.softmax_scale();
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        float* q = in.q.data() + Problem::offset(p.q, b, h, i);
        for (int c = 0; c < p.head_dim; ++c) q[c] = 1.0f + 0.25f * q[c];
      }
    for (int h = 0; h < p.kv_heads; ++h)
      for (int j = 0; j < p.seq_k; ++j) {
        float* k = in.k.data() + Problem::offset(p.k, b, h, j);
        const float shift = float(step * j / (scale * p.head_dim));
        for (int c = 0; c < p.head_dim; ++c) k[c] = 0.1f * k[c] + shift;
      }
  }
  return in;
}

namespace {

// Uploads the packed tensor as Elem (float, or the 16-bit patterns of t), runs the kernel on
// the Q/K/V views into it, and returns O's whole allocation as floats: o_shift elements before
// O, O, then the guard (the 16-bit poison reads back as the float poison).
template <class Elem>
Status forward_on_packed(const Kernel& kernel, const Problem& p, const PackedQkv& c, DType t,
                         const std::vector<float>& packed, int64_t k_at, int64_t v_at,
                         std::vector<float>& all) {
  constexpr bool kFloat = std::is_same_v<Elem, float>;
  DeviceBuffer<Elem> qkv([&] {
    if constexpr (kFloat) return packed;
    else return to_bits16(packed, t);
  }());
  DeviceBuffer<Elem> out(size_t(c.o_shift + p.o_elements() + kGuardElements));
  out.poison();
  const Elem* base = qkv.get();
  Status s = Status::ok();
  if constexpr (kFloat)
    s = kernel.forward(p, base + c.shift, base + k_at, base + v_at, out.get() + c.o_shift,
                       nullptr);
  else
    s = kernel.forward16(p, base + c.shift, base + k_at, base + v_at, out.get() + c.o_shift,
                         nullptr);
  if (!s) return s;
  ATTN_CUDA_CHECK(cudaGetLastError());
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if constexpr (kFloat) all = out.to_host();
  else all = from_bits16(out.to_host(), t);
  return Status::ok();
}

}  // namespace

bool check_packed_qkv(const Kernel& kernel, const PackedQkv& c, DType t, const CheckOptions& o) {
  if (stopped) return false;
  const int64_t d = c.head_dim, width = int64_t(c.heads + 2 * c.kv_heads) * d;
  Problem p = Problem::make(c.batch, c.heads, c.seq, c.seq, c.head_dim, c.causal, Layout::BSHD,
                            c.kv_heads);
  p.dtype = t;
  p.q = p.k = p.v = Strides{c.seq * width, d, width};
  const int64_t o_row = d + c.o_pad;
  p.o = Strides{c.seq * c.heads * o_row, o_row, c.heads * o_row};
  REQUIRE(validate(p).is_ok());
  if (sanitizer_light() && attention_flops(p) > kSanitizerMaxFlops) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT (too large for a sanitizer): " << p.describe());
    return true;
  }

  // The host copy: one packed tensor (rounded to t, as the upload will be), and Q/K/V as the
  // slices the kernel will see.
  Inputs in;
  in.seed = next_seed();
  std::vector<float> packed(size_t(c.shift + c.batch * c.seq * width));
  fill_uniform(packed, in.seed);
  round_to_dtype(packed, t);
  const int64_t k_at = c.shift + c.heads * d, v_at = k_at + c.kv_heads * d;
  auto slice = [&](int64_t at, int64_t n) {
    REQUIRE(at + n <= int64_t(packed.size()));
    return std::vector<float>(packed.begin() + at, packed.begin() + at + n);
  };
  in.q = slice(c.shift, p.q_elements());
  in.k = slice(k_at, p.kv_elements());
  in.v = slice(v_at, p.kv_elements());

  CheckResult r;
  r.backend = kernel.backend;
  r.status = kernel.supports(p);
  if (r.status) {
    try {
      std::vector<float> all;
      r.status = t == DType::f32
                     ? forward_on_packed<float>(kernel, p, c, t, packed, k_at, v_at, all)
                     : forward_on_packed<uint16_t>(kernel, p, c, t, packed, k_at, v_at, all);
      if (r.status) {
        const auto begin = all.begin() + c.o_shift, end = begin + p.o_elements();
        r.output.assign(begin, end);
        // Writes before O's first element or past its last count as writes past the end.
        const auto written = [](float x) { return !is_poison(x); };
        r.guard_writes = std::count_if(all.begin(), begin, written) +
                         std::count_if(end, all.end(), written);
      }
    } catch (const CudaError& e) {
      r.status = Status::error(e.what());
    }
  }
  if (r.status) {
    r.reference = reference_attention(p, in.q, in.k, in.v);
    r.comparison = compare_output(p, r.output, r.reference, o.tolerance);
  }
  const std::string type = dtype_name(t);  // INFO keeps a reference, so a named string
  INFO("Q, K, V are views into one packed [B, S, H + 2*KVH, D] " << type << " buffer, "
       << c.shift << " elements into its allocation; O starts " << c.o_shift
       << " elements in, rows padded by " << c.o_pad);
  return report_against_reference(kernel, p, in, r, o);
}

}  // namespace attn::testing
