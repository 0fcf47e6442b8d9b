// Tests of the `attn` command line, in-process (CPU only): parsing, the checks on bad input
// (one line, non-zero exit, never a crash) and running module 00 from flags and from .npy files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/device.h"
#include "common/npy.h"
#include "common/paged.h"
#include "common/random.h"
#include "common/registry.h"
#include "tests/cli_checks.h"

using namespace attn;
using testing::CliResult;
using testing::attn_cli;
using testing::expect_one_line_error;

namespace {

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
  const CliResult r = attn_cli({"list"});
  CHECK(r.code == 0);
  CHECK(r.out.find("reference") != std::string::npos);
  CHECK(r.out.find("naive") != std::string::npos);
}

TEST_CASE("attn run module 00 (CPU) verifies and times") {
  const CliResult r = attn_cli({"run", "--module", "0", "--seq", "20", "--dim", "16", "--heads", "3",
                             "--seed", "3", "--verify", "--time", "--iters", "2"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(r.out.find("seed 3") != std::string::npos);
  CHECK(r.out.find("TFLOP/s") != std::string::npos);
  CHECK(r.out.find("B=1 H=3 Sq=20 Sk=20 D=16") != std::string::npos);
}

TEST_CASE("attn run: separate query and key lengths, BSHD, custom scale") {
  const CliResult r = attn_cli({"run", "-m", "0", "--seq-q", "7", "--seq-k", "19", "--dim", "12",
                             "--batch", "2", "--layout", "bshd", "--scale", "0.2", "--verify"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("Sq=7 Sk=19 D=12") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
}

TEST_CASE("attn run: Composable Kernel spellings (--seq_len, --head_dim, --verify=1, --time=1)") {
  const CliResult r = attn_cli({"run", "--module", "0", "--batch", "2", "--heads", "3", "--seq_len",
                             "20", "--head_dim", "16", "--verify=1", "--time=1", "--iters", "2"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("B=2 H=3 Sq=20 Sk=20 D=16") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(r.out.find("TFLOP/s") != std::string::npos);

  SUBCASE("=0 turns a flag off; true/false work too") {
    const CliResult off = attn_cli({"run", "-m", "0", "--seq_len", "9", "--head_dim", "8",
                                 "--verify=0", "--time=0"});
    INFO(off.out << off.err);
    CHECK(off.code == 0);
    CHECK(off.out.find("PASS") == std::string::npos);
    CHECK(off.out.find("TFLOP/s") == std::string::npos);
    CHECK(off.out.find("ran (add --verify") != std::string::npos);
    const CliResult words = attn_cli({"run", "-m", "0", "--seq", "9", "--dim", "8", "--verify=true",
                                   "--time=false"});
    CHECK(words.code == 0);
    CHECK(words.out.find("PASS") != std::string::npos);
    CHECK(words.out.find("TFLOP/s") == std::string::npos);
  }
  SUBCASE("the last of a repeated flag wins") {
    const CliResult last = attn_cli({"run", "-m", "0", "--seq", "9", "--dim", "8", "--verify",
                                  "--verify=0"});
    CHECK(last.code == 0);
    CHECK(last.out.find("PASS") == std::string::npos);
  }
  SUBCASE("--seq_len sets both lengths unless --seq-q / --seq-k are given") {
    const CliResult sk = attn_cli({"run", "-m", "0", "--seq_len", "20", "--seq-k", "7", "--dim",
                                "8", "--verify=1"});
    CHECK(sk.code == 0);
    CHECK(sk.out.find("Sq=20 Sk=7 D=8") != std::string::npos);
    const CliResult sq = attn_cli({"run", "-m", "0", "--seq-q", "5", "--seq_len", "11", "--dim",
                                "8", "--verify=1"});
    CHECK(sq.out.find("Sq=5 Sk=11 D=8") != std::string::npos);
  }
  SUBCASE("--kv_heads is --kv-heads") {
    // Module 00 reads one K/V head per query head: its refusal shows the flag was read.
    expect_one_line_error(attn_cli({"run", "-m", "0", "--heads", "4", "--kv_heads", "2"}), 1,
                          "kv_heads=2");
  }
}

TEST_CASE("attn run: bad flag values exit 2 with one line") {
  expect_one_line_error(attn_cli({"run", "-m", "0", "--verify=2"}), 2, "--verify");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--verify=yes"}), 2, "takes 0 or 1");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--time=-1"}), 2, "--time");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--time=fast"}), 2, "takes 0 or 1");
  // CK-style values need the '=': a separate "1" is a stray argument, not the flag's value.
  expect_one_line_error(attn_cli({"run", "-m", "0", "--verify", "1"}), 2, "not expected");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--kv-heads", "0"}), 2, "--kv-heads");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--kv_heads", "two"}), 2, "--kv-heads");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--seq_len", "x"}), 2, "--seq");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--head_dim"}), 2, "--dim");
  expect_one_line_error(attn_cli({"bench", "--kv-heads", "-1"}), 2, "--kv-heads");
}

