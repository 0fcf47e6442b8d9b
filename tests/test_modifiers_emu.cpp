// The modifier runner (common/modifier_runner.h) and `attn run` / `attn bench` on the modifier
// module, end to end on the CPU emulation of the CUDA runtime (no GPU): uploads of Q, K, V,
// the bias with its broadcast strides, the segment ids and the relative distance table, the
// poisoned output and its guard, the comparison, the hints, and every flag's checks. Module
// 12's kernels are GPU only, so a stand-in written in host code plays its entry point: it
// reads back what the harness gave it and computes the answer from that alone (the plumbing
// must make it pass), and planted bugs that the checks must catch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/half.h"
#include "common/modifier_runner.h"
#include "common/modifiers.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/registry.h"
#include "tests/cli_checks.h"
#include "tests/emulated_device_io.h"

using namespace attn;
using testing::CliResult;
using testing::attn_cli;
using testing::expect_one_line_error;
using testing::download;
using testing::upload_output;

namespace {

Inputs read_qkv(const Problem& p, const void* q, const void* k, const void* v) {
  Inputs in;
  in.q = from_bits16(download<uint16_t>(q, p.q_elements()), p.dtype);
  in.k = from_bits16(download<uint16_t>(k, p.kv_elements()), p.dtype);
  in.v = from_bits16(download<uint16_t>(v, p.kv_elements()), p.dtype);
  return in;
}

enum class Bug { none, bias_head_stride_ignored, masked_rows_nan, score_skipped, rope_paired_wrong,
                 past_the_end };
Bug planted = Bug::none;

// The modifier tensors as the harness put them on the device, read back into the host form:
// the bias through its strides (copied out to [batch][heads], so a wrong stride shows), the
// T5 table from the distance table (every distance names its bucket).
ModifierInputs read_modifiers(const Problem& p, const ModifierSpec& m, const ModifierTensors& t,
                              ModifierSpec& as_read) {
  ModifierInputs mi;
  as_read = m;
  if (m.score == ScoreMod::bias) {
    as_read.bias_per_batch = as_read.bias_per_head = true;
    const std::vector<uint16_t> bits = download<uint16_t>(t.bias, bias_elements(p, m));
    const int64_t plane = int64_t(p.seq_q) * p.seq_k;
    const int64_t head_stride = planted == Bug::bias_head_stride_ignored ? 0 : t.bias_head_stride;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int64_t e = 0; e < plane; ++e)
          mi.bias.push_back(
              from_bits16(bits[size_t(b * t.bias_batch_stride + h * head_stride + e)], p.dtype));
  }
  if (m.documents) {
    mi.seg_q = download<int32_t>(t.seg_q, int64_t(p.batch) * p.seq_q);
    mi.seg_k = download<int32_t>(t.seg_k, int64_t(p.batch) * p.seq_k);
  }
  if (m.score == ScoreMod::relative) {
    const int distances = p.seq_q + p.seq_k - 1;
    const std::vector<float> by_distance = download<float>(t.rel_bias, int64_t(p.heads) * distances);
    mi.rel_table.assign(size_t(p.heads) * m.rel_buckets, 0.0f);
    for (int h = 0; h < p.heads; ++h)
      for (int at = 0; at < distances; ++at)
        mi.rel_table[size_t(h) * m.rel_buckets +
                     t5_bucket(at - (p.seq_k - 1), m.rel_bidirectional, m.rel_buckets,
                               m.rel_max_distance)] = by_distance[size_t(h) * distances + at];
  }
  return mi;
}

