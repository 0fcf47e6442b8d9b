// Tests of the grader's hints (CPU only): each classic bug, simulated on the reference output,
// must produce the hint that names it. These are the messages a learner reads when stuck.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/diagnose.h"
#include "common/reference.h"
#include "common/runner.h"

using namespace attn;

namespace {

// A CheckResult whose output is the exact reference, for the test to damage.
CheckResult exact_result(const Problem& p, const Inputs& in) {
  CheckResult r;
  r.reference = reference_attention(p, in.q, in.k, in.v);
  r.output.assign(r.reference.begin(), r.reference.end());
  return r;
}

std::string hints_of(const Problem& p, const Inputs& in, CheckResult& r) {
  if (r.status) r.comparison = compare_output(p, r.output, r.reference);
  std::string all;
  for (const std::string& h : diagnose(p, in, r)) all += h + "\n";
  return all;
}

void set_row(const Problem& p, CheckResult& r, int b, int h, int i, float value) {
  const int64_t row = Problem::offset(p.o, b, h, i);
  for (int d = 0; d < p.head_dim; ++d) r.output[size_t(row + d)] = value;
}

}  // namespace

TEST_CASE("hints: a correct output gets none") {
  const Problem p = Problem::make(1, 2, 10, 12, 8);
  const Inputs in = random_inputs(p, 1);
  CheckResult r = exact_result(p, in);
  CHECK(hints_of(p, in, r).empty());
}

TEST_CASE("hints: the kernel did not run") {
  const Problem p = Problem::make(1, 1, 4, 4, 8);
  const Inputs in = random_inputs(p, 1);
  CheckResult r;
  r.status = Status::error("invalid configuration argument");
  CHECK(hints_of(p, in, r).find("did not run: invalid configuration") != std::string::npos);
}

TEST_CASE("hints: nothing written") {
  const Problem p = Problem::make(1, 2, 10, 12, 8);
  const Inputs in = random_inputs(p, 2);
  CheckResult r = exact_result(p, in);
  for (float& x : r.output) x = poison_value();
  CHECK(hints_of(p, in, r).find("no output was written at all") != std::string::npos);
}

TEST_CASE("hints: the grid covers too few queries") {
  const Problem p = Problem::make(2, 2, 100, 12, 8);
  const Inputs in = random_inputs(p, 3);
  CheckResult r = exact_result(p, in);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int i = 64; i < 100; ++i) set_row(p, r, b, h, i, poison_value());
  CHECK(hints_of(p, in, r).find("queries >= 64 were never written") != std::string::npos);
}

TEST_CASE("hints: the grid covers too few heads") {
  const Problem p = Problem::make(2, 4, 10, 12, 8);
  const Inputs in = random_inputs(p, 4);
  CheckResult r = exact_result(p, in);
  for (int b = 0; b < 2; ++b)
    for (int h = (b == 0 ? 3 : 0); h < 4; ++h)
      for (int i = 0; i < 10; ++i) set_row(p, r, b, h, i, poison_value());
  const std::string hints = hints_of(p, in, r);
  CHECK(hints.find("(batch 0, head 3) and later were never written") != std::string::npos);
  CHECK(hints.find("65535") != std::string::npos);
}

TEST_CASE("hints: NaN from overflow vs NaN in a fully masked row") {
  const Problem p = Problem::make(1, 1, 10, 12, 8);
  const Inputs in = random_inputs(p, 5);
  CheckResult r = exact_result(p, in);
  set_row(p, r, 0, 0, 2, std::nanf(""));
  CHECK(hints_of(p, in, r).find("query 2 gives NaN/Inf: exp overflowed") != std::string::npos);

  const Problem tall = Problem::make(1, 1, 6, 2, 8, /*causal=*/true);  // queries 0-3 see no key
  const Inputs tin = random_inputs(tall, 6);
  CheckResult t = exact_result(tall, tin);
  set_row(tall, t, 0, 0, 1, std::nanf(""));
  CHECK(hints_of(tall, tin, t).find("sees no key under the causal mask") != std::string::npos);
}