TEST_CASE("attn run: grouped K/V heads that do not divide the heads, or a module without GQA") {
  expect_one_line_error(attn_cli({"run", "-m", "0", "--heads", "8", "--kv-heads", "3"}), 1,
                        "kv_heads must divide heads (got heads=8, kv_heads=3)");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--heads", "4", "--kv-heads", "8"}), 1,
                        "kv_heads must divide heads");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--heads", "4", "--kv-heads", "2"}), 1,
                        "module 00 reads one K/V head per query head");
  // --kv-heads equal to --heads is plain multi-head attention: every module runs it.
  const CliResult same = attn_cli({"run", "-m", "0", "--heads", "4", "--kv-heads", "4", "--seq",
                                "9", "--dim", "8", "--verify"});
  CHECK(same.code == 0);
  CHECK(same.out.find("B=1 H=4 Sq=9") != std::string::npos);
}

TEST_CASE("modules 00-04 refuse grouped K/V heads in one line; 05 and 06 accept them") {
  // 00-04 read K/V head h for query head h; 05 (its GEMMs take a head group) and 06 map
  // query head h to K/V head p.kv_head(h).
  Problem gqa = Problem::make(1, 8, 16, 16, 64, false, Layout::BHSD, 2);
  Problem mqa = Problem::make(1, 8, 16, 16, 64, true, Layout::BSHD, 1);
  Problem mha = Problem::make(1, 8, 16, 16, 64);
  int accepting = 0;
  for (const Kernel& k : registered_kernels()) {
    INFO(k.label());
    // Each module in its own element type (a 16-bit module refuses f32 problems).
    gqa.dtype = mqa.dtype = mha.dtype = k.native_dtype();
    if (k.inference) {  // module 10 runs decode and prefill problems, no dense one
      CHECK(k.supports(mha).message().find("--seqlens-k") != std::string::npos);
      continue;
    }
    CHECK(k.supports(mha).is_ok());
    if (k.module >= 5) {
      accepting += k.module == 5 || k.module == 6;
      CHECK(k.supports(gqa).is_ok());
      CHECK(k.supports(mqa).is_ok());
      continue;
    }
    char module[24];
    std::snprintf(module, sizeof module, "module %02d", k.module);
    for (const Problem& p : {gqa, mqa}) {
      const Status s = k.supports(p);
      CHECK_FALSE(s.is_ok());
      CHECK(s.message().find('\n') == std::string::npos);
      // Modules without the causal mask may refuse MQA's causal problem for that first.
      if (!p.causal) {
        CHECK(s.message().find(module) != std::string::npos);
        CHECK(s.message().find("grouped K/V heads (--kv-heads) come in module 06") !=
              std::string::npos);
      }
    }
  }
  CHECK(accepting == 4);  // 05 and 06, exercise and solution
}

// A registered 16-bit-only GPU module (as module 07 is), for the --dtype defaults and
// refusals; it is never run (no GPU here, and the refusals come first).
namespace {
Status fake16_supports(const Problem&) { return Status::ok(); }
Status fake16_forward(const Problem&, const void*, const void*, const void*, void*,
                      cudaStream_t) {
  return Status::error("fake16 ran");
}
const bool fake16_registered = register_kernel(Kernel{98, "fake16", "a 16-bit module for tests",
                                                      Backend::gpu, Impl::solution,
                                                      fake16_supports, nullptr, fake16_forward});
}  // namespace