Status stand_in_forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t,
                        const void* q, const void* k, const void* v, void* o, cudaStream_t) {
  if ((m.score == ScoreMod::bias) != (t.bias != nullptr) ||
      m.documents != (t.seg_q != nullptr && t.seg_k != nullptr) ||
      (m.score == ScoreMod::relative) != (t.rel_bias != nullptr))
    return Status::error("the modifier pointers do not match the spec");
  const Inputs in = read_qkv(p, q, k, v);
  ModifierSpec spec;
  ModifierInputs mi = read_modifiers(p, m, t, spec);
  if (planted == Bug::score_skipped) {
    spec.score = ScoreMod::none;
    mi.bias.clear();
    mi.rel_table.clear();
  }
  if (planted == Bug::rope_paired_wrong && m.rope != RopeStyle::none)
    spec.rope = m.rope == RopeStyle::half ? RopeStyle::interleaved : RopeStyle::half;
  std::vector<double> out = reference_attention(p, spec, mi, in.q, in.k, in.v);
  if (planted == Bug::masked_rows_nan)
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < p.seq_q; ++i)
          if (visible_key_range(p, m, mi, b, i).count() == 0)
            std::fill_n(out.begin() + Problem::offset(p.o, b, h, i), p.head_dim, NAN);
  upload_output(out, p.dtype, o);
  if (planted == Bug::past_the_end) {
    const uint16_t zero = 0;
    cudaMemcpy(static_cast<uint16_t*>(o) + p.o_elements() + 2, &zero, 2, cudaMemcpyHostToDevice);
  }
  return Status::ok();
}

Status stand_in_supports(const Problem& p, const ModifierSpec&) {
  if (p.head_dim > 128) return Status::error("the stand-in supports head_dim <= 128");
  return Status::ok();
}

Status any_problem(const Problem&) { return Status::ok(); }

Status plain_forward16(const Problem& p, const void* q, const void* k, const void* v, void* o,
                       cudaStream_t) {
  const Inputs in = read_qkv(p, q, k, v);
  upload_output(reference_attention(p, in.q, in.k, in.v), p.dtype, o);
  return Status::ok();
}

const ModifierEntry kStandIn{stand_in_supports, stand_in_forward};
const bool registered_modifiers = register_kernel(
    Kernel{95, "stand_in_modifiers", "CPU stand-in (test only)", Backend::gpu, Impl::solution,
           any_problem, nullptr, plain_forward16, nullptr, &kStandIn});
const bool registered_plain =
    register_kernel(Kernel{94, "stand_in_plain", "CPU stand-in (test only)", Backend::gpu,
                           Impl::solution, any_problem, nullptr, plain_forward16});

const Kernel& stand_in() {
  REQUIRE(registered_modifiers);
  return *find_kernel(95, Impl::solution);
}

const Kernel& plain_stand_in() {
  REQUIRE(registered_plain);
  return *find_kernel(94, Impl::solution);
}


void expect_pass(const CliResult& r, const std::string& header) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find(header) != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
}

struct Case {
  const char* what;
  ModifierSpec m;
};

std::vector<Case> every_modifier() {
  std::vector<Case> cases;
  const auto add = [&](const char* what, auto set) {
    ModifierSpec m;
    set(m);
    cases.push_back({what, m});
  };
  add("alibi", [](ModifierSpec& m) { m.score = ScoreMod::alibi; });
  add("bias [1,H]", [](ModifierSpec& m) { m.score = ScoreMod::bias; });
  add("bias [B,H]", [](ModifierSpec& m) { m.score = ScoreMod::bias, m.bias_per_batch = true; });
  add("bias [B,1]", [](ModifierSpec& m) {
    m.score = ScoreMod::bias, m.bias_per_batch = true, m.bias_per_head = false;
  });
  add("bias [1,1]", [](ModifierSpec& m) { m.score = ScoreMod::bias, m.bias_per_head = false; });
  add("softcap", [](ModifierSpec& m) { m.score = ScoreMod::softcap, m.softcap = 3.0f; });
  add("relative", [](ModifierSpec& m) {
    m.score = ScoreMod::relative, m.rel_buckets = 8, m.rel_max_distance = 20;
  });
  add("relative one-way", [](ModifierSpec& m) {
    m.score = ScoreMod::relative, m.rel_bidirectional = false;
  });
  add("window + documents", [](ModifierSpec& m) { m.window = 9, m.documents = true; });
  add("prefix", [](ModifierSpec& m) { m.prefix = 5; });
  add("rope half", [](ModifierSpec& m) { m.rope = RopeStyle::half; });
  add("rope interleaved + alibi", [](ModifierSpec& m) {
    m.rope = RopeStyle::interleaved, m.score = ScoreMod::alibi, m.rope_base = 500.0;
  });
  return cases;
}

}  // namespace

