// Tests of the `attn` command line, in-process (CPU only): parsing, the checks on bad input
// (one line, non-zero exit, never a crash) and running module 00 from flags and from .npy files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/device.h"
#include "common/npy.h"
#include "common/random.h"

using namespace attn;

namespace {

struct Result {
  int code;
  std::string out, err;
};

Result attn_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

// A failure must be exactly one line on stderr that contains `expected`.
void expect_one_line_error(const Result& r, int code, const std::string& expected) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == code);
  CHECK(r.err.find(expected) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

std::string temp_path(const std::string& name) { return "/tmp/attn_cli_" + name; }

void write_random_npy(const std::string& path, const std::vector<int64_t>& shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> data(static_cast<size_t>(n));
  fill_uniform(data, seed);
  write_npy(path, shape, data);
}

}  // namespace

TEST_CASE("attn list names every module") {
  const Result r = attn_cli({"list"});
  CHECK(r.code == 0);
  CHECK(r.out.find("reference") != std::string::npos);
  CHECK(r.out.find("naive") != std::string::npos);
}

TEST_CASE("attn run module 00 (CPU) verifies and times") {
  const Result r = attn_cli({"run", "--module", "0", "--seq", "20", "--dim", "16", "--heads", "3",
                             "--seed", "3", "--verify", "--time", "--iters", "2"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(r.out.find("seed 3") != std::string::npos);
  CHECK(r.out.find("TFLOP/s") != std::string::npos);
  CHECK(r.out.find("B=1 H=3 Sq=20 Sk=20 D=16") != std::string::npos);
}

TEST_CASE("attn run: separate query and key lengths, BSHD, custom scale") {
  const Result r = attn_cli({"run", "-m", "0", "--seq-q", "7", "--seq-k", "19", "--dim", "12",
                             "--batch", "2", "--layout", "bshd", "--scale", "0.2", "--verify"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("Sq=7 Sk=19 D=12") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
}

TEST_CASE("attn: bad command lines exit 2 with one line") {
  expect_one_line_error(attn_cli({"run"}), 2, "--module");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--impl", "bogus"}), 2, "--impl");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--iters", "0"}), 2, "--iters");
  expect_one_line_error(attn_cli({"run", "--module", "zero"}), 2, "--module");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--layout", "sbhd"}), 2, "--layout");
  expect_one_line_error(attn_cli({"frobnicate"}), 2, "unknown command 'frobnicate'");
  expect_one_line_error(attn_cli({}), 2, "subcommand");
}

TEST_CASE("attn: bad problems exit 1 with one line that says why") {
  expect_one_line_error(attn_cli({"run", "--module", "42"}), 1, "unknown module 42");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--seq", "0"}), 1, "seq_q must be >= 1");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--seq-k", "-3"}), 1, "seq_k must be >= 1");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--batch", "0"}), 1, "batch must be >= 1");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--dim", "300"}), 1, "head_dim 300");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--causal"}), 1, "causal");
  expect_one_line_error(attn_cli({"run", "--module", "0", "--scale", "-1"}), 1, "scale");
}

TEST_CASE("attn: GPU modules without a GPU say so in one line") {
  if (cuda_device_count() > 0) return;  // only meaningful on a machine without a GPU
  expect_one_line_error(attn_cli({"run", "--module", "1", "--verify"}), 1, "needs a GPU");
  expect_one_line_error(attn_cli({"bench", "--modules", "1"}), 1, "needs a GPU");
  expect_one_line_error(attn_cli({"info"}), 1, "CUDA");
}

TEST_CASE("attn run on .npy files: verify and write the output") {
  const std::string q = temp_path("q.npy"), k = temp_path("k.npy"), v = temp_path("v.npy"),
                    o = temp_path("o.npy");
  write_random_npy(q, {2, 3, 9, 8}, 1);
  write_random_npy(k, {2, 3, 13, 8}, 2);
  write_random_npy(v, {2, 3, 13, 8}, 3);
  const Result r = attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--out", o, "--verify"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("B=2 H=3 Sq=9 Sk=13 D=8") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  const NpyArray out = read_npy(o);
  CHECK(out.shape == std::vector<int64_t>{2, 3, 9, 8});

  SUBCASE("rank-2 inputs are one head") {
    write_random_npy(q, {5, 4}, 4);
    write_random_npy(k, {6, 4}, 5);
    write_random_npy(v, {6, 4}, 6);
    const Result r2 = attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--verify"});
    CHECK(r2.code == 0);
    CHECK(r2.out.find("B=1 H=1 Sq=5 Sk=6 D=4") != std::string::npos);
  }
  SUBCASE("mismatched shapes") {
    write_random_npy(k, {2, 3, 13, 16}, 2);
    write_random_npy(v, {2, 3, 13, 16}, 3);
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1,
                          "does not match Q's");
  }
  SUBCASE("V differs from K") {
    write_random_npy(v, {2, 3, 12, 8}, 2);
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1,
                          "differs from K's");
  }
  SUBCASE("flags that contradict the files") {
    expect_one_line_error(
        attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--dim", "64"}), 1, "disagrees");
  }
  SUBCASE("rank 5 and missing files") {
    write_random_npy(q, {1, 2, 3, 9, 8}, 1);
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1, "rank 5");
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", temp_path("nope.npy"), "--k", k,
                                    "--v", v}),
                          1, "cannot open");
  }
  SUBCASE("only some of --q/--k/--v") {
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q}), 1, "go together");
  }
  for (const std::string& path : {q, k, v, o}) std::remove(path.c_str());
}

TEST_CASE("attn --help and run --help exit 0") {
  CHECK(attn_cli({"--help"}).code == 0);
  const Result r = attn_cli({"run", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--seq-q") != std::string::npos);
}