TEST_CASE("attn run --dtype: spellings, the default per module, refusals in one line") {
  REQUIRE(fake16_registered);
  SUBCASE("f32 and its spellings run module 00; the output shows no dtype") {
    for (const char* dtype : {"f32", "fp32", "float32", "F32"}) {
      const CliResult r = attn_cli({"run", "-m", "0", "--seq", "9", "--dim", "8", "--dtype", dtype,
                                 "--verify"});
      INFO(dtype << ": " << r.out << r.err);
      CHECK(r.code == 0);
      CHECK(r.out.find("B=1 H=2 Sq=9 Sk=9 D=8 bhsd") != std::string::npos);
      CHECK(r.out.find("PASS") != std::string::npos);
    }
  }
  SUBCASE("a bad value is a command-line error: exit 2, one line") {
    expect_one_line_error(attn_cli({"run", "-m", "0", "--dtype", "fp64"}), 2, "--dtype");
    expect_one_line_error(attn_cli({"run", "-m", "0", "--dtype", "int8"}),
                          2, "takes f32, f16 or bf16, got 'int8'");
    expect_one_line_error(attn_cli({"run", "-m", "0", "--dtype"}), 2, "--dtype");
    expect_one_line_error(attn_cli({"bench", "--dtype", "half-ish"}), 2, "--dtype");
  }
  SUBCASE("an fp32 module asked for 16 bits says which module to use, exit 1") {
    expect_one_line_error(attn_cli({"run", "--module", "0", "--dtype", "bf16"}), 1,
                          "module 00 computes in f32; --dtype bf16 needs a 16-bit module (");
    expect_one_line_error(attn_cli({"run", "-m", "0", "--dtype", "half", "--verify"}), 1,
                          "module 00 computes in f32; --dtype f16 needs a 16-bit module (");
    const CliResult r = attn_cli({"run", "-m", "0", "--dtype", "bf16"});
    CHECK(r.err.find("98 fake16") != std::string::npos);  // names the registered 16-bit ones
    // The type is checked before the GPU: the same answer on a machine without one.
    expect_one_line_error(attn_cli({"run", "-m", "1", "--dtype", "bf16"}), 1,
                          "module 01 computes in f32");
  }
  SUBCASE("a 16-bit module asked for f32 refuses; by default it runs in bf16") {
    expect_one_line_error(attn_cli({"run", "-m", "98", "--dtype", "f32"}), 1,
                          "module 98 takes f16 or bf16 tensors (--dtype bf16 or f16), not f32");
    // No --dtype: bf16, accepted, so the run gets as far as the device (or, with a GPU, to
    // the fake kernel's own error): not a dtype refusal.
    const CliResult r = attn_cli({"run", "-m", "98", "--seq", "16", "--dim", "16"});
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("takes f16 or bf16") == std::string::npos);
    CHECK((r.err.find("needs a GPU") != std::string::npos ||
           r.err.find("fake16 ran") != std::string::npos));
  }
}

TEST_CASE("attn bench --dtype: modules that do not take it are skipped with a note") {
  REQUIRE(fake16_registered);
  // Decided before the benchmark looks for a GPU, so this runs anywhere.
  CliResult r = attn_cli({"bench", "--modules", "1,3", "--dtype", "bf16", "--out",
                       temp_path("never.json")});
  INFO(r.out << r.err);
  CHECK(r.out.find("note: skipped: module 01 computes in f32; --dtype bf16") != std::string::npos);
  CHECK(r.out.find("note: skipped: module 03 computes in f32; --dtype bf16") != std::string::npos);
  expect_one_line_error(r, 1, "none of the modules to benchmark takes --dtype bf16");
  r = attn_cli({"bench", "--modules", "98", "--dtype", "f32", "--out", temp_path("never.json")});
  CHECK(r.out.find("note: skipped: module 98 takes f16 or bf16 tensors") != std::string::npos);
  expect_one_line_error(r, 1, "none of the modules to benchmark takes --dtype f32");
  if (cuda_device_count() > 0) return;  // below: what a machine without a GPU says
  // A mixed list keeps the modules that take the type, then needs the GPU.
  r = attn_cli({"bench", "--modules", "3,98", "--dtype", "bf16", "--out", temp_path("never.json")});
  CHECK(r.out.find("note: skipped: module 03") != std::string::npos);
  CHECK(r.out.find("module 98") == std::string::npos);
  expect_one_line_error(r, 1, "needs a GPU");
  // Without --dtype every module takes its own type: nothing skipped.
  r = attn_cli({"bench", "--modules", "3,98", "--out", temp_path("never.json")});
  CHECK(r.out.find("note: skipped") == std::string::npos);
  expect_one_line_error(r, 1, "needs a GPU");
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
  expect_one_line_error(attn_cli({"info"}), 1, "GPU");
}