TEST_CASE("check_modified: the stand-in passes every modifier, in f16 and bf16, BHSD and BSHD") {
  planted = Bug::none;
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const Layout layout : {Layout::BHSD, Layout::BSHD})
      for (const Case& c : every_modifier()) {
        Problem p = Problem::make(2, 4, 19, 27, 16, true, layout, 2);
        p.dtype = dtype;
        INFO(c.what << ": " << p.describe() << " " << layout_name(layout));
        const ModifierInputs mi = random_modifier_inputs(p, c.m, 5, 3);
        const ModifierCheck r = check_modified(stand_in(), p, c.m, random_inputs(p, 6), mi);
        INFO(r.status.message());
        CHECK(r.passed());
        CHECK(r.comparison.rel_l2_error < 3e-3);  // only the rounding of O to 16 bits
        CHECK(r.output.size() == size_t(p.o_elements()));
      }
}

TEST_CASE("ModifierDeviceTensors: the bias strides of each broadcast, null pointers when unused") {
  Problem p = Problem::make(2, 3, 5, 7, 16);
  p.dtype = DType::bf16;
  const Inputs in = random_inputs(p, 1);
  const int64_t plane = 5 * 7;
  struct Axes { bool batch, head; int64_t batch_stride, head_stride; };
  for (const Axes a : {Axes{true, true, 3 * plane, plane}, Axes{false, true, 0, plane},
                       Axes{true, false, plane, 0}, Axes{false, false, 0, 0}}) {
    ModifierSpec m;
    m.score = ScoreMod::bias;
    m.bias_per_batch = a.batch;
    m.bias_per_head = a.head;
    ModifierDeviceTensors t(p, m, in, random_modifier_inputs(p, m, 2));
    CHECK(t.tensors().bias != nullptr);
    CHECK(t.tensors().bias_batch_stride == a.batch_stride);
    CHECK(t.tensors().bias_head_stride == a.head_stride);
    CHECK(t.tensors().seg_q == nullptr);
    CHECK(t.tensors().rel_bias == nullptr);
  }
  ModifierSpec none;
  ModifierDeviceTensors t(p, none, in, {});
  CHECK(t.tensors().bias == nullptr);
  CHECK(t.tensors().seg_k == nullptr);
}

TEST_CASE("check_modified catches a wrong bias stride, NaN masked rows, a missing modifier") {
  Problem p = Problem::make(1, 4, 24, 10, 16, true);
  p.dtype = DType::bf16;
  const Inputs in = random_inputs(p, 3, 2.0f);

  ModifierSpec bias;
  bias.score = ScoreMod::bias;
  const ModifierInputs bias_in = random_modifier_inputs(p, bias, 4);
  planted = Bug::bias_head_stride_ignored;
  ModifierCheck r = check_modified(stand_in(), p, bias, in, bias_in);
  CHECK_FALSE(r.passed());
  std::vector<std::string> hints = diagnose_modified(p, bias, bias_in, in, r);
  CHECK(std::any_of(hints.begin(), hints.end(), [](const std::string& h) {
    return h.find("first wrong element (b=0, h=1") != std::string::npos;  // head 0 is right
  }));

  ModifierSpec window;
  window.window = 4;
  planted = Bug::masked_rows_nan;
  r = check_modified(stand_in(), p, window, in, {});
  CHECK_FALSE(r.passed());
  hints = diagnose_modified(p, window, {}, in, r);
  REQUIRE_FALSE(hints.empty());
  // Queries 0-13 sit at positions -14 .. -1: no key, 14 rows per head.
  CHECK(hints[0].find("56 rows that see no key are NaN or unwritten, first query 0 of (b=0, "
                      "h=0)") != std::string::npos);

  planted = Bug::score_skipped;
  ModifierSpec alibi;
  alibi.score = ScoreMod::alibi;
  r = check_modified(stand_in(), p, alibi, in, {});
  CHECK_FALSE(r.passed());
  hints = diagnose_modified(p, alibi, {}, in, r);
  CHECK(hints.back() == "the output matches attention without the alibi score modifier: it was "
                        "not applied to the scores before the softmax");

  planted = Bug::rope_paired_wrong;
  ModifierSpec rope;
  rope.rope = RopeStyle::interleaved;
  r = check_modified(stand_in(), p, rope, in, {});
  CHECK_FALSE(r.passed());
  hints = diagnose_modified(p, rope, {}, in, r);
  CHECK(hints.back().find("the output matches RoPE half (pairs m, m + head_dim/2)") == 0);

  planted = Bug::past_the_end;
  r = check_modified(stand_in(), p, rope, in, {});
  CHECK(r.comparison.passed());
  CHECK(r.guard_writes == 1);
  CHECK_FALSE(r.passed());
  planted = Bug::none;
}

