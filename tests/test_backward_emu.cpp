// The backward runner (common/backward_runner.h) and `attn run --backward`, end to end on the
// CPU emulation of the CUDA runtime (no GPU): the uploads of Q, K, V and dO in each element
// type, the poisoned outputs and their guards, the comparisons, the hints and every flag's
// checks. Module 11's kernels are GPU only, so a stand-in written in host code plays its entry
// points as module 11 (this program links no real module): it reads back what the harness gave
// it and computes its answer from that alone (the plumbing must make it pass), and planted bugs
// that the checks must catch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/backward_runner.h"
#include "common/cli.h"
#include "common/half.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/registry.h"
#include "tests/cli_checks.h"
#include "tests/emulated_device_io.h"

using namespace attn;
using testing::CliResult;
using testing::attn_cli;
using testing::download;
using testing::expect_one_line_error;
using testing::upload_output;

namespace {

enum class Bug { none, dk_rows_unwritten, masked_rows_nan, no_delta, past_end_of_dv };
Bug planted = Bug::none;
std::vector<float> last_dq, last_dk;  // what the stand-in's backward wrote, as p.dtype values

// A device tensor of p.dtype elements, as floats.
std::vector<float> read(const Problem& p, const void* device, int64_t count) {
  if (p.dtype == DType::f32) return download<float>(device, count);
  return from_bits16(download<uint16_t>(device, count), p.dtype);
}

// Writes `values` in p.dtype; returns them as the kernel stored them (rounded to p.dtype).
std::vector<float> write(const Problem& p, const std::vector<double>& values, void* device) {
  std::vector<float> stored(values.begin(), values.end());
  if (p.dtype == DType::f32)
    cudaMemcpy(device, stored.data(), stored.size() * sizeof(float), cudaMemcpyHostToDevice);
  else
    upload_output(values, p.dtype, device);
  round_to_dtype(stored, p.dtype);
  return stored;
}

Status stand_in_forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
                        float* lse, cudaStream_t) {
  const std::vector<float> dout(size_t(p.o_elements()), 0.0f);
  const BackwardReference r =
      reference_backward(p, read(p, q, p.q_elements()), read(p, k, p.kv_elements()),
                         read(p, v, p.kv_elements()), dout);
  write(p, r.o, o);
  const std::vector<float> lse32(r.lse.begin(), r.lse.end());
  cudaMemcpy(lse, lse32.data(), lse32.size() * sizeof(float), cudaMemcpyHostToDevice);
  return Status::ok();
}

Status stand_in_backward(const Problem& p, const void* q, const void* k, const void* v,
                         const void* o, const void* dout, const float* lse, void* dq, void* dk,
                         void* dv, cudaStream_t) {
  // The backward reads what the forward left: nothing of it may still be the poison.
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  const std::vector<float> o_in = read(p, o, p.o_elements());
  const std::vector<float> lse_in = download<float>(lse, rows);
  if (std::any_of(o_in.begin(), o_in.end(), is_poison) ||
      std::any_of(lse_in.begin(), lse_in.end(), is_poison))
    return Status::error("the backward got an O or lse the forward did not write");
  const BackwardReference r = reference_backward(
      p, read(p, q, p.q_elements()), read(p, k, p.kv_elements()), read(p, v, p.kv_elements()),
      read(p, dout, p.o_elements()),
      planted == Bug::no_delta ? BackwardBug::no_delta : BackwardBug::none);
  std::vector<double> dq_values = r.grad.dq;
  if (planted == Bug::masked_rows_nan)
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < p.seq_q; ++i)
          if (p.first_masked_key(i) == 0)
            std::fill_n(dq_values.begin() + Problem::offset(p.q, b, h, i), p.head_dim, NAN);
  last_dq = write(p, dq_values, dq);
  last_dk = write(p, r.grad.dk, dk);
  write(p, r.grad.dv, dv);
  const int bytes = dtype_bytes(p.dtype);
  if (planted == Bug::dk_rows_unwritten)  // the last two keys of every K/V head
    for (int b = 0; b < p.batch; ++b)
      for (int g = 0; g < p.kv_heads; ++g)
        for (int j = p.seq_k - 2; j < p.seq_k; ++j)
          cudaMemset(static_cast<char*>(dk) + Problem::offset(p.k, b, g, j) * bytes, 0xFF,
                     size_t(p.head_dim) * bytes);
  if (planted == Bug::past_end_of_dv)
    cudaMemset(static_cast<char*>(dv) + (p.kv_elements() + 2) * bytes, 0, size_t(bytes));
  return Status::ok();
}

