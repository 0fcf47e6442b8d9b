// Module 09's 3xTF32 rung (program bench_09_tf32): fp32 attention on wgmma
// (modules/09_hopper/tf32_kernel.cuh) beside module 07's 3xTF32 on mma.sync, for accuracy and
// for speed, in one run.
//
//   bench_09_tf32 [--json tf32.json] [--iters 10] [--rounds 3] [--seq N] [--check-only]
//                 [--inputs DIR]
//
// Rungs (all fp32 tensors in, fp32 O out):
//   3xtf32_wgmma   module 09's forward_3xtf32: the split pass, then the wgmma kernel (K split
//                  in the kernel up to tf32::kKInKernelKeys keys, by the pass beyond)
//   3xtf32_wgmma_kpass  the same tiles with K always split by the pass (both planes loaded)
//   3xtf32_wgmma_kin    ... and always by the producer warps in shared memory
//   3xtf32_wgmma_serial production, with the attention kernel launched after the split pass
//                  ends instead of as a programmatic dependent launch
//   tf32_wgmma     the same kernel with only the big x big products: plain TF32 (the lesson's
//                  comparison; held to module 07's kTf32Tolerance, not to fp32's)
//   3xtf32_07      module 07's forward_3xtf32 (mma.sync m16n8k8), the course's previous
//                  fastest fp32 kernel
//   split_pass     the split pass alone, as 3xtf32_wgmma runs it (V transposed big and small;
//                  K big and small too where the production splits K in the pass): its share
//                  of 3xtf32_wgmma's time (TFLOP/s 0: it does no attention)
// (a) Accuracy: the relative L2 error against the double reference of every rung on the same
//     fp32 inputs: small odd shapes (the check, at the fp32 tolerance 1e-4 for the 3xTF32
//     rungs), then the error table on the inputs of bench_07 --dtype f32's table
//     (bench/fp32_error_inputs.h: Q and K in [-1, 1) and [-4, 4)); --inputs DIR writes them
//     for scripts/compare_torch.py --errors.
// (b) Speed: the ladder shapes, 16k tokens (batch = 16384 / N) and 2048 channels (heads =
//     2048 / d), d = 64 and 128, causal and not, N = 512 .. 16384 (--seq: one N). TFLOP/s
//     counts 4 * B * H * N * N * d (halved with the causal mask). Per shape: 300 ms of untimed
//     runs (the clocks settle to their loaded state), then --rounds rounds that each time every
//     rung once, each round starting one rung later (CUDA events, 2 runs untimed, the median
//     of --iters runs, common/timing.h); a rung's row is its median round. Timed one after another without that, identical code
//     measured up to 14% apart, the rung timed first after an idle moment the fastest.
// On a GPU that is not a Hopper, or from a build without sm_90a code, it prints one line and
// exits 0.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench/fp32_error_inputs.h"
#include "bench/ladder.h"
#include "common/bench_json.h"
#include "common/compare.h"
#include "common/reference.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "modules/07_tensor_cores/tensor_cores.h"  // m07::solution::forward_3xtf32, kTf32Tolerance
#include "solutions/09_hopper/hopper_steps.cuh"    // m09::solution::HopperSteps, tf32_kernel.cuh

namespace {

using namespace attn;

// Plain TF32 on the same kernel: only the big x big products (what the exercise's TODO 7 and
// 8 start from).
struct PlainTf32Steps : m09::solution::HopperSteps {
  template <class C>
  __device__ static void issue_scores_3xtf32(float (&s)[C::kBlockN / 2], uint32_t q_rows,
                                             const uint32_t (&)[C::kHeadDim / 8][4],
                                             uint32_t k_tile) {
    m09::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::kHeadDim / 8; ++kk) {
      const uint32_t panel = kk / 4, step = (kk % 4) * 32;
      const uint64_t a = m09::matrix_descriptor(
          q_rows + panel * C::kBlockM * C::kRowBytes + step, 16, 1024);
      const uint64_t b = m09::matrix_descriptor(
          k_tile + panel * C::kBlockN * C::kRowBytes + step, 16, 1024);
      m09::WgmmaTf32<C::kBlockN>::a_smem(s, a, b, kk > 0 ? 1 : 0);
    }
    m09::wgmma_commit();
  }
  template <class C>
  __device__ static void issue_pv_3xtf32(float (&o)[C::kHeadDim / 2],
                                         const uint32_t (&p_big)[C::kBlockN / 8][4],
                                         const uint32_t (&)[C::kBlockN / 8][4], uint32_t v_tile) {
    m09::wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < C::kBlockN / 8; ++kb) {
      const uint32_t panel = kb / 4, step = (kb % 4) * 32;
      const uint64_t b = m09::matrix_descriptor(
          v_tile + panel * C::kHeadDim * C::kRowBytes + step, 16, 1024);
      m09::WgmmaTf32<C::kHeadDim>::a_regs(o, p_big[kb], b, 1);
    }
    m09::wgmma_commit();
  }
};

