// Grader for module 07 (GPU): attention on the tensor cores, f16 and bf16. Built twice:
// grade_07 (exercise), check_07 (solution). Without a GPU it exits 77 (skipped).
//
// The checks, their shapes and the tolerance are tests/tensor_core_cases.h, shared with module
// 08 (the same kernel written with CuTe): the double-precision CPU attention on the same 16-bit
// inputs, relative L2 error within default_tolerance(dtype) (2e-3 for f16, 1e-2 for bf16). This
// file says which module runs and what a failure points at: the hints below and the sections
// of modules/07_tensor_cores/README.md.
#include <string>
#include <vector>

#include "common/runner.h"
#include "modules/07_tensor_cores/tensor_cores.h"
#include "tests/support.h"
#include "tests/tensor_core_cases.h"

using namespace attn;

namespace {

const char* kFragA = "modules/07_tensor_cores/README.md, section 2 (fragments: A from ldmatrix)";
const char* kMma = "modules/07_tensor_cores/README.md, section 3 (S = Q K^T and O += P V)";
const char* kPipeline = "modules/07_tensor_cores/README.md, section 4 (the pipeline you are given)";
const char* kPitfalls = "modules/07_tensor_cores/README.md, section 6 (pitfalls)";

}  // namespace

namespace attn::tensor_core_cases {

const Kernel& kernel() { return testing::kernel_under_test(7, testing::impl_under_test()); }

const Lessons kLessons = {kFragA, kMma, kPitfalls, kPipeline, kPipeline, kPipeline};

// ---- Models of the classic bugs of this module --------------------------------------------

// Finite but wrong outputs: which missing piece reproduces them?
std::vector<std::string> hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  return testing::operand_hints(
      p, in, r,
      "every output is 0: O += P V never accumulated anything (TODO 4, or P's fragments left "
      "at 0 in TODO 3)",
      "the output is the plain average of V: every score was 0, so S = Q K^T never reached "
      "the accumulators (TODO 1 or TODO 2)");
}

}  // namespace attn::tensor_core_cases

// ---- fp32 on the tensor cores: 3xTF32 and plain TF32 (README, section 10) -----------------
// forward_3xtf32 is the module's fp32 entry point (Kernel::forward); it must meet the course's
// fp32 tolerance, default_tolerance(f32) = 1e-4, against the double reference on the same fp32
// inputs, on the shapes that break tiled kernels. forward_tf32 is held to kTf32Tolerance, and
// must miss 1e-4 where 3xTF32 meets it: the point of the lesson, and a check that the plain
// rung really rounds to TF32.

namespace attn::fp32_cases {

namespace {

const char* kSplit =
    "modules/07_tensor_cores/README.md, section 10 (fp32 on the tensor cores: the split)";
const char* kRungs =
    "modules/07_tensor_cores/README.md, section 10 (fp32 on the tensor cores: the kernel)";

using testing::make_problem;

// The module's fp32 entry point: 3xTF32 over the implementation's Tf32Split (TODO 5).
const Kernel& x3() { return tensor_core_cases::kernel(); }

// Plain TF32: the same module with forward_tf32 as its fp32 entry point.
const Kernel& tf32() {
  static const Kernel k = [] {
    Kernel plain = x3();
    plain.name += "_tf32";
    plain.forward = attn::m07::ATTN_IMPL::forward_tf32;
    return plain;
  }();
  return k;
}

// A wrong but finite 3xTF32 output, in the exercise's terms.
std::vector<std::string> hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> found = testing::operand_hints(
      p, in, r,
      "every output is 0: Tf32Split::split leaves big and small at 0, so every product is 0 "
      "(TODO 5)",
      "the output is the plain average of V: every score was 0, so Q and K reached the "
      "products as zeros (TODO 5)");
  if (!found.empty()) return found;
  const double e = r.comparison.rel_l2_error;
  if (e > kFp32Tolerance && e < 3e-2)
    found.push_back(
        "the error has TF32's size, not fp32's: small must be the exact rest x - big, computed "
        "in fp32 from big as a float (__uint_as_float(big)), not 0; and big must be x rounded to "
        "TF32 (to_tf32(x)) (TODO 5)");
  return found;
}

testing::CheckOptions options(const char* section, float range, double tolerance) {
  testing::CheckOptions o;
  o.lesson = section;
  o.range = range;
  o.tolerance = tolerance;
  o.extra_hints = hints;
  return o;
}

Problem f32(int batch, int heads, int seq_q, int seq_k, int head_dim, bool causal,
            Layout layout = Layout::BHSD, int kv_heads = 0) {
  return make_problem(batch, heads, seq_q, seq_k, head_dim, causal, DType::f32, layout,
                      kv_heads);
}

// 3xTF32 against the double reference within the fp32 tolerance.
bool check(const Problem& p, const char* section = kSplit, float range = 1.0f) {
  return testing::check_against_reference(x3(), p, options(section, range, kFp32Tolerance));
}

// Plain TF32 within its own tolerance.
bool check_tf32(const Problem& p, float range = 1.0f) {
  return testing::check_against_reference(tf32(), p,
                                          options(kRungs, range, m07::kTf32Tolerance));
}

}  // namespace