Status stand_in_supports(const Problem& p) {
  if (p.head_dim > 128) return Status::error("the stand-in supports head_dim <= 128");
  return Status::ok();
}

// The forward alone, for `attn run -m 11` without --backward.
Status plain_forward16(const Problem& p, const void* q, const void* k, const void* v, void* o,
                       cudaStream_t) {
  upload_output(reference_attention(p, read(p, q, p.q_elements()), read(p, k, p.kv_elements()),
                                    read(p, v, p.kv_elements())),
                p.dtype, o);
  return Status::ok();
}
Status plain_forward32(const Problem& p, const float* q, const float* k, const float* v,
                       float* o, cudaStream_t) {
  write(p, reference_attention(p, read(p, q, p.q_elements()), read(p, k, p.kv_elements()),
                               read(p, v, p.kv_elements())),
        o);
  return Status::ok();
}

const BackwardEntry kStandIn{stand_in_forward, stand_in_backward};
const bool registered_backward = register_kernel(
    Kernel{11, "backward", "CPU stand-in (test only)", Backend::gpu, Impl::solution,
           stand_in_supports, plain_forward32, plain_forward16, nullptr, nullptr, &kStandIn});
const bool registered_plain =
    register_kernel(Kernel{94, "stand_in_plain", "CPU stand-in (test only)", Backend::gpu,
                           Impl::solution, stand_in_supports, nullptr, plain_forward16});

const Kernel& stand_in() {
  REQUIRE(registered_backward);
  return *find_kernel(11, Impl::solution);
}

const Kernel& plain_stand_in() {
  REQUIRE(registered_plain);
  return *find_kernel(94, Impl::solution);
}

bool has(const std::vector<std::string>& hints, const std::string& text) {
  return std::any_of(hints.begin(), hints.end(),
                     [&](const std::string& h) { return h.find(text) != std::string::npos; });
}

}  // namespace

// ---- The runner --------------------------------------------------------------------------------

TEST_CASE("check_backward: the stand-in passes in f32, f16 and bf16, BHSD and BSHD, GQA, "
          "rows that see no key") {
  planted = Bug::none;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const Layout layout : {Layout::BHSD, Layout::BSHD})
      for (const bool causal : {false, true}) {
        Problem p = Problem::make(2, 4, 13, 9, 16, causal, layout, 2);  // causal: 4 rows see none
        p.dtype = dtype;
        INFO(p.describe() << " " << layout_name(layout));
        const BackwardInputs in = random_backward_inputs(p, 5, 1.5f);
        const BackwardCheck r = check_backward(stand_in(), p, in);
        INFO(r.status.message());
        REQUIRE(r.status.is_ok());
        CHECK(r.passed());
        CHECK(r.lse_bad == 0);
        CHECK(r.lse_first_bad == -1);
        CHECK(r.guard_writes == 0);
        // Only the rounding of the stored outputs to p.dtype is left.
        const double rounding = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;
        for (const Comparison* c : {&r.o, &r.dq, &r.dk, &r.dv}) CHECK(c->rel_l2_error < rounding);
        CHECK(r.out_o.size() == size_t(p.o_elements()));
        CHECK(r.out_lse.size() == size_t(2 * 4 * 13));
        CHECK(r.out_dq.size() == size_t(p.q_elements()));
        CHECK(r.out_dk.size() == size_t(p.kv_elements()));
        CHECK(r.out_dv.size() == size_t(p.kv_elements()));
        CHECK(std::equal(r.out_dq.begin(), r.out_dq.end(), last_dq.begin(), last_dq.end()));
        CHECK(diagnose_backward(p, in, r).empty());
      }
}

TEST_CASE("check_backward: padded rows, K and V with strides of their own") {
  planted = Bug::none;
  Problem p = Problem::make(2, 4, 7, 10, 8, true, Layout::BHSD, 2);
  p.q = p.o = {4 * 7 * 11, 7 * 11, 11};
  p.k = {2 * 10 * 9 + 3, 10 * 9, 9};
  p.v = {2 * 10 * 12, 10 * 12, 12};
  p.dtype = DType::f16;
  REQUIRE(validate(p).is_ok());
  const BackwardInputs in = random_backward_inputs(p, 12);
  const BackwardCheck r = check_backward(stand_in(), p, in);
  INFO(r.status.message());
  CHECK(r.passed());
  CHECK(r.dv.rel_l2_error < 1e-3);
}