Status wgmma_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream) {
  return m09::solution::forward_3xtf32(p, q, k, v, o, stream);
}
Status wgmma_tf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                  cudaStream_t stream) {
  return m09::tf32::forward_3xtf32<PlainTf32Steps>(p, q, k, v, o, stream);
}
// The production tiles with K always split by the pass, and always in the kernel.
Status wgmma_3xtf32_kpass(const Problem& p, const float* q, const float* k, const float* v,
                          float* o, cudaStream_t stream) {
  return m09::tf32::forward_3xtf32_with<m09::solution::HopperSteps, m09::tf32::Tf32Long64,
                                        m09::tf32::Tf32Long128>(p, q, k, v, o, stream);
}
Status wgmma_3xtf32_kin(const Problem& p, const float* q, const float* k, const float* v,
                        float* o, cudaStream_t stream) {
  return m09::tf32::forward_3xtf32_with<m09::solution::HopperSteps, m09::tf32::Tf32Short64,
                                        m09::tf32::Tf32Short128>(p, q, k, v, o, stream);
}
// Production, but the attention kernel launched after the split pass has ended (no
// programmatic dependent launch).
Status wgmma_3xtf32_serial(const Problem& p, const float* q, const float* k, const float* v,
                           float* o, cudaStream_t stream) {
  using namespace m09::tf32;
  if (splits_k_in_kernel(p))
    return forward_3xtf32_with<m09::solution::HopperSteps, Tf32Short64, Tf32Short128, false>(
        p, q, k, v, o, stream);
  return forward_3xtf32_with<m09::solution::HopperSteps, Tf32Long64, Tf32Long128, false>(
      p, q, k, v, o, stream);
}
Status mma_sync_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                       cudaStream_t stream) {
  return m07::solution::forward_3xtf32(p, q, k, v, o, stream);
}
Status split_pass(const Problem& p, const float*, const float* k, const float* v, float*,
                  cudaStream_t stream) {
  void* workspace = nullptr;
  const bool with_k = !m09::tf32::splits_k_in_kernel(p);
  if (Status s = m09::tf32::workspace_for(p, with_k, &workspace); !s) return s;
  return m09::tf32::split(p, k, v, m09::tf32::carve_workspace(p, workspace, with_k), stream,
                          with_k);
}

Status supports_f32(const Problem& p) { return m09::tf32::supports(p); }

Kernel as_kernel(const char* name, ForwardFn fn) {
  return Kernel{9, name, "", Backend::gpu, Impl::solution, supports_f32, fn, nullptr};
}

// Small shapes that take every path: one query and key, partial tiles, the causal diagonal,
// seq_q != seq_k both ways (seq_q > seq_k with the mask: rows that see no key), GQA, BSHD.
std::vector<Problem> check_shapes() {
  return {
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
}

constexpr int kWarmMs = 300;  // untimed runs before a shape's rounds (see (b) in main)

// Runs kern on tensors for at least `ms` milliseconds (untimed).
void run_for(const Kernel& kern, DeviceTensors& tensors, int ms) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(ms)) {
    for (int i = 0; i < 4; ++i)
      if (!tensors.forward(kern, nullptr)) return;  // the timed rounds report the error
    cudaDeviceSynchronize();
  }
}