TEST_CASE("run_modified refuses what it cannot run, in one line") {
  planted = Bug::none;
  Problem p = Problem::make(1, 2, 8, 8, 16, true);
  p.dtype = DType::f16;
  const Inputs in = random_inputs(p, 1);
  ModifierSpec alibi;
  alibi.score = ScoreMod::alibi;
  std::vector<float> out;
  Status s = run_modified(plain_stand_in(), p, alibi, in, {}, out);
  CHECK(s.message() == "module 94 runs plain attention; score modifiers, masks and RoPE run on "
                       "the modifier module (module 12)");
  ModifierSpec window;
  window.window = 3;
  Problem open = p;
  open.causal = false;
  CHECK(run_modified(stand_in(), open, window, in, {}, out).message().find("--window needs "
                                                                         "--causal") == 0);
  Problem wide = Problem::make(1, 2, 8, 8, 256, true);
  wide.dtype = DType::f16;
  CHECK(check_problem(stand_in(), wide, alibi).message() == "the stand-in supports head_dim <= 128");
  Problem f32 = p;
  f32.dtype = DType::f32;
  CHECK(check_problem(stand_in(), f32, alibi).message().find("takes f16 or bf16") !=
        std::string::npos);
  ModifierSpec docs;
  docs.documents = true;
  CHECK(run_modified(stand_in(), p, docs, in, {}, out).message() ==
        "the query segment ids hold 0 values, expected 1 x 8 = 8");
  Inputs short_q = in;
  short_q.q.pop_back();
  CHECK(run_modified(stand_in(), p, alibi, short_q, {}, out).message() ==
        "Q holds 255 values, expected 256 for the problem's shape");
}

// ---- attn run ---------------------------------------------------------------------------------

TEST_CASE("attn run on the modifier module, emulated: every flag verifies") {
  planted = Bug::none;
  const std::vector<std::string> shape = {"run", "-m", "95", "--batch", "2", "--heads", "4",
                                          "--kv-heads", "2", "--seq-q", "21", "--seq-k", "30",
                                          "--dim", "16", "--seed", "7", "--verify"};
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = shape;
    args.insert(args.end(), flags.begin(), flags.end());
    return attn_cli(args);
  };
  expect_pass(run({"--alibi"}), "B=2 H=4 KVH=2 Sq=21 Sk=30 D=16 bf16 bhsd  alibi  seed 7");
  expect_pass(run({"--random-bias"}), "  bias[1,H]  ");
  expect_pass(run({"--random-bias", "--bias-broadcast", "none", "--dtype", "f16"}), "bias[B,H]");
  expect_pass(run({"--random-bias", "--bias-broadcast", "heads"}), "bias[B,1]");
  expect_pass(run({"--random-bias", "--bias-broadcast", "both"}), "bias[1,1]");
  expect_pass(run({"--softcap", "2.5"}), "softcap=2.5");
  expect_pass(run({"--relative", "--rel-buckets", "16", "--rel-max-distance", "24"}),
              "relative=16/24");
  expect_pass(run({"--relative", "--rel-causal"}), "relative=32/128/unidirectional");
  expect_pass(run({"--causal", "--window", "6", "--documents", "3"}),
              "causal bf16 bhsd  window=6 documents");
  expect_pass(run({"--causal", "--prefix", "4", "--layout", "bshd"}), "bshd  prefix=4");
  expect_pass(run({"--rope", "half", "--rope-base", "500000"}), "rope=half rope_base=500000");
  expect_pass(run({"--rope", "interleaved", "--causal", "--window", "2"}),
              "window=2 rope=interleaved");
}

