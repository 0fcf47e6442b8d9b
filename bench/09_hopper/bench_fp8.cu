// Module 09's FP8 rung (program bench_09_fp8): e4m3 Q, K, V with per-tensor scales
// (modules/09_hopper/fp8_kernel.cuh) beside the bf16 solution's forward(), for accuracy and
// for speed, in one run.
//
//   bench_09_fp8 [--json fp8.json] [--iters 10] [--seq N] [--check-only]
//
// (a) Accuracy: on small odd shapes (seq 1, 17, 65, 1000; causal and not; GQA; seq_q != seq_k;
//     BSHD) the relative L2 error against the double reference on the same bf16 inputs, for
//     FP8 (P scaled by 2^8 before its rounding, the production choice), FP8 without that
//     factor, and the bf16 solution. FP8 fails the check only above kFp8Tolerance.
// (b) Speed: the ladder shapes, 16k tokens (batch = 16384 / N) and 2048 channels (heads =
//     2048 / d), d = 64 and 128, causal and not, N = 512 .. 16384 (--seq: one N). Per shape:
//       fp8               the attention kernel alone, on tensors already quantized
//       fp8_quantize      the quantize pass alone (amax, Q8/K8, Vt8), bf16 in, e4m3 out
//       fp8_with_quantize both, what a caller holding bf16 tensors pays
//       bf16_forward      module 09's solution forward() (attn::m09::solution)
//     TFLOP/s counts 4 * B * H * N * N * d (halved with the causal mask) for all four (for
//     the quantize pass it is 0: it does no attention). Timing: CUDA events, 2 runs untimed,
//     then the median of --iters runs (common/timing.h).
// On a GPU that is not a Hopper, or from a build without sm_90a code, it prints one line and
// exits 0.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ladder.h"
#include "common/bench_json.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/timing.h"
#include "modules/09_hopper/fp8_kernel.cuh"  // with hopper.h: declares m09::solution::forward

namespace {

using namespace attn;

// The FP8 check's tolerance (relative L2 error against the double reference). e4m3 keeps 3
// mantissa bits: each rounding of Q, K, V and P is off by up to 2^-4 = 6.3% relative, 16x
// bf16's 2^-8. Q and K errors reach the scores (an absolute error that grows with the
// logits), V and P errors reach O directly. A CPU model of exactly these roundings (e4m3 Q,
// K, V with per-tensor scales, P rounded to e4m3, everything else exact) gives 3.9e-2 at
// N = 1000, d = 128 on the uniform [-1, 1) inputs of the checks, 5.1e-2 and 7.3e-2 when
// the inputs span [-2, 2) and [-3, 3) (larger logits). 1e-1 leaves that margin and still
// catches a real bug: a wrong key order, a missing rescale or scale gives an output
// unrelated to the reference, relative error near 1.
constexpr double kFp8Tolerance = 1e-1;

// A device workspace for the quantized tensors, grown on demand (outside the timed runs: the
// first, untimed, run of a shape allocates it).
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
  Status reserve(size_t n) {
    if (n <= bytes) return Status::ok();
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    if (cudaError_t e = cudaMalloc(&ptr, n); e != cudaSuccess)
      return Status::error(std::string("cannot allocate the FP8 workspace: ") +
                           cudaGetErrorString(e));
    bytes = n;
    return Status::ok();
  }
};
Workspace g_workspace;

m09::fp8::Fp8Tensors workspace_tensors(const Problem& p, Status& s) {
  s = g_workspace.reserve(m09::fp8::workspace_plan(p).total);
  return s ? m09::fp8::carve_workspace(p, g_workspace.ptr) : m09::fp8::Fp8Tensors{};
}

// P scaled by 2^0 instead of 2^8 before its rounding: what the factor buys in accuracy.
using NoScale64 = m09::fp8::Fp8Config<64, 128, 3, 3, false, 0>;
using NoScale128 = m09::fp8::Fp8Config<128, 128, 2, 3, false, 0>;

Status fp8_with_quantize(const Problem& p, const void* q, const void* k, const void* v, void* o,
                         cudaStream_t stream) {
  if (Status s = g_workspace.reserve(m09::fp8::workspace_plan(p).total); !s) return s;
  return m09::fp8::forward(p, q, k, v, o, g_workspace.ptr, stream);
}

Status fp8_no_pscale(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream) {
  Status s = Status::ok();
  const m09::fp8::Fp8Tensors t = workspace_tensors(p, s);
  if (!s) return s;
  if (Status st = m09::fp8::quantize(p, q, k, v, t, stream); !st) return st;
  return m09::fp8::attention_with<NoScale64, NoScale128>(p, t, o, stream);
}