TEST_CASE("hints: an error spread thinly over every output is named a precision problem") {
  const Problem p = Problem::make(1, 2, 20, 30, 16);
  const Inputs in = random_inputs(p, 9);
  CheckResult r = exact_result(p, in);
  for (float& x : r.output) x *= 1.0f + 1e-3f;  // 10x the fp32 tolerance, 1/10 of "far off"
  const std::string hints = hints_of(p, in, r);
  CHECK_FALSE(r.comparison.passed());
  CHECK(hints.find("no single element is far off") != std::string::npos);
  CHECK(hints.find("first wrong element") == std::string::npos);
  set_row(p, r, 0, 1, 7, 5.0f);  // one row really wrong: located as before
  const std::string located = hints_of(p, in, r);
  CHECK(located.find("first wrong element (b=0, h=1, i=7") != std::string::npos);
  CHECK(located.find("no single element is far off") == std::string::npos);
}

TEST_CASE("hints: a missing 1/sqrt(d) scale is recognized") {
  const Problem p = Problem::make(1, 2, 20, 30, 16);
  const Inputs in = random_inputs(p, 7);
  CheckResult r = exact_result(p, in);
  Problem unscaled = p;
  unscaled.scale = 1.0f;
  const std::vector<double> buggy = reference_attention(unscaled, in.q, in.k, in.v);
  r.output.assign(buggy.begin(), buggy.end());
  const std::string hints = hints_of(p, in, r);
  CHECK(hints.find("WITHOUT the 1/sqrt(head_dim) scale") != std::string::npos);
  CHECK(hints.find("first wrong element") != std::string::npos);
}

TEST_CASE("hints: an ignored causal mask is recognized") {
  const Problem p = Problem::make(1, 2, 20, 30, 16, /*causal=*/true);
  const Inputs in = random_inputs(p, 8);
  CheckResult r = exact_result(p, in);
  Problem unmasked = p;
  unmasked.causal = false;
  const std::vector<double> buggy = reference_attention(unmasked, in.q, in.k, in.v);
  r.output.assign(buggy.begin(), buggy.end());
  CHECK(hints_of(p, in, r).find("WITHOUT the causal mask") != std::string::npos);
}

TEST_CASE("hints: a refused launch and writes past the end of O") {
  const Problem p = Problem::make(7, 10000, 3, 5, 16);
  const Inputs in = random_inputs(Problem::make(1, 1, 1, 1, 16), 9);  // inputs unused here
  CheckResult refused;
  refused.status = Status::error("x.cu:3: cudaErrorInvalidValue (invalid argument) in `launch`");
  const std::string hints = hints_of(p, in, refused);
  CHECK(hints.find("gridDim.y and .z up to 65535") != std::string::npos);
  CHECK(hints.find("batch*heads here is 70000") != std::string::npos);

  const Problem small = Problem::make(1, 1, 10, 12, 8);
  const Inputs sin = random_inputs(small, 10);
  CheckResult stray = exact_result(small, sin);
  stray.guard_writes = 48;
  CHECK_FALSE(stray.passed());
  CHECK(hints_of(small, sin, stray).find("48 values were written PAST THE END of O") !=
        std::string::npos);
}

TEST_CASE("hints: module 00 (CPU) gets a CPU hint for an unwritten output") {
  const Problem p = Problem::make(1, 1, 4, 4, 8);
  const Inputs in = random_inputs(p, 11);
  CheckResult r = exact_result(p, in);
  r.backend = Backend::cpu;
  for (float& x : r.output) x = poison_value();
  const std::string hints = hints_of(p, in, r);
  CHECK(hints.find("does forward() store into o") != std::string::npos);
  CHECK(hints.find("cudaGetLastError") == std::string::npos);
}