TEST_CASE("BackwardDeviceTensors: every output and its guard poisoned, of the right size") {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    Problem p = Problem::make(1, 4, 6, 10, 8, false, Layout::BHSD, 1);
    p.dtype = dtype;
    BackwardDeviceTensors t(p, random_backward_inputs(p, 2), 7);
    t.poison_outputs();
    const std::vector<std::vector<float>> outputs = {t.o(), t.lse(), t.dq(), t.dk(), t.dv()};
    const int64_t sizes[] = {p.o_elements(), 4 * 6, p.q_elements(), p.kv_elements(),
                             p.kv_elements()};
    for (size_t n = 0; n < outputs.size(); ++n) {
      INFO(dtype_name(dtype) << " output " << n);
      CHECK(int64_t(outputs[n].size()) == sizes[n] + 7);
      CHECK(std::all_of(outputs[n].begin(), outputs[n].end(), is_poison));
    }
    // The entry points write them; the guards stay poisoned.
    REQUIRE(t.forward(stand_in(), nullptr).is_ok());
    REQUIRE(t.backward(stand_in(), nullptr).is_ok());
    const std::vector<float> dk = t.dk();
    CHECK(std::none_of(dk.begin(), dk.begin() + p.kv_elements(), is_poison));
    CHECK(std::all_of(dk.begin() + p.kv_elements(), dk.end(), is_poison));
    const std::vector<float> lse = t.lse();
    CHECK(std::none_of(lse.begin(), lse.begin() + 4 * 6, is_poison));
    // A module without the backward entry points is refused, not called.
    CHECK(t.forward(plain_stand_in(), nullptr).message() ==
          "module 94 has no backward pass; dQ, dK and dV come from the backward module "
          "(module 11)");
  }
}

TEST_CASE("check_backward catches unwritten dK rows, NaN in rows with no key, a missing D "
          "term, writes past the end of dV; each with its hint") {
  Problem p = Problem::make(1, 4, 12, 8, 16, true, Layout::BHSD, 2);  // 4 rows see no key
  p.dtype = DType::f16;
  const BackwardInputs in = random_backward_inputs(p, 8, 1.5f);

  planted = Bug::dk_rows_unwritten;
  BackwardCheck r = check_backward(stand_in(), p, in);
  CHECK_FALSE(r.passed());
  CHECK(r.dk.unwritten == 2 * 2 * 16);
  CHECK(r.dv.passed());
  std::vector<std::string> hints = diagnose_backward(p, in, r);
  CHECK(has(hints, "dK: 64 elements were never written (keys 6 to 7 hold wrong values)"));

  planted = Bug::masked_rows_nan;
  r = check_backward(stand_in(), p, in);
  CHECK_FALSE(r.passed());
  CHECK(r.dq.nan_count == 4 * 4 * 16);
  hints = diagnose_backward(p, in, r);
  CHECK(has(hints, "16 rows that see no key have NaN (or unwritten) O, dQ or lse, first query 0 "
                   "of (b=0, h=0): a row that sees no key has lse = +inf: exp(S - lse) must "
                   "give 0, not NaN"));

  planted = Bug::no_delta;
  r = check_backward(stand_in(), p, in);
  CHECK_FALSE(r.dq.passed());
  CHECK_FALSE(r.dk.passed());
  CHECK(r.dv.passed());
  hints = diagnose_backward(p, in, r);
  CHECK(has(hints, "dQ and dK match the gradients without the D term (dS = P o dP)"));
  CHECK(has(hints, "modules/11_backward/README.md, section 1"));

  planted = Bug::past_end_of_dv;
  r = check_backward(stand_in(), p, in);
  CHECK(r.dv.passed());
  CHECK(r.guard_dv == 1);
  CHECK(r.guard_writes == 1);
  CHECK_FALSE(r.passed());
  hints = diagnose_backward(p, in, r);
  CHECK(has(hints, "1 values were written past the end of dV: a block stores rows beyond the "
                   "last key"));
  planted = Bug::none;
}