// The two halves on their own. fp8_attention_only reads what the last fp8_quantize_only of
// the same problem wrote (the timing runs the quantize pass first).
Status fp8_quantize_only(const Problem& p, const void* q, const void* k, const void* v, void*,
                         cudaStream_t stream) {
  Status s = Status::ok();
  const m09::fp8::Fp8Tensors t = workspace_tensors(p, s);
  if (!s) return s;
  return m09::fp8::quantize(p, q, k, v, t, stream);
}

Status fp8_attention_only(const Problem& p, const void*, const void*, const void*, void* o,
                          cudaStream_t stream) {
  Status s = Status::ok();
  const m09::fp8::Fp8Tensors t = workspace_tensors(p, s);
  if (!s) return s;
  return m09::fp8::attention(p, t, o, stream);
}

Status bf16_forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
                    cudaStream_t stream) {
  return m09::solution::forward(p, q, k, v, o, stream);
}

Kernel as_kernel(const char* name, Forward16Fn fn, SupportsFn supports) {
  return Kernel{9, name, "", Backend::gpu, Impl::solution, supports, nullptr, fn};
}

// Small shapes that take every path: a single query and key, partial tiles, the causal
// diagonal, seq_q != seq_k both ways (seq_q > seq_k: rows that see no key), GQA, BSHD.
std::vector<Problem> check_shapes() {
  std::vector<Problem> out = {
      Problem::make(1, 2, 1, 1, 128),
      Problem::make(2, 3, 17, 17, 64, true),
      Problem::make(1, 2, 65, 65, 128, true),
      Problem::make(1, 2, 1000, 1000, 128),
      Problem::make(1, 2, 1000, 1000, 64, true),
      Problem::make(1, 4, 65, 1000, 128, false, Layout::BHSD, 2),
      Problem::make(1, 4, 1000, 777, 64, true, Layout::BHSD, 1),
      Problem::make(2, 2, 300, 100, 128, true),
      Problem::make(1, 4, 200, 300, 64, true, Layout::BSHD, 2),
  };
  for (Problem& p : out) p.dtype = DType::bf16;
  return out;
}

struct CheckRow {
  Problem p;
  double fp8 = -1, fp8_no_pscale = -1, bf16 = -1;
  std::string status = "ok";
};