TEST_CASE("fp32 (3xTF32): one small head") { check(f32(1, 1, 16, 16, 64, false)); }

TEST_CASE("fp32 (3xTF32): sequence lengths 1, 2, 17, 63, 64, 65, 129, 257, 1000, causal and not") {
  for (bool causal : {false, true})
    for (int n : {1, 2, 17, 63, 64, 65, 129, 257, 1000}) {
      check(f32(1, 2, n, n, 64, causal), kRungs);
      check(f32(1, 2, n, n, 128, causal), kRungs);
    }
}

TEST_CASE("fp32 (3xTF32): a long sequence: 4097, causal and not, head dims 64 and 128") {
  for (bool causal : {false, true})
    for (int d : {64, 128}) check(f32(1, 1, 4097, 4097, d, causal), kRungs);
}

TEST_CASE("fp32 (3xTF32): seq_q != seq_k, both ways, causal and not") {
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {64, 65},
                          {65, 64}, {100, 129}, {129, 100}})
      for (int d : {64, 128}) check(f32(1, 2, sq, sk, d, causal), kRungs);
}

TEST_CASE("fp32 (3xTF32): causal with seq_q > seq_k: rows that see no key are 0") {
  for (int d : {16, 64, 128})
    for (auto [sq, sk] : {std::pair{1000, 17}, {65, 2}, {4097, 1}, {300, 100}, {140, 100}})
      check(f32(2, 2, sq, sk, d, true), kRungs);
}

TEST_CASE("fp32 (3xTF32): head dims 1, 8, 16, 32, 40, 59, 64, 72, 80, 96, 127, 128") {
  // Padded to 64 or 128 columns (zeros in shared memory, never stored); dims that are not a
  // multiple of 4 take the 4-byte copy path.
  for (bool causal : {false, true})
    for (int d : {1, 8, 16, 32, 40, 59, 64, 72, 80, 96, 127, 128}) {
      check(f32(1, 2, 130, 70, d, causal), kRungs);
      check(f32(1, 2, 70, 300, d, causal), kRungs);
    }
}

TEST_CASE("fp32 (3xTF32): last query blocks with one query and idle warps, over many key tiles") {
  // The blocks hold 128 queries at D <= 64 and 256 at D = 128.
  for (int sq : {65, 129, 257})
    for (bool causal : {false, true})
      for (int d : {64, 128}) check(f32(2, 2, sq, 300, d, causal), kRungs);
}

TEST_CASE("fp32 (3xTF32): several batches and heads in one launch") {
  check(f32(3, 5, 100, 90, 64, false), kRungs);
  check(f32(3, 5, 300, 280, 96, true), kRungs);
}

TEST_CASE("fp32 (3xTF32): large logits (Q and K entries up to 3 and 4) stay within 1e-4") {
  for (float range : {3.0f, 4.0f})
    for (bool causal : {false, true})
      for (int d : {59, 64, 128}) {
        check(f32(1, 2, 128, 300, d, causal), kSplit, range);
        check(f32(1, 2, 300, 128, d, causal), kSplit, range);
        check(f32(1, 2, 1000, 1000, d, causal), kSplit, range);
      }
}

TEST_CASE("fp32 (3xTF32): rising scores: the running max moves at every key tile") {
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      const Problem p = f32(1, 2, 300, 1000, d, causal);
      const Inputs in =
          testing::rising_inputs(p, testing::next_seed(), std::min(0.05, 24.0 / p.seq_k));
      testing::check_inputs_against_reference(x3(), p, in, options(kRungs, 1.0f, kFp32Tolerance));
    }
}

