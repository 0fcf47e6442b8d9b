// Grader for module 01 (GPU): the naive kernel, one thread per query.
// Built twice: grade_01 (exercise), check_01 (solution). Without a GPU it exits 77 (skipped).
#include <algorithm>
#include <utility>

#include "modules/01_naive/naive.h"
#include "tests/support.h"

using namespace attn;

namespace {
const Kernel& kernel() { return testing::kernel_under_test(1, testing::impl_under_test()); }
testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  return o;
}
const char* kMapping = "modules/01_naive/README.md, section 2 (one thread per query)";
const char* kPasses = "modules/01_naive/README.md, section 3 (three passes)";
}  // namespace

TEST_CASE("one small head") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 8, 8, 16), lesson(kPasses));
}

TEST_CASE("sequence lengths around the block size: 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000") {
  for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
    testing::check_against_reference(kernel(), Problem::make(1, 2, n, n, 64), lesson(kMapping));
}

TEST_CASE("a long sequence: 4097") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 4097, 4097, 64), lesson(kMapping));
}

TEST_CASE("seq_q != seq_k") {
  for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {65, 2}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64), lesson(kPasses));
}

TEST_CASE("head dims 1, 16, 32, 59, 64, 80, 96, 128, 256") {
  for (int d : {1, 16, 32, 59, 64, 80, 96, 128, 256})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 65, 70, d), lesson(kPasses));
}

TEST_CASE("several batches and heads in one launch") {
  testing::check_against_reference(kernel(), Problem::make(3, 5, 100, 90, 64), lesson(kMapping));
}

TEST_CASE("large logits: scores in the hundreds (exp overflows without the max)") {
  testing::CheckOptions o = lesson(kPasses);
  o.range = 30.0f;
  testing::check_against_reference(kernel(), Problem::make(1, 2, 128, 128, 64), o);
}

TEST_CASE("a custom softmax scale") {
  Problem p = Problem::make(1, 2, 50, 60, 32);
  p.scale = 0.37f;
  testing::check_against_reference(kernel(), p, lesson(kPasses));
}

TEST_CASE("BSHD layout (heads interleaved per token)") {
  testing::check_against_reference(kernel(), Problem::make(2, 4, 65, 33, 64, false, Layout::BSHD),
                                   lesson(kMapping));
}

TEST_CASE("padded rows: O's row stride is larger than head_dim") {
  Problem p = Problem::make(2, 3, 37, 41, 20);
  p.o = {3 * 37 * 24, 37 * 24, 24};  // 4 unused floats after each output row
  p.q = {3 * 37 * 21, 37 * 21, 21};  // and 1 after each query row
  testing::check_against_reference(kernel(), p, lesson(kMapping));
}

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  // A grid of (query blocks, batch*heads) would need gridDim.y = 70000; the limit is 65535.
  testing::check_against_reference(kernel(), testing::grid_limit_problem(3, 5, 16), lesson(kMapping));
}

TEST_CASE("refuses the causal mask with a clear message") {
  Problem p = Problem::make(1, 1, 4, 4, 16, /*causal=*/true);
  const Status s = kernel().supports(p);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("causal") != std::string::npos);
}

// Going further (lesson 01, section 8): `./course grade 01 --extra`. The learner's stub is in
// modules/01_naive/further.cu (forward_two_pass); a plain `./course grade 01` leaves this suite
// out, and the untouched stub fails it (it writes no output).
namespace {
const char* kFurther = "modules/01_naive/README.md, section 8 (going further)";

// The module's kernel with forward_two_pass in place of forward.
const Kernel& two_pass() {
  static const Kernel k = [] {
    Kernel two = kernel();
    two.name = "naive_two_pass";
    two.forward = attn::m01::ATTN_IMPL::forward_two_pass;
    return two;
  }();
  return k;
}
}  // namespace

TEST_SUITE("extra") {
  TEST_CASE("extra: two passes: lengths around the block size, seq_q != seq_k, head dims") {
    for (int n : {1, 2, 17, 127, 128, 129, 1000})
      testing::check_against_reference(two_pass(), Problem::make(1, 2, n, n, 64), lesson(kFurther));
    for (auto [sq, sk] : {std::pair{1, 1000}, {1000, 1}, {65, 2}})
      testing::check_against_reference(two_pass(), Problem::make(1, 2, sq, sk, 64),
                                       lesson(kFurther));
    for (int d : {1, 59, 128})
      testing::check_against_reference(two_pass(), Problem::make(2, 3, 65, 70, d),
                                       lesson(kFurther));
    testing::check_against_reference(two_pass(),
                                     Problem::make(2, 4, 65, 33, 64, false, Layout::BSHD),
                                     lesson(kFurther));
  }

  TEST_CASE("extra: two passes: the max moves at every key (rising scores), large logits") {
    // Rising scores: a sum that is not rescaled when the max moves is wrong at every key.
    for (int sk : {17, 300, 1000}) {
      const Problem p = Problem::make(1, 2, 40, sk, 64);
      testing::check_inputs_against_reference(
          two_pass(), p, testing::rising_inputs(p, testing::next_seed(), std::min(0.05, 24.0 / sk)),
          lesson(kFurther));
    }
    testing::CheckOptions big = lesson(kFurther);
    big.range = 30.0f;
    testing::check_against_reference(two_pass(), Problem::make(1, 2, 128, 128, 64), big);
  }
}