// Relative L2 error of `kern` on p (random inputs in [-1, 1), bf16), or -1 with the reason
// in `status` when it fails the tolerance or does not run.
double check_one(const Kernel& kern, const Problem& p, double tolerance, std::string& status) {
  const CheckResult r = check_kernel(kern, p, random_inputs(p, 7 + p.seq_q), tolerance);
  if (!r.status) {
    status = kern.name + ": " + r.status.message();
    return -1;
  }
  if (!r.passed()) status = kern.name + " failed: " + r.comparison.summary();
  return r.comparison.rel_l2_error;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Module 09's FP8 rung: accuracy and speed beside the bf16 solution"};
  int iters = 10, seq = 0;
  bool check_only = false;
  std::string json_path;
  app.add_option("--iters", iters, "timed runs per row (median)")->check(CLI::Range(1, 1000));
  app.add_option("--seq", seq, "time only this N (batch = 16384 / N)")
      ->check(CLI::Range(64, 16384));
  app.add_option("--json", json_path, "write the checks and rows as JSON (schema attn-fp8-09/1)");
  app.add_flag("--check-only", check_only, "only the accuracy table (a)");
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::printf("bench_09_fp8: skipped: no GPU (%s)\n", no_device_reason().c_str());
    return 0;
  }
  if (Status s = m09::check_device_and_build(); !s) {
    std::printf("bench_09_fp8: skipped: %s\n", s.message().c_str());
    return 0;
  }
  const DeviceInfo dev = query_device();
  std::cout << dev.summary() << "\n";

  const Kernel fp8 = as_kernel("fp8", fp8_with_quantize, m09::fp8::supports);
  const Kernel no_pscale = as_kernel("fp8_no_pscale", fp8_no_pscale, m09::fp8::supports);
  const Kernel quantize_only = as_kernel("fp8_quantize", fp8_quantize_only, m09::fp8::supports);
  const Kernel attention_only = as_kernel("fp8", fp8_attention_only, m09::fp8::supports);
  const Kernel fp8_total = as_kernel("fp8_with_quantize", fp8_with_quantize, m09::fp8::supports);
  const Kernel bf16 = as_kernel("bf16_forward", bf16_forward, m09::supports);

  // (a) Accuracy.
  std::printf("\n(a) relative L2 error vs the double reference (bf16 inputs; FP8 tolerance %.0e)\n",
              kFp8Tolerance);
  std::printf("%-44s %10s %14s %10s\n", "shape", "fp8", "fp8 no 2^8", "bf16");
  std::vector<CheckRow> checks;
  double worst_fp8 = 0, worst_bf16 = 0;
  bool failed = false;
  for (const Problem& p : check_shapes()) {
    CheckRow c{p};
    c.fp8 = check_one(fp8, p, kFp8Tolerance, c.status);
    std::string ignored;
    c.fp8_no_pscale = check_one(no_pscale, p, 1.0, ignored);  // reported, not judged
    std::string bf16_status;
    c.bf16 = check_one(bf16, p, kDtypeTolerance, bf16_status);
    if (c.status == "ok" && bf16_status != "ok" && !bf16_status.empty()) c.status = bf16_status;
    if (c.status != "ok") failed = true;
    worst_fp8 = std::max(worst_fp8, c.fp8);
    worst_bf16 = std::max(worst_bf16, c.bf16);
    std::printf("%-44s %10.2e %14.2e %10.2e  %s\n", p.describe().c_str(), c.fp8, c.fp8_no_pscale,
                c.bf16, c.status == "ok" ? "" : c.status.c_str());
    checks.push_back(c);
  }
  std::printf("worst: fp8 %.2e, bf16 %.2e (%.1fx)\n", worst_fp8, worst_bf16,
              worst_bf16 > 0 ? worst_fp8 / worst_bf16 : 0.0);

  // (b) Speed.
  std::vector<ladder::Row> rows;
  if (!check_only) {
    std::printf("\n(b) median of %d runs\n", iters);
    std::vector<int> sizes;
    if (seq > 0) sizes = {seq};
    else
      for (int n = 512; n <= 16384; n *= 2) sizes.push_back(n);
    for (int n : sizes)
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          Problem p = Problem::make(std::max(1, 16384 / n), 2048 / d, n, n, d, causal);
          p.dtype = DType::bf16;
          DeviceTensors tensors(p, random_inputs(p, 99));
          auto time_kernel = [&](const Kernel& kern, double check, bool count_flops) {
            ladder::Row row{kern.name, "ok", p, 0, 0, check};
            ladder::time_row(row, kern, tensors, iters, count_flops);
            rows.push_back(row);
            return row;
          };
          // The quantize pass first: the attention-only runs read what it wrote.
          const ladder::Row q = time_kernel(quantize_only, worst_fp8, false);
          const ladder::Row a = time_kernel(attention_only, worst_fp8, true);
          const ladder::Row both = time_kernel(fp8_total, worst_fp8, true);
          const ladder::Row b = time_kernel(bf16, worst_bf16, true);
          std::printf("%-40s fp8 %8.3f ms %6.1f TFLOP/s | quantize %7.3f ms | fp8+quantize "
                      "%6.1f TFLOP/s | bf16 %8.3f ms %6.1f TFLOP/s | fp8 speedup %.2fx  %s\n",
                      p.describe().c_str(), a.median_ms, a.tflops, q.median_ms, both.tflops,
                      b.median_ms, b.tflops, b.median_ms > 0 ? b.median_ms / a.median_ms : 0.0,
                      (a.status == "ok" && b.status == "ok" && q.status == "ok")
                          ? ""
                          : (a.status + " / " + q.status + " / " + b.status).c_str());
        }
  }

  if (!json_path.empty()) {
    std::vector<json::Object> check_json;
    for (const CheckRow& c : checks) {
      json::Object o;
      o.add("shape", c.p.describe()).add("fp8_rel_l2", c.fp8)
          .add("fp8_no_pscale_rel_l2", c.fp8_no_pscale).add("bf16_rel_l2", c.bf16)
          .add("status", c.status == "ok" ? "ok" : "error");
      check_json.push_back(o);
    }
    std::vector<json::Object> row_json;
    for (const ladder::Row& r : rows) row_json.push_back(ladder::row_json(r));
    json::Document doc("attn-fp8-09/1");
    json::Object config;
    config.add("p_scale_log2", m09::fp8::Fp8Production128::kPScaleLog2)
        .add("scales", "per tensor: amax / 448")
        .add("fp8_tolerance", kFp8Tolerance);
    doc.field("device", json::device(dev))
        .field("method", ladder::method_json(iters, static_cast<int>(checks.size())))
        .field("fp8", config)
        .list("checks", check_json)
        .list("rows", row_json);
    if (Status s = doc.write(json_path); !s) {
      std::cerr << "error: " << s.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << json_path << "\n";
  }
  bool timing_failed = false;
  for (const ladder::Row& r : rows) timing_failed |= r.status != "ok";
  return failed || timing_failed ? 1 : 0;
}