// The round whose time is the median of a rung's rounds (the first failed one if any failed).
ladder::Row median_row(std::vector<ladder::Row> rounds) {
  for (const ladder::Row& r : rounds)
    if (r.status != "ok") return r;
  std::sort(rounds.begin(), rounds.end(),
            [](const ladder::Row& a, const ladder::Row& b) { return a.median_ms < b.median_ms; });
  return rounds[rounds.size() / 2];
}

struct ErrorRow {
  std::string rung, set;
  Problem p;
  float range;
  double rel_l2 = -1, max_abs = -1;
  std::string status = "ok";
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Module 09's 3xTF32 rung: accuracy and speed beside module 07's 3xTF32"};
  int iters = 10, seq = 0, rounds = 3;
  bool check_only = false;
  std::string json_path, inputs_dir;
  app.add_option("--inputs", inputs_dir,
                 "write the error table's inputs as .npy files with a manifest (for "
                 "scripts/compare_torch.py --errors)");
  app.add_option("--iters", iters, "timed runs per rung and round (median)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--rounds", rounds, "rounds per shape, each timing every rung once (median)")
      ->check(CLI::Range(1, 15));
  app.add_option("--seq", seq, "time only this N (batch = 16384 / N)")
      ->check(CLI::Range(64, 16384));
  app.add_option("--json", json_path, "write the checks and rows as JSON (schema attn-tf32-09/1)");
  app.add_flag("--check-only", check_only, "only the accuracy tables (a)");
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::printf("bench_09_tf32: skipped: no GPU (%s)\n", no_device_reason().c_str());
    return 0;
  }
  if (Status s = m09::check_device_and_build(); !s) {
    std::printf("bench_09_tf32: skipped: %s\n", s.message().c_str());
    return 0;
  }
  const DeviceInfo dev = query_device();
  std::cout << dev.summary() << "\n";

  const std::vector<ladder::Rung> rungs = {
      {"3xtf32_wgmma", nullptr, wgmma_3xtf32, kFp32Tolerance},
      {"3xtf32_wgmma_kpass", nullptr, wgmma_3xtf32_kpass, kFp32Tolerance},
      {"3xtf32_wgmma_kin", nullptr, wgmma_3xtf32_kin, kFp32Tolerance},
      {"3xtf32_wgmma_serial", nullptr, wgmma_3xtf32_serial, kFp32Tolerance},
      {"tf32_wgmma", nullptr, wgmma_tf32, m07::kTf32Tolerance},
      {"3xtf32_07", nullptr, mma_sync_3xtf32, kFp32Tolerance},
  };
  const Kernel split = as_kernel("split_pass", split_pass);

  // (a) Accuracy: the check on the odd shapes, then the error table.
  std::printf("\n(a) worst relative L2 error vs the double reference on %zu small shapes\n",
              check_shapes().size());
  std::vector<double> worst(rungs.size(), 0);
  bool failed = false;
  for (size_t i = 0; i < rungs.size(); ++i) {
    std::string status = "ok";
    const Kernel kern = ladder::as_kernel(9, supports_f32, rungs[i]);
    worst[i] = ladder::check_rung(kern, DType::f32, check_shapes(), status, rungs[i].tolerance);
    if (status != "ok") failed = true;
    std::printf("%-14s %10.2e (tolerance %.0e)  %s\n", rungs[i].name, worst[i],
                rungs[i].tolerance, status == "ok" ? "" : status.c_str());
  }
  std::printf("\nerror table: relative L2 error and largest absolute error on the inputs of "
              "bench_07 --dtype f32's table (bench/fp32_error_inputs.h)\n");
  std::vector<ErrorRow> errors;
  for (const fp32_errors::InputSet& set : fp32_errors::input_sets()) {
    const Inputs in = fp32_errors::inputs_of(set);
    const std::vector<double> want = reference_attention(set.p, in.q, in.k, in.v);
    std::printf("%-20s", set.name.c_str());
    for (const ladder::Rung& r : rungs) {
      ErrorRow e{r.name, set.name, set.p, set.range};
      const fp32_errors::SetError m =
          fp32_errors::error_on(ladder::as_kernel(9, supports_f32, r), set, in, want);
      e.rel_l2 = m.rel_l2;
      e.max_abs = m.max_abs;
      e.status = m.status;
      std::printf("  %s %.2e (max %.1e)", r.name, e.rel_l2, e.max_abs);
      errors.push_back(e);
    }
    std::printf("\n");
  }
  if (!inputs_dir.empty()) {
    std::filesystem::create_directories(inputs_dir);
    if (Status st = fp32_errors::write_input_sets(inputs_dir, "bench_09_tf32"); !st) {
      std::cerr << "error: " << st.message() << "\n";
      return 1;
    }
    std::cout << "wrote the error table's inputs to " << inputs_dir << "\n";
  }

  // (b) Speed.
  std::vector<ladder::Row> rows;
  if (!check_only) {
    std::printf("\n(b) per rung the median over %d rounds of the median of %d runs; the rounds "
                "interleave the rungs, after %d ms of untimed runs\n",
                rounds, iters, kWarmMs);
    std::vector<int> sizes;
    if (seq > 0) sizes = {seq};
    else
      for (int n = 512; n <= 16384; n *= 2) sizes.push_back(n);
    std::vector<Kernel> kernels;
    for (const ladder::Rung& r : rungs) kernels.push_back(ladder::as_kernel(9, supports_f32, r));
    kernels.push_back(split);
    for (int n : sizes)
      for (const Problem& p : ladder::shapes(n, DType::f32)) {
        DeviceTensors tensors(p, random_inputs(p, 99));
        std::printf("%-44s", p.describe().c_str());
        // A tensor-core kernel that runs long enough lowers the GPU's clock (power), so a rung
        // timed first after an idle moment runs faster than the same code timed later. Bring
        // the clocks to their loaded state first, then take each rung once per round.
        run_for(kernels[0], tensors, kWarmMs);
        std::vector<std::vector<ladder::Row>> per_rung(kernels.size());
        // Each round starts one rung later, so no rung is always timed first.
        for (int round = 0; round < rounds; ++round)
          for (size_t k = 0; k < kernels.size(); ++k) {
            const size_t i = (k + round) % kernels.size();
            const bool is_split = i == rungs.size();
            const double check = is_split ? 0 : worst[i];
            ladder::Row row{kernels[i].name, check >= 0 ? "ok" : "check failed", p, 0, 0, check};
            if (check >= 0) ladder::time_row(row, kernels[i], tensors, iters, !is_split);
            per_rung[i].push_back(row);
          }
        for (size_t i = 0; i < kernels.size(); ++i) {
          const ladder::Row row = median_row(per_rung[i]);
          if (i < rungs.size())
            std::printf(" | %s %8.3f ms %6.1f", row.rung.c_str(), row.median_ms, row.tflops);
          else
            std::printf(" | split %7.3f ms\n", row.median_ms);
          rows.push_back(row);
        }
      }
  }

  if (!json_path.empty()) {
    std::vector<json::Object> check_json, error_json, row_json;
    for (size_t i = 0; i < rungs.size(); ++i) {
      json::Object o;
      o.add("rung", rungs[i].name).add("worst_rel_l2", worst[i])
          .add("tolerance", rungs[i].tolerance).add("status", worst[i] >= 0 ? "ok" : "error");
      check_json.push_back(o);
    }
    for (const ErrorRow& e : errors) {
      json::Object o;
      o.add("rung", e.rung).add("inputs", e.set).add("shape", e.p.describe())
          .add("range", e.range).add("rel_l2", e.rel_l2).add("max_abs", e.max_abs)
          .add("status", e.status == "ok" ? "ok" : "error");
      error_json.push_back(o);
    }
    for (const ladder::Row& r : rows) row_json.push_back(ladder::row_json(r));
    json::Document doc("attn-tf32-09/1");
    doc.field("device", json::device(dev))
        .field("method", ladder::method_json(iters, static_cast<int>(check_shapes().size()))
                             .add("rounds", rounds)
                             .add("untimed_ms_before_rounds", kWarmMs)
                             .add("row", "the median round of the rung"))
        .list("checks", check_json)
        .list("errors", error_json)
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