TEST_CASE("fp32 (3xTF32): BSHD, padded O rows, rows not 16-byte aligned, packed QKV") {
  for (bool causal : {false, true}) {
    for (int d : {59, 64, 128}) check(f32(2, 4, 65, 33, d, causal, Layout::BSHD), kRungs);
    Problem p = f32(2, 3, 37, 41, 24, causal);
    p.o = {3 * (37 * 32 + 4), 37 * 32 + 4, 32};  // 4 unused floats after every row
    p.q = {3 * 37 * 25, 37 * 25, 25};            // Q rows 1 float apart: not 16-byte aligned
    check(p, kRungs);
    Problem u = f32(1, 2, 70, 100, 64, causal);
    u.k = {2 * 100 * 66, 100 * 66, 66};  // K rows 8 bytes off a 16-byte boundary
    u.v = {2 * 100 * 65, 100 * 65, 65};  // V rows 4 bytes off
    check(u, kRungs);
  }
  const testing::CheckOptions o = options(kRungs, 1.0f, kFp32Tolerance);
  testing::check_packed_qkv(x3(), {2, 4, 4, 77, 64}, DType::f32, o);
  testing::check_packed_qkv(x3(), {1, 3, 3, 130, 128, true, 0, 0, 4}, DType::f32, o);
  testing::check_packed_qkv(x3(), {2, 8, 2, 70, 64, false, 1, 1}, DType::f32, o);  // GQA, 4 bytes off
}

TEST_CASE("fp32 (3xTF32): grouped K/V heads (GQA 8 over 2 and 4, MQA), BHSD and BSHD") {
  for (int kv : {4, 2, 1})
    for (bool causal : {false, true})
      for (Layout layout : {Layout::BHSD, Layout::BSHD}) {
        check(f32(2, 8, 100, 130, 64, causal, layout, kv), kRungs);
        check(f32(1, 8, 130, 65, 128, causal, layout, kv), kRungs);
      }
  check(f32(1, 32, 1, 4097, 128, false, Layout::BSHD, 1), kRungs);  // MQA decoding
}

TEST_CASE("fp32 (3xTF32): grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  check(f32(7, 10000, 3, 5, 16, true), kRungs);
}

TEST_CASE("plain TF32: within its own tolerance, unit-range inputs and logits of a few units") {
  for (bool causal : {false, true})
    for (int d : {16, 59, 64, 128}) {
      check_tf32(f32(1, 2, 1, 300, d, causal));
      check_tf32(f32(1, 2, 129, 1000, d, causal));
      check_tf32(f32(2, 2, 300, 100, d, causal));  // causal: rows that see no key
      check_tf32(f32(1, 2, 257, 300, d, causal), 4.0f);
    }
  check_tf32(f32(2, 8, 100, 130, 64, true, Layout::BSHD, 2));
  check_tf32(f32(1, 2, 70, 100, 59, false, Layout::BSHD));
}

TEST_CASE("plain TF32 is not fp32: it misses 1e-4 on large logits where 3xTF32 meets it") {
  // The same inputs for both. If forward_tf32 secretly computed in fp32 (no rounding to TF32)
  // its error would be near 3xTF32's and the first CHECK below fails; if 3xTF32 lost its small
  // part, the second does.
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      const Problem p = f32(1, 2, 300, 1000, d, causal);
      const Inputs in = random_inputs(p, testing::next_seed(), 4.0f);
      const CheckResult plain = check_kernel(tf32(), p, in, m07::kTf32Tolerance);
      const CheckResult three = check_kernel(x3(), p, in, kFp32Tolerance);
      REQUIRE_MESSAGE(plain.status.is_ok(), plain.status.message());
      REQUIRE_MESSAGE(three.status.is_ok(), three.status.message());
      const double e_plain = plain.comparison.rel_l2_error, e_three = three.comparison.rel_l2_error;
      INFO(p.describe() << " range 4, seed " << in.seed << ": TF32 " << e_plain << ", 3xTF32 "
                        << e_three << " (" << kSplit << ")");
      CHECK(e_plain > kFp32Tolerance);      // TF32's 10 mantissa bits are not fp32
      CHECK(e_plain < m07::kTf32Tolerance);  // ... but within TF32's own tolerance
      CHECK(e_three < kFp32Tolerance);      // 3xTF32 is
      CHECK(e_plain > 10.0 * e_three);      // by a wide margin
    }
}

}  // namespace attn::fp32_cases