TEST_CASE("attn run: --bias and --segments from .npy files") {
  planted = Bug::none;
  const std::string bias = "/tmp/attn_emu_bias.npy", seg_q = "/tmp/attn_emu_seg_q.npy",
                    seg_k = "/tmp/attn_emu_seg_k.npy";
  const std::vector<std::string> shape = {"run", "-m", "95", "--batch", "2", "--heads", "3",
                                          "--seq-q", "6", "--seq-k", "9", "--dim", "16",
                                          "--seed", "2", "--verify"};
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = shape;
    args.insert(args.end(), flags.begin(), flags.end());
    return attn_cli(args);
  };
  std::vector<float> values(size_t(2 * 1 * 6 * 9));
  fill_uniform(values, 4, -3.0f, 3.0f);
  write_npy_f16(bias, {2, 1, 6, 9}, values);
  expect_pass(run({"--bias", bias}), "bias[B,1]");
  values.resize(size_t(3 * 6 * 9));
  write_npy(bias, {1, 3, 6, 9}, values);
  expect_pass(run({"--bias", bias, "--dtype", "f16"}), "bias[1,H]");
  expect_one_line_error(attn_cli({"run", "-m", "95", "--batch", "2", "--heads", "3", "--seq-q",
                                  "6", "--seq-k", "8", "--dim", "16", "--bias", bias}), 1,
                        "--bias /tmp/attn_emu_bias.npy: shape (1, 3, 6, 9) does not fit B=2 H=3 "
                        "Sq=6 Sk=8 D=16 bf16: expected (1 or 2, 1 or 3, 6, 8)");
  values[5] = 1e5f;
  write_npy(bias, {1, 3, 6, 9}, values);
  expect_one_line_error(run({"--bias", bias, "--dtype", "f16"}), 1,
                        "element 5 (100000) is beyond the range of f16 (largest 65504)");
  write_npy(bias, {3, 6, 9}, values);
  expect_one_line_error(run({"--bias", bias}), 1, "shape (3, 6, 9), expected [batch or 1, "
                        "heads or 1, seq_q, seq_k] = (1 or 2, 1 or 3, 6, 9)");

  // seq_q != seq_k: the queries' ids and the keys' ids, each [batch, length].
  write_npy_int32(seg_q, {2, 6}, {0, 0, 1, 1, 1, 2, 5, 5, 5, 5, 6, 6});
  write_npy_int32(seg_k, {2, 9}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 4, 5, 5, 5, 5, 5, 6, 6, 6});
  expect_pass(run({"--segments", seg_q, "--segments-k", seg_k}), "documents");
  expect_one_line_error(run({"--segments", seg_q}), 1,
                        "--segments /tmp/attn_emu_seg_q.npy gives the queries' ids; with seq_q != "
                        "seq_k (6 and 9) give the keys' ids too: --segments-k FILE [batch, seq_k]");
  expect_one_line_error(run({"--segments", seg_k, "--segments-k", seg_q}), 1,
                        "--segments /tmp/attn_emu_seg_k.npy: shape (2, 9), expected [batch, "
                        "seq_q] = (2, 6)");
  write_npy_int32(seg_k, {2, 9}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 4, 5, 5, 5, 5, 5, 6, 6, 5});
  expect_one_line_error(run({"--segments", seg_q, "--segments-k", seg_k}), 1,
                        "--segments-k /tmp/attn_emu_seg_k.npy: seg_k[1][8] = 5 is smaller than "
                        "the id before it (6)");
  // seq_q == seq_k: one file is both.
  write_npy_int32(seg_q, {9}, {0, 0, 3, 3, 3, 3, 3, 7, 7});
  expect_pass(attn_cli({"run", "-m", "95", "--seq", "9", "--heads", "2", "--dim", "16",
                        "--segments", seg_q, "--causal", "--verify"}),
              "documents");
  for (const std::string& f : {bias, seg_q, seg_k}) std::remove(f.c_str());
}