TEST_CASE("attn run on .npy files: verify and write the output") {
  const std::string q = temp_path("q.npy"), k = temp_path("k.npy"), v = temp_path("v.npy"),
                    o = temp_path("o.npy");
  write_random_npy(q, {2, 3, 9, 8}, 1);
  write_random_npy(k, {2, 3, 13, 8}, 2);
  write_random_npy(v, {2, 3, 13, 8}, 3);
  const CliResult r = attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--out", o, "--verify"});
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
    const CliResult r2 = attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--verify"});
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
  SUBCASE("--seq must agree with the files, as --seq-q and --seq-k must") {
    expect_one_line_error(
        attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--seq", "100"}), 1,
        "--seq 100 disagrees with the .npy files (seq_q 9, seq_k 13)");
    expect_one_line_error(
        attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--seq-q", "7"}), 1,
        "disagrees");
  }
  SUBCASE("non-finite inputs are refused before any kernel runs, naming the file") {
    for (const float bad : {std::nanf(""), INFINITY}) {
      std::vector<float> data(2 * 3 * 13 * 8, 0.5f);
      data[17] = bad;
      write_npy(v, {2, 3, 13, 8}, data);
      const CliResult r = attn_cli({"run", "-m", "0", "--impl", "solution", "--q", q, "--k", k,
                                 "--v", v, "--verify"});
      expect_one_line_error(r, 1, v + ": element 17 is");
      CHECK(r.err.find("finite") != std::string::npos);
      CHECK(r.out.find("hint") == std::string::npos);  // no blame on the kernel
    }
  }
  SUBCASE("rank 5 and missing files") {
    write_random_npy(q, {1, 2, 3, 9, 8}, 1);
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1, "rank 5");
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", temp_path("nope.npy"), "--k", k,
                                    "--v", v}),
                          1, "cannot open");
  }
  SUBCASE("grouped K/V heads: K/V [B, KVH, Sk, D] with KVH dividing Q's heads") {
    write_random_npy(k, {2, 1, 13, 8}, 2);
    write_random_npy(v, {2, 1, 13, 8}, 3);
    // Module 00 refuses grouped heads; its message shows the shape was read as KVH = 1.
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1,
                          "(got heads=3, kv_heads=1)");
    expect_one_line_error(
        attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v, "--kv-heads", "3"}), 1,
        "--kv-heads 3 disagrees with the .npy files (1)");
    write_random_npy(k, {2, 2, 13, 8}, 2);  // 2 does not divide 3
    write_random_npy(v, {2, 2, 13, 8}, 3);
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q, "--k", k, "--v", v}), 1,
                          "K/V heads must equal or divide Q's heads");
  }
  SUBCASE("only some of --q/--k/--v") {
    expect_one_line_error(attn_cli({"run", "-m", "0", "--q", q}), 1, "go together");
  }
  for (const std::string& path : {q, k, v, o}) std::remove(path.c_str());
}