TEST_CASE("check_backward refuses what it cannot run, in one line") {
  planted = Bug::none;
  Problem p = Problem::make(1, 2, 8, 8, 16, true);
  const BackwardInputs in = random_backward_inputs(p, 1);
  CHECK(check_backward(plain_stand_in(), p, in).status.message() ==
        "module 94 has no backward pass; dQ, dK and dV come from the backward module (module 11)");
  Problem wide = Problem::make(1, 2, 8, 8, 160, true);
  CHECK(check_backward_problem(stand_in(), wide).message() ==
        "the stand-in supports head_dim <= 128");
  Problem groups = Problem::make(1, 3, 8, 8, 16, true, Layout::BHSD, 2);
  CHECK(check_backward_problem(stand_in(), groups).message().find("kv_heads must divide heads") ==
        0);
  BackwardInputs short_dout = in;
  short_dout.dout.pop_back();
  CHECK(check_backward(stand_in(), p, short_dout).status.message() ==
        "dO holds 255 values, expected 256 for the problem's shape");
  BackwardInputs short_k = in;
  short_k.in.k.resize(10);
  CHECK(check_backward(stand_in(), p, short_k).status.message() ==
        "K holds 10 values, expected 256 for the problem's shape");
}

// ---- attn run --backward ------------------------------------------------------------------------

namespace {

void expect_pass(const CliResult& r, const std::string& header) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find(header) != std::string::npos);
  for (const char* line : {"  O    PASS", "  lse  PASS", "  dQ   PASS", "  dK   PASS", "  dV   PASS"})
    CHECK(r.out.find(line) != std::string::npos);
  CHECK(r.out.find("hint") == std::string::npos);
}

const std::vector<std::string> kShape = {"run", "-m", "11", "--backward", "--batch", "2",
                                         "--heads", "4", "--kv-heads", "2", "--seq-q", "21",
                                         "--seq-k", "13", "--dim", "16", "--seed", "7"};

CliResult run(std::vector<std::string> flags) {
  std::vector<std::string> args = kShape;
  args.insert(args.end(), flags.begin(), flags.end());
  return attn_cli(args);
}

}  // namespace

TEST_CASE("attn run --backward, emulated: every dtype and layout verifies") {
  planted = Bug::none;
  expect_pass(run({"--verify"}),
              "11_backward/solution  B=2 H=4 KVH=2 Sq=21 Sk=13 D=16 bf16 bhsd  forward + "
              "backward  seed 7");
  expect_pass(run({"--verify", "--causal"}), "D=16 causal bf16 bhsd");
  expect_pass(run({"--verify", "--causal", "--dtype", "f16", "--layout", "bshd"}), "f16 bshd");
  expect_pass(run({"--verify", "--dtype", "f32"}), "D=16 bhsd  forward + backward");
  const CliResult r = run({"--verify", "--causal"});
  CHECK(r.out.find("+inf for the 64 rows that see no key") != std::string::npos);  // 8 x 2 x 4
}