TEST_CASE("attn run: a wrong kernel fails with the hint; --out, --time; plain runs") {
  planted = Bug::score_skipped;
  CliResult r = attn_cli({"run", "-m", "95", "--seq", "40", "--heads", "2", "--dim", "16",
                       "--softcap", "1", "--seed", "1", "--verify"});
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.out.find("FAIL") != std::string::npos);
  CHECK(r.out.find("hint: the output matches attention without the softcap score modifier") !=
        std::string::npos);
  planted = Bug::none;

  const std::string o = "/tmp/attn_emu_modifier_o.npy";
  r = attn_cli({"run", "-m", "95", "--seq", "17", "--heads", "2", "--dim", "16", "--causal",
                "--window", "5", "--verify", "--out", o, "--time", "--layout", "bshd"});
  CHECK(r.code == 0);
  CHECK(r.out.find("time: not measured (emulated") != std::string::npos);
  CHECK(read_npy(o).shape == std::vector<int64_t>{1, 17, 2, 16});
  std::remove(o.c_str());

  // No modifier flag: the plain path (forward16), as for module 07.
  r = attn_cli({"run", "-m", "95", "--seq", "17", "--heads", "2", "--dim", "16", "--verify"});
  CHECK(r.code == 0);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(r.out.find("none") == std::string::npos);
}

TEST_CASE("attn run: bad modifier flags and combinations, one line each") {
  const std::vector<std::string> base = {"run", "-m", "95", "--seq", "16", "--heads", "2",
                                         "--dim", "16"};
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    return attn_cli(args);
  };
  expect_one_line_error(attn_cli({"run", "-m", "94", "--alibi"}), 1,
                        "--alibi needs module 95 (modifiers); module 94 runs plain attention");
  expect_one_line_error(attn_cli({"run", "-m", "94", "--rope", "half", "--causal"}), 1,
                        "--rope needs module 95 (modifiers)");
  expect_one_line_error(run({"--alibi", "--softcap", "3"}), 1,
                        "--alibi and --softcap are both score modifiers: module 95 applies one "
                        "at a time");
  expect_one_line_error(run({"--bias", "x.npy", "--random-bias"}), 1,
                        "--bias and --random-bias both give the bias: use one");
  expect_one_line_error(run({"--bias-broadcast", "both"}), 1,
                        "--bias-broadcast goes with --random-bias");
  expect_one_line_error(run({"--rel-buckets", "8"}), 1, "--rel-buckets goes with --relative");
  expect_one_line_error(run({"--rel-causal"}), 1, "--rel-causal goes with --relative");
  expect_one_line_error(run({"--rope-base", "100"}), 1, "--rope-base goes with --rope");
  expect_one_line_error(run({"--segments-k", "x.npy"}), 1, "--segments-k goes with --segments");
  expect_one_line_error(run({"--documents", "2", "--segments", "x.npy"}), 1,
                        "--documents and --segments both give the documents: use one");
  expect_one_line_error(run({"--documents", "0"}), 1, "--documents must be >= 1 (got 0)");
  expect_one_line_error(run({"--window", "0", "--causal"}), 1, "--window must be >= 1 (got 0)");
  expect_one_line_error(run({"--window", "64"}), 1,
                        "--window needs --causal: the window is the last 64 keys up to the "
                        "query's position");
  expect_one_line_error(run({"--window", "4", "--prefix", "2", "--causal"}), 1,
                        "--window and --prefix are two masks of the same kind: choose one");
  expect_one_line_error(run({"--softcap", "0"}), 1, "--softcap must be a finite number > 0");
  expect_one_line_error(run({"--relative", "--rel-buckets", "6", "--rel-max-distance", "1"}), 1,
                        "--rel-max-distance must be > 1");
  expect_one_line_error(attn_cli({"run", "-m", "95", "--dim", "40", "--rope", "half"}), 1,
                        "--rope half needs head_dim % 16 == 0");
  expect_one_line_error(attn_cli({"run", "-m", "95", "--dim", "160", "--alibi"}), 1,
                        "the stand-in supports head_dim <= 128");
  expect_one_line_error(run({"--alibi", "--dtype", "f32"}), 1, "takes f16 or bf16");
  expect_one_line_error(run({"--rope", "sideways"}), 2, "--rope");
  expect_one_line_error(run({"--bias", "/tmp/attn_emu_missing.npy"}), 1,
                        "/tmp/attn_emu_missing.npy: cannot open file");
}