TEST_CASE("attn --help and run --help exit 0") {
  CHECK(attn_cli({"--help"}).code == 0);
  const CliResult r = attn_cli({"run", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--seq-q") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Messages that tell the truth (each case failed before its fix).

namespace {

// A kernel that writes zeros: a wrong answer from a kernel that did almost no work, as an
// untouched starter gives. Registered as module 90 (CPU), in this test program only.
Status zeros_forward(const Problem& p, const float*, const float*, const float*, float* o,
                     cudaStream_t) {
  std::fill(o, o + p.o_elements(), 0.0f);
  return Status::ok();
}
Status any_shape(const Problem&) { return Status::ok(); }
const bool zeros_registered = register_kernel(Kernel{90, "zeros", "writes zeros (test only)",
                                                     Backend::cpu, Impl::solution, any_shape,
                                                     zeros_forward, nullptr});

}  // namespace

TEST_CASE("attn run: a wrong output is not timed (no record speed for a kernel that skips work)") {
  REQUIRE(zeros_registered);
  const CliResult r = attn_cli({"run", "-m", "90", "--seq", "33", "--dim", "8", "--verify", "--time",
                             "--iters", "2"});
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.out.find("FAIL") != std::string::npos);
  CHECK(r.out.find("TFLOP/s") == std::string::npos);
  CHECK(r.out.find("GB/s") == std::string::npos);
  CHECK(r.out.find("not measured, the output is wrong") != std::string::npos);
  // A correct kernel still gets its throughput.
  const CliResult ok = attn_cli({"run", "-m", "0", "--seq", "33", "--dim", "8", "--verify", "--time",
                              "--iters", "2", "--impl", "solution"});
  CHECK(ok.out.find("TFLOP/s") != std::string::npos);
}

TEST_CASE("attn run: --iters and --warmup out of range name a readable range") {
  for (const auto& [flag, value, range] :
       {std::tuple{"--iters", "0", ">= 1"}, std::tuple{"--warmup", "-5", ">= 0"},
        std::tuple{"--iters", "99999999999", ">= 1"}}) {
    const CliResult r = attn_cli({"run", "-m", "0", flag, value});
    expect_one_line_error(r, 2, flag);
    CHECK(r.err.find(range) != std::string::npos);
    CHECK(r.err.find("1797693") == std::string::npos);    // DBL_MAX spelled out
    CHECK(r.err.find("2147483647") == std::string::npos);  // INT_MAX spelled out
  }
  expect_one_line_error(attn_cli({"bench", "--iters", "0"}), 2, ">= 1");
}

TEST_CASE("attn run: sizes whose product overflows get one sentence naming the limit") {
  const CliResult r = attn_cli({"run", "-m", "0", "--batch", "2147483647", "--heads", "2147483647"});
  expect_one_line_error(r, 1, "2^31-1");
  CHECK(r.err.find("vector") == std::string::npos);
  CHECK(r.err.find("bad_alloc") == std::string::npos);
  // Rows that fit the index but not the host: the host limit is named before allocating.
  const CliResult big = attn_cli({"run", "-m", "0", "--seq", "200000000", "--dim", "256",
                               "--verify"});
  expect_one_line_error(big, 1, "of host memory");
  CHECK(big.err.find("available") != std::string::npos);
}

TEST_CASE("attn list: columns line up whatever the module names") {
  const CliResult r = attn_cli({"list"});
  std::istringstream lines(r.out);
  std::string header, line;
  std::getline(lines, header);
  const size_t runs_on = header.find("runs on"), teaches = header.find("what it teaches");
  REQUIRE(runs_on != std::string::npos);
  int rows = 0;
  while (std::getline(lines, line)) {
    INFO(r.out);
    REQUIRE(line.size() > teaches);
    const std::string where = line.substr(runs_on, 3);
    CHECK((where == "GPU" || where == "CPU"));
    CHECK(line[teaches - 1] == ' ');
    CHECK(line[teaches] != ' ');
    ++rows;
  }
  CHECK(rows >= 8);
}

TEST_CASE("no GPU: the reason names a missing driver, not a driver version") {
  if (cuda_device_count() > 0) return;  // the message is about machines without a GPU
  const std::string reason = no_device_reason();
  INFO(reason);
  CHECK(reason.find("insufficient") == std::string::npos);
  if (!nvidia_driver_present()) CHECK(reason.find("no NVIDIA GPU or driver found") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Inference modules (module 10): decode over a paged KV cache and packed prefill. A fake
// inference module (97) stands in for module 10, registered the way module 10 registers; its
// entry points never run here: every case below fails before the GPU, or needs a GPU and says
// so in one line (with a GPU, the fake's own error).

namespace {

Status fake_paged_supports(const PagedProblem& p) {
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("fake decoding supports head_dim 64 or 128 (got " +
                         std::to_string(p.head_dim) + ")");
  return Status::ok();
}
Status fake_varlen_supports(const VarlenProblem&) { return Status::ok(); }
Status fake_decode(const PagedProblem&, const PagedDevicePtrs&, cudaStream_t) {
  return Status::error("fake decode ran");
}
Status fake_prefill(const VarlenProblem&, const void*, const void*, const void*, const int32_t*,
                    const int32_t*, void*, cudaStream_t) {
  return Status::error("fake prefill ran");
}
const InferenceEntry kFakeInferenceEntry{fake_paged_supports, fake_varlen_supports, nullptr,
                                         fake_decode,         fake_prefill,         nullptr};

}  // namespace

ATTN_REGISTER_MODULE_INFERENCE(97, "fake_inference", "an inference module for tests",
                               refuse_dense_problem, kFakeInferenceEntry)

namespace {

// A run that passed every check before the GPU: without one it says so, with one the fake
// entry point answers.
void expect_reached_the_gpu(const CliResult& r, const char* entry_error) {
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  if (cuda_device_count() == 0)
    CHECK(r.err.find("needs a GPU") != std::string::npos);
  else
    CHECK(r.err.find(entry_error) != std::string::npos);
}

std::vector<std::string> run10(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"run", "-m", "97"});
  return flags;
}

}  // namespace

TEST_CASE("inference module: registered by the macro, 16-bit, refuses dense problems") {
  const Kernel* k = find_kernel(97, Impl::solution);
  REQUIRE(k != nullptr);
  CHECK(k->inference == &kFakeInferenceEntry);
  CHECK(k->backend == Backend::gpu);
  CHECK(k->native_dtype() == DType::bf16);
  CHECK(k->accepts(DType::f16));
  CHECK_FALSE(k->accepts(DType::f32));
  Problem dense = Problem::make(1, 8, 64, 64, 64);
  dense.dtype = DType::bf16;
  const Status s = k->supports(dense);
  CHECK(s.message().find("--seqlens-k 1,17,4096") != std::string::npos);
  CHECK(s.message().find("--varlen") != std::string::npos);
  const CliResult list = attn_cli({"list"});
  CHECK(list.out.find("fake_inference") != std::string::npos);
}

TEST_CASE("attn run on an inference module: valid decode and prefill reach the GPU") {
  expect_reached_the_gpu(attn_cli(run10({"--seqlens-k", "1,17,4096", "--verify"})),
                         "fake decode ran");
  expect_reached_the_gpu(attn_cli(run10({"--random-seqlens", "100", "--batch", "3", "--heads",
                                         "8", "--kv-heads", "2", "--dim", "64", "--seq-q", "4",
                                         "--causal", "--page-size", "1", "--shuffle-pages",
                                         "--dtype", "f16", "--seed", "5", "--time"})),
                         "fake decode ran");
  expect_reached_the_gpu(attn_cli(run10({})), "fake decode ran");  // the default shape
  expect_reached_the_gpu(attn_cli(run10({"--seqlens-k", "0,0"})), "fake decode ran");
  expect_reached_the_gpu(attn_cli(run10({"--varlen", "--seqlens-q", "3,0,5", "--seqlens-k",
                                         "3,4,40", "--causal", "--verify"})),
                         "fake prefill ran");
  expect_reached_the_gpu(attn_cli(run10({"--varlen", "--random-seqlens", "30"})),
                         "fake prefill ran");
}

TEST_CASE("attn run on an inference module: bad lengths and shapes, one line before the GPU") {
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "1,x"})), 1,
                        "attn: --seqlens-k: 'x' in '1,x' is not a sequence length");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "5,-2"})), 1,
                        "sequence 1 has a negative length (-2)");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", ""})), 1, "no sequence lengths given");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "5", "--page-size", "48"})), 1,
                        "page size 48 is not supported: use a power of two from 1 to 1024");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "1,2", "--batch", "3"})), 1,
                        "--batch 3 disagrees with --seqlens-k (2 lengths)");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "1,2", "--random-seqlens", "5"})), 1,
                        "--seqlens-k and --random-seqlens both give the lengths");
  expect_one_line_error(attn_cli(run10({"--random-seqlens", "5", "--batch", "0"})), 1,
                        "batch must be >= 1 (got 0)");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "4", "--heads", "8", "--kv-heads", "3"})),
                        1, "kv_heads must divide heads (got heads=8, kv_heads=3)");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "4", "--dim", "80"})), 1,
                        "fake decoding supports head_dim 64 or 128 (got 80)");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "4", "--dim", "300"})), 1,
                        "head_dim 300 is out of range");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "4", "--seq-q", "0"})), 1,
                        "seq_q (new query tokens per sequence) must be >= 1");
  expect_one_line_error(attn_cli(run10({"--seqlens-k", "4", "--dtype", "f32"})), 1,
                        "module 97 takes f16 or bf16 tensors");
  expect_one_line_error(attn_cli(run10({"--random-seqlens", "-1"})), 2, "--random-seqlens");
  expect_one_line_error(attn_cli(run10({"--page-size", "big"})), 2, "--page-size");
  expect_one_line_error(attn_cli(run10({"--varlen", "--seqlens-q", "1,2", "--seqlens-k", "3"})), 1,
                        "--seqlens-q gives 2 lengths and the keys 1");
  expect_one_line_error(attn_cli(run10({"--varlen", "--seqlens-q", "0,0", "--seqlens-k", "3,4"})),
                        1, "every sequence has 0 queries");
  expect_one_line_error(attn_cli(run10({"--varlen", "--seqlens-k", "3,-4"})), 1,
                        "sequence 1 has a negative length (-4)");
}

