// The CPU emulation (common/emulation/) finds what a GPU would not say clearly: planted bugs
// (tests/emulation/planted.cu) must be reported with the thread and the source line, and
// correct kernels must run without a report and give the right numbers.
#include <fstream>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/runner.h"
#include "modules/02_smem_tiling/smem_tiling.h"
#include "tests/emulation/planted.h"
#include "tests/support.h"

using namespace attn;

namespace {

// "tests/emulation/planted.cu:42": where the line marked `// PLANTED: <marker>` is.
std::string planted_line(const std::string& marker) {
  std::ifstream file(std::string(ATTN_SOURCE_DIR) + "/tests/emulation/planted.cu");
  REQUIRE_MESSAGE(file.good(), "cannot read tests/emulation/planted.cu");
  std::string line;
  for (int n = 1; std::getline(file, line); ++n)
    if (line.find("// PLANTED: " + marker) != std::string::npos)
      return "tests/emulation/planted.cu:" + std::to_string(n);
  FAIL("no line marked `// PLANTED: " << marker << "`");
  return "";
}

void expect_report(const std::string& report, const std::vector<std::string>& parts) {
  INFO("report: " << report);
  CHECK_FALSE(report.empty());
  for (const std::string& part : parts) CHECK_MESSAGE(report.find(part) != std::string::npos,
                                                      "missing `" << part << "`");
}

// Module 02 run through the registry's runner (poisoned output, guard, reference), with the
// planted forward in place of the solution's.
CheckResult check_02(ForwardFn forward, const Problem& p) {
  Kernel k;
  k.module = 2;
  k.name = "planted";
  k.backend = Backend::gpu;
  k.supports = &m02::supports;
  k.forward = forward;
  return check_kernel(k, p, random_inputs(p, testing::next_seed()));
}

}  // namespace

TEST_CASE("module 02's solution, copied, runs clean and right") {
  const CheckResult r = check_02(&planted::forward_02, Problem::make(1, 2, 70, 100, 64));
  INFO(r.status.message());
  CHECK(r.passed());
}

TEST_CASE("a missing barrier between the tile load and its reads: thread and line") {
  const CheckResult r =
      check_02(&planted::forward_02_no_leading_barrier, Problem::make(1, 1, 70, 100, 64));
  REQUIRE_FALSE(r.status.is_ok());
  expect_report(r.status.message(),
                {"thread (0,0,0) of block (0,0,0) reads shared k_tile[0][1]",
                 planted_line("tile read"), "no thread of this block has written",
                 "__syncthreads()"});
}

TEST_CASE("a missing barrier before the next tile overwrites the current one: a race") {
  const CheckResult r =
      check_02(&planted::forward_02_no_trailing_barrier, Problem::make(1, 1, 70, 100, 64));
  REQUIRE_FALSE(r.status.is_ok());
  expect_report(r.status.message(),
                {"shared-memory race", "thread (0,0,0) of block (0,0,0) reads k_tile[0][63]",
                 planted_line("tile read"), "which thread (63,0,0) wrote since the last",
                 planted_line("tile store")});
}

TEST_CASE("a race on shared memory between neighbours") {
  expect_report(planted::run_planted("shared race"),
                {"cudaErrorLaunchFailure", "shared-memory race", "of block (0,0,0)",
                 planted_line("neighbour race"), "partial["});
}

TEST_CASE("a thread returns before a __syncthreads() the others reach") {
  expect_report(planted::run_planted("early return"),
                {"divergent __syncthreads()", "thread (16,0,0)", "returned from the kernel",
                 planted_line("barrier after return")});
}

TEST_CASE("threads wait at different __syncthreads()") {
  expect_report(planted::run_planted("divergent barriers"),
                {"divergent __syncthreads()", planted_line("barrier in if"),
                 planted_line("barrier in else")});
}

TEST_CASE("global memory: a read past the end of an input") {
  expect_report(planted::run_planted("read past input"),
                {"cudaErrorIllegalAddress", "thread (99,0,0) of block (0,0,0) reads 4 bytes",
                 "out of bounds", planted_line("read past the end"),
                 "0 bytes past the end of a cudaMalloc'd buffer of 400 bytes"});
}

TEST_CASE("global memory: a write past the end of an output") {
  expect_report(planted::run_planted("write past output"),
                {"cudaErrorIllegalAddress", "thread (100,0,0) of block (0,0,0) writes 4 bytes",
                 planted_line("write past the end")});
}

TEST_CASE("shared memory: an index past the end of a __shared__ array") {
  expect_report(planted::run_planted("shared out of bounds"),
                {"cudaErrorIllegalAddress", "thread (63,0,0) of block (0,0,0) writes shared memory "
                 "out of bounds", planted_line("shared index past the end"),
                 "past the end of __shared__ float tile[64]"});
}

TEST_CASE("a misaligned float4 load") {
  expect_report(planted::run_planted("misaligned vector"),
                {"cudaErrorMisalignedAddress", "thread (0,0,0) of block (0,0,0) reads 16 bytes",
                 planted_line("misaligned float4")});
}

TEST_CASE("two threads write one output element") {
  expect_report(planted::run_planted("same output twice"),
                {"global-memory race", "thread (1,0,0) of block (0,0,0) writes",
                 planted_line("two threads, one element")});
}

TEST_CASE("launch limits: gridDim.y past the limit, blocks over 1024 threads") {
  expect_report(planted::run_planted("grid.y past the limit"),
                {"cudaErrorInvalidConfiguration", "gridDim.y and gridDim.z at most 65535"});
  expect_report(planted::run_planted("block of 2048 threads"),
                {"cudaErrorInvalidConfiguration", "at most 1024 threads"});
}

TEST_CASE("warp shuffles, votes and barriers compute what a GPU computes") {
  std::vector<float> out;
  const std::string report = planted::run_planted("sums", &out);
  INFO(report);
  REQUIRE(report.empty());
  CHECK(out[0] == doctest::Approx(127.0 * 128.0 / 2.0));
  for (int lane = 0; lane < 128; ++lane) {
    const int w = lane / 32;
    const double warp_sum = 32.0 * (32 * w) + 31.0 * 32.0 / 2.0;
    CHECK(out[size_t(1 + lane)] == doctest::Approx(warp_sum));
  }
  CHECK(out[129] == 11.0f);  // lanes 0, 3, ..., 30 of warp 0
}
