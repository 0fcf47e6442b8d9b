#include "tests/support.h"

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/diagnose.h"
#include "common/random.h"

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

bool check_against_reference(const Kernel& kernel, const Problem& p, const CheckOptions& o) {
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

bool check_inputs_against_reference(const Kernel& kernel, const Problem& p, const Inputs& in,
                                    const CheckOptions& o) {
  if (sanitizer_light() && attention_flops(p) > kSanitizerMaxFlops) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT (too large for a sanitizer): " << p.describe());
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
  if (!passed && r.status && o.extra_hints)
    for (const std::string& hint : o.extra_hints(p, in, r)) report << "  hint: " << hint << "\n";
  if (!passed && o.lesson[0]) report << "  read: " << o.lesson << "\n";
  CHECK_MESSAGE(passed, report.str());
  return passed;
}

bool matches(const Problem& p, const CheckResult& r, const std::vector<double>& model) {
  return compare_output(p, r.output, model, r.comparison.tolerance).passed();
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

}  // namespace attn::testing