TEST_CASE("attn run: dense flags with an inference module and its flags with a dense one") {
  expect_one_line_error(attn_cli(run10({"--layout", "bshd"})), 1,
                        "--layout is for dense modules; module 97 has fixed layouts");
  expect_one_line_error(attn_cli(run10({"--seq-k", "5"})), 1,
                        "--seq-k is for dense modules; module 97 takes one key length per "
                        "sequence: --seqlens-k");
  expect_one_line_error(attn_cli(run10({"--seq_len", "5"})), 1, "--seq is for dense modules");
  expect_one_line_error(attn_cli(run10({"--k", "k.npy"})), 1,
                        "--k is a packed prefill input (with --varlen); decode reads --q, "
                        "--k-cache, --v-cache and --block-table");
  expect_one_line_error(attn_cli(run10({"--seqlens-q", "1,2"})), 1,
                        "--seqlens-q goes with --varlen");
  expect_one_line_error(attn_cli(run10({"--varlen", "--seq-q", "2"})), 1,
                        "with --varlen each sequence has its own query length: --seqlens-q");
  for (const char* flag : {"--page-size", "--k-cache", "--block-table"})
    expect_one_line_error(attn_cli(run10({"--varlen", flag, "16"})), 1,
                          std::string(flag) + " is for paged decode; --varlen prefill reads "
                                              "packed --q, --k and --v");
  expect_one_line_error(attn_cli(run10({"--varlen", "--shuffle-pages"})), 1,
                        "--shuffle-pages is for paged decode");

  expect_one_line_error(attn_cli({"run", "-m", "0", "--seqlens-k", "1,2"}), 1,
                        "--seqlens-k is for inference modules (module 10: decode over a paged KV "
                        "cache, --varlen prefill); module 00 runs dense problems");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--varlen"}), 1,
                        "--varlen is for inference modules");
  expect_one_line_error(attn_cli({"run", "-m", "98", "--page-size", "16"}), 1,
                        "--page-size is for inference modules");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--random-seqlens", "9"}), 1,
                        "--random-seqlens is for inference modules");
}