TEST_CASE("attn run --backward: a wrong kernel fails with its hints; --time; plain runs") {
  planted = Bug::no_delta;
  CliResult r = run({"--verify"});
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.out.find("  dQ   FAIL") != std::string::npos);
  CHECK(r.out.find("  dV   PASS") != std::string::npos);
  CHECK(r.out.find("hint: dQ and dK match the gradients without the D term") != std::string::npos);
  planted = Bug::dk_rows_unwritten;
  r = run({"--verify", "--causal"});
  CHECK(r.code == 1);
  CHECK(r.out.find("hint: dK: 128 elements were never written (keys 11 to 12") !=
        std::string::npos);
  planted = Bug::none;

  r = run({"--verify", "--time"});
  CHECK(r.code == 0);
  CHECK(r.out.find("time: not measured (emulated") != std::string::npos);
  r = run({});
  CHECK(r.code == 0);
  CHECK(r.out.find("ran the forward and the backward (add --verify") != std::string::npos);

  // Without --backward module 11 runs the forward alone: bf16 by default, f32 when asked.
  r = attn_cli({"run", "-m", "11", "--seq", "17", "--heads", "2", "--dim", "16", "--verify"});
  CHECK(r.code == 0);
  CHECK(r.out.find("bf16") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  r = attn_cli({"run", "-m", "11", "--seq", "17", "--heads", "2", "--dim", "16", "--verify",
                "--dtype", "f32"});
  CHECK(r.code == 0);
  CHECK(r.out.find("D=16 bhsd") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(stand_in().native_dtype() == DType::bf16);
  CHECK(stand_in().accepts(DType::f32));
}

TEST_CASE("attn run --backward: --out and --out-dq/dk/dv write what the kernel stored; .npy "
          "inputs and --dout") {
  planted = Bug::none;
  const std::string dir = "/tmp/attn_emu_backward_";
  const std::string o = dir + "o.npy", dq = dir + "dq.npy", dk = dir + "dk.npy",
                    dv = dir + "dv.npy";
  CliResult r = run({"--layout", "bshd", "--out", o, "--out-dq", dq, "--out-dk", dk, "--out-dv",
                     dv});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  NpyArray a = read_npy(dq);
  CHECK(a.shape == std::vector<int64_t>{2, 21, 4, 16});
  CHECK(a.data == last_dq);
  a = read_npy(dk);
  CHECK(a.shape == std::vector<int64_t>{2, 13, 2, 16});
  CHECK(a.data == last_dk);
  CHECK(read_npy(dv).shape == std::vector<int64_t>{2, 13, 2, 16});
  CHECK(read_npy(o).shape == std::vector<int64_t>{2, 21, 4, 16});
  CHECK(r.out.find("wrote " + dq + " (2, 21, 4, 16) (float32 holding bf16 values)") !=
        std::string::npos);

  // Q, K, V and dO from files (rank 3: no batch axis), verified and written.
  const std::string q = dir + "q.npy", k = dir + "k.npy", v = dir + "v.npy",
                    dout = dir + "dout.npy";
  std::vector<float> values(size_t(4 * 9 * 16));
  fill_uniform(values, 1);
  write_npy(q, {4, 9, 16}, values);
  write_npy(dout, {4, 9, 16}, values);
  values.resize(size_t(2 * 11 * 16));
  fill_uniform(values, 2);
  write_npy(k, {2, 11, 16}, values);
  fill_uniform(values, 3);
  write_npy(v, {2, 11, 16}, values);
  const std::vector<std::string> files = {"run", "-m", "11", "--backward", "--q", q, "--k", k,
                                          "--v", v, "--causal", "--dtype", "f32"};
  std::vector<std::string> args = files;
  args.insert(args.end(), {"--dout", dout, "--verify", "--out-dk", dk});
  r = attn_cli(args);
  expect_pass(r, "B=1 H=4 KVH=2 Sq=9 Sk=11 D=16 causal bhsd  forward + backward  inputs from "
                 ".npy  dO from .npy\n");
  CHECK(read_npy(dk).shape == std::vector<int64_t>{2, 11, 16});
  CHECK(read_npy(dk).data == last_dk);
  // dO of Q's shape is what the files must give: K's shape is refused, in one line.
  args = files;
  args.insert(args.end(), {"--dout", k});
  expect_one_line_error(attn_cli(args), 1,
                        "--dout " + k + ": shape (2, 11, 16), expected O's shape (4, 9, 16) for "
                        "B=1 H=4 KVH=2 Sq=9 Sk=11 D=16 causal");
  // A random dO beside file inputs: the seed is printed.
  args = files;
  args.insert(args.end(), {"--verify", "--seed", "3"});
  expect_pass(attn_cli(args), "inputs from .npy  seed 3\n");
  for (const std::string& path : {o, dq, dk, dv, q, k, v, dout}) std::remove(path.c_str());
}

TEST_CASE("attn run: the backward flags' errors, one line each") {
  const std::vector<std::string> base = {"run", "-m", "11", "--seq", "16", "--heads", "2",
                                         "--dim", "16"};
  const auto with = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    return attn_cli(args);
  };
  expect_one_line_error(with({"--dout", "x.npy"}), 1,
                        "--dout goes with --backward: the backward pass of module 11 (backward)");
  expect_one_line_error(with({"--out-dq", "x.npy"}), 1, "--out-dq goes with --backward");
  expect_one_line_error(with({"--out-dv", "x.npy", "--verify"}), 1, "--out-dv goes with --backward");
  expect_one_line_error(attn_cli({"run", "-m", "94", "--backward"}), 1,
                        "--backward needs module 11 (backward); module 94 runs the forward only");
  expect_one_line_error(with({"--backward", "--alibi"}), 1,
                        "--alibi with --backward is not supported");
  expect_one_line_error(with({"--backward", "--causal", "--window", "4"}), 1,
                        "--window with --backward is not supported");
  expect_one_line_error(attn_cli({"run", "-m", "11", "--backward", "--dim", "160"}), 1,
                        "the stand-in supports head_dim <= 128");
  expect_one_line_error(with({"--backward", "--kv-heads", "3"}), 1, "kv_heads must divide heads");
  expect_one_line_error(with({"--backward", "--seqlens-k", "3,4"}), 1,
                        "--seqlens-k is for inference modules");
  expect_one_line_error(with({"--backward", "--dout", "/tmp/attn_emu_missing.npy"}), 1,
                        "/tmp/attn_emu_missing.npy: cannot open file");
  expect_one_line_error(with({"--backward", "--dtype", "f8"}), 2, "--dtype");
}