// ---- attn bench -------------------------------------------------------------------------------

TEST_CASE("attn bench: modifier flags are checked before anything runs") {
  expect_one_line_error(attn_cli({"bench", "--modules", "94", "--alibi"}), 1,
                        "--alibi needs module 95 (modifiers); none of the modules benchmarked "
                        "here has them");
  expect_one_line_error(attn_cli({"bench", "--modules", "95", "--window", "64"}), 1,
                        "--window needs --causal: the window is the last 64 keys up to the "
                        "query's position (shape B=32 H=32 Sq=512 Sk=512 D=64 bf16 of preset "
                        "'ladder'; attn bench --causal runs every shape with the causal mask)");
  expect_one_line_error(attn_cli({"bench", "--modules", "95", "--alibi", "--relative"}), 1,
                        "--alibi and --relative are both score modifiers");
  expect_one_line_error(attn_cli({"bench", "--modules", "95", "--bias", "x.npy"}), 2, "--bias");
}

TEST_CASE("attn bench, emulated: module 95 with a window beside a plain module, in the JSON") {
  planted = Bug::none;
  const std::string json = "/tmp/attn_emu_modifier_bench.json";
  const CliResult r = attn_cli({"bench", "--modules", "94,95", "--preset", "quick", "--causal",
                             "--window", "64", "--iters", "3", "--warmup", "0", "--out", json});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("note: module 94 has no modifiers: it runs the plain shapes") !=
        std::string::npos);
  CHECK(r.out.find("B=1 H=8 Sq=256 Sk=256 D=64 causal bf16 window=64") != std::string::npos);
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  CHECK(doc.find("\"modifiers\": \"window=64\"") != std::string::npos);  // the document's
  // Two shapes per module: the plain module's rows say none, the modifier module's the window.
  std::vector<std::string> rows;
  for (size_t at = doc.find("{\"kernel\""); at != std::string::npos;
       at = doc.find("{\"kernel\"", at + 1))
    rows.push_back(doc.substr(at, doc.find('\n', at) - at));
  REQUIRE(rows.size() == 4);
  for (const std::string& row : rows) {
    INFO(row);
    const bool plain = row.find("stand_in_plain") != std::string::npos;
    CHECK(row.find(plain ? "\"modifiers\": \"none\"" : "\"modifiers\": \"window=64\"") !=
          std::string::npos);
    CHECK(row.find("\"causal\": true") != std::string::npos);
    CHECK(row.find("\"check\": \"pass\"") != std::string::npos);
  }
  // A window of 64 keys over 1024 causal queries: 64 * 1024 - 64 * 63 / 2 = 63520 pairs.
  CHECK(rows[3].find("\"visible_pairs\": 63520") != std::string::npos);
  std::remove(json.c_str());
}