TEST_CASE("attn run on an inference module: decode from .npy files, every mismatch one line") {
  const std::string q = temp_path("dq.npy"), k = temp_path("dk.npy"), v = temp_path("dv.npy"),
                    t = temp_path("dt.npy"), lens = temp_path("dlens.npy");
  // 2 sequences, 1 new token, 4 heads over 2 K/V heads, dim 64; a pool of 4 pages of 16.
  write_random_npy(q, {2, 1, 4, 64}, 1);
  write_random_npy(k, {4, 16, 2, 64}, 2);
  write_random_npy(v, {4, 16, 2, 64}, 3);
  write_npy_int32(t, {2, 2}, {3, 0, 1, -1});
  const auto files = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"run", "-m", "97", "--q", q, "--k-cache", k, "--v-cache", v,
                                     "--block-table", t};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_reached_the_gpu(attn_cli(files({"--seqlens-k", "20,16", "--verify"})), "fake decode ran");
  write_npy_int32(lens, {2}, {20, 16});
  expect_reached_the_gpu(attn_cli(files({"--seqlens-k", lens})), "fake decode ran");

  expect_one_line_error(attn_cli(files({})), 1, "do not say how long each sequence is");
  expect_one_line_error(attn_cli(files({"--seqlens-k", "1,2,3"})), 1,
                        "--seqlens-k gives 3 lengths for the 2 sequences of " + q);
  expect_one_line_error(attn_cli(files({"--seqlens-k", "20,40"})), 1,
                        "sequence 1 has 40 keys, more than its table row of 2 pages x 16 tokens");
  expect_one_line_error(attn_cli(files({"--seqlens-k", "20,17"})), 1,
                        t + ": block_table[1][1] = -1 is not a page");
  expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16", "--heads", "8"})), 1,
                        "--heads 8 disagrees with the .npy files (4)");
  expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16", "--page-size", "32"})), 1,
                        "--page-size 32 disagrees with the .npy files (16)");
  expect_one_line_error(attn_cli({"run", "-m", "97", "--q", q, "--k-cache", k}), 1,
                        "--q, --k-cache, --v-cache and --block-table go together");

  SUBCASE("table entries past the pool") {
    write_npy_int32(t, {2, 2}, {3, 0, 9, -1});
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "block_table[1][0] = 9 points past the cache (4 pages)");
  }
  SUBCASE("a float table, a rank-1 table, lengths of rank 2") {
    write_random_npy(t, {2, 2}, 4);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "expected an integer array (int32 '<i4' or int64 '<i8')");
    write_npy_int32(t, {4}, {3, 0, 1, 2});
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "expected [batch, pages_per_seq] (rank 2)");
    write_npy_int32(t, {2, 2}, {3, 0, 1, -1});
    write_npy_int32(lens, {1, 2}, {20, 16});
    expect_one_line_error(attn_cli(files({"--seqlens-k", lens})), 1,
                          "expected a list of lengths (rank 1)");
  }
  SUBCASE("shapes that disagree") {
    write_random_npy(q, {2, 4, 64}, 1);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "expected [batch, seq_q, heads, dim] (rank 4)");
    write_random_npy(q, {2, 1, 4, 128}, 1);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "head dim 64 differs from Q's 128");
    write_random_npy(q, {3, 1, 4, 64}, 1);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16,1"})), 1,
                          t + ": 2 rows for the 3 sequences of " + q);
    write_random_npy(q, {2, 1, 4, 64}, 1);
    write_random_npy(v, {4, 16, 1, 64}, 3);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          "differs from the K cache's (4, 16, 2, 64)");
    write_random_npy(k, {4, 48, 1, 64}, 2);
    write_random_npy(v, {4, 48, 1, 64}, 3);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1, "page size 48");
  }
  SUBCASE("a NaN in the cache") {
    std::vector<float> data(4 * 16 * 2 * 64, 0.25f);
    data[77] = std::nanf("");
    write_npy(k, {4, 16, 2, 64}, data);
    expect_one_line_error(attn_cli(files({"--seqlens-k", "20,16"})), 1,
                          k + ": element 77 is NaN");
  }
  for (const std::string& path : {q, k, v, t, lens}) std::remove(path.c_str());
}

TEST_CASE("attn run --varlen from packed .npy files") {
  const std::string q = temp_path("pq.npy"), k = temp_path("pk.npy"), v = temp_path("pv.npy");
  write_random_npy(q, {8, 4, 64}, 1);  // queries 3 + 5
  write_random_npy(k, {10, 2, 64}, 2);  // keys 4 + 6
  write_random_npy(v, {10, 2, 64}, 3);
  const auto files = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"run", "-m", "97", "--varlen", "--q", q, "--k", k, "--v", v};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_reached_the_gpu(attn_cli(files({"--seqlens-q", "3,5", "--seqlens-k", "4,6"})),
                         "fake prefill ran");
  expect_one_line_error(attn_cli(files({"--seqlens-q", "3,6", "--seqlens-k", "4,6"})), 1,
                        q + " holds 8 query rows but --seqlens-q sums to 9");
  expect_one_line_error(attn_cli(files({"--seqlens-k", "4,6"})), 1,
                        q + " holds 8 query rows but --seqlens-k sums to 10");
  expect_one_line_error(attn_cli(files({"--seqlens-q", "3,5", "--seqlens-k", "4,5"})), 1,
                        k + " holds 10 key rows but the key lengths sum to 9");
  expect_one_line_error(attn_cli(files({"--seqlens-q", "3,5", "--seqlens-k", "4,6", "--dim",
                                        "128"})),
                        1, "--dim 128 disagrees with the .npy files (64)");
  expect_one_line_error(attn_cli({"run", "-m", "97", "--varlen", "--q", q}), 1,
                        "--q, --k and --v go together");
  write_random_npy(q, {1, 8, 4, 64}, 1);
  expect_one_line_error(attn_cli(files({"--seqlens-k", "4,6"})), 1,
                        "expected [total_q, heads, dim] (rank 3)");
  for (const std::string& path : {q, k, v}) std::remove(path.c_str());
}

TEST_CASE("attn bench on an inference module: decode flags checked before the GPU") {
  const std::string json = temp_path("never_decode.json");
  expect_one_line_error(attn_cli({"bench", "--modules", "97", "--seqlens-k", "1,x", "--out", json}),
                        1, "--seqlens-k: 'x' in '1,x' is not a sequence length");
  expect_one_line_error(attn_cli({"bench", "--modules", "97", "--page-size", "48", "--out", json}),
                        1, "page size 48 is not supported");
  expect_one_line_error(attn_cli({"bench", "--modules", "97", "--kv-heads", "3", "--out", json}),
                        1, "kv_heads must divide heads");
  expect_one_line_error(attn_cli({"bench", "--modules", "97", "--batch", "4", "--out", json}), 1,
                        "--batch in a benchmark is the number of --random-seqlens lengths");
  expect_one_line_error(attn_cli({"bench", "--modules", "97", "--preset", "huge", "--out", json}),
                        1, "unknown bench preset 'huge'");
  expect_one_line_error(attn_cli({"bench", "--modules", "3", "--seqlens-k", "5", "--out", json}), 1,
                        "--seqlens-k sets the decode shapes of an inference module (module 10); "
                        "none of the modules benchmarked here is one");
  expect_one_line_error(attn_cli({"bench", "--modules", "3", "--shuffle-pages", "--out", json}), 1,
                        "--shuffle-pages sets the decode shapes");
  const CliResult f32 = attn_cli({"bench", "--modules", "97", "--dtype", "f32", "--out", json});
  CHECK(f32.out.find("note: skipped: module 97 takes f16 or bf16 tensors") != std::string::npos);
  expect_one_line_error(f32, 1, "none of the modules to benchmark takes --dtype f32");
  if (cuda_device_count() > 0) return;  // below: what a machine without a GPU says
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--seqlens-k", "1,17,4096", "--page-size", "64"},
        std::vector<std::string>{"--random-seqlens", "1000", "--batch", "16", "--shuffle-pages"},
        std::vector<std::string>{"--modules", "3,97", "--seqlens-k", "5"}}) {
    std::vector<std::string> args = {"bench", "--modules", "97", "--out", json};
    args.insert(args.end(), flags.begin(), flags.end());
    expect_one_line_error(attn_cli(args), 1, "the benchmark needs a GPU");
  }
}

TEST_CASE("attn run / bench: module 12's flags, checked before any device work") {
  // On a module without the modifier entry point: one line that names module 12.
  expect_one_line_error(attn_cli({"run", "-m", "7", "--alibi"}), 1,
                        "--alibi needs module 12 (modifiers); module 07 runs plain attention");
  expect_one_line_error(attn_cli({"run", "-m", "0", "--causal", "--window", "8"}), 1,
                        "--window needs module 12 (modifiers); module 00 runs plain attention");
  expect_one_line_error(attn_cli({"run", "-m", "10", "--seqlens-k", "5", "--rope", "half"}), 1,
                        "--rope needs module 12 (modifiers); module 10 runs decode and prefill "
                        "without them");
  // Module 12's own rules, before it looks for a GPU.
  expect_one_line_error(attn_cli({"run", "-m", "12", "--window", "64"}), 1,
                        "--window needs --causal: the window is the last 64 keys up to the "
                        "query's position");
  expect_one_line_error(attn_cli({"run", "-m", "12", "--rope", "half", "--dim", "40"}), 1,
                        "--rope half needs head_dim % 16 == 0");
  expect_one_line_error(attn_cli({"run", "-m", "12", "--alibi", "--relative"}), 1,
                        "--alibi and --relative are both score modifiers: module 12 applies one "
                        "at a time");
  expect_one_line_error(attn_cli({"run", "-m", "12", "--alibi", "--dtype", "f32"}), 1,
                        "module 12 takes f16 or bf16");
  expect_one_line_error(attn_cli({"bench", "--modules", "7", "--alibi"}), 1,
                        "--alibi needs module 12 (modifiers); none of the modules benchmarked "
                        "here has them");
  const CliResult r = attn_cli({"bench", "--modules", "7,12", "--window", "1024"});
  expect_one_line_error(r, 1, "--window needs --causal");
  CHECK(r.out.empty());  // the error comes before any note
}
