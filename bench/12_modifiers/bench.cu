// bench_12: what each modifier of module 12 costs. Every variant is first checked against the
// double reference with modifiers (common/modifiers.h) on an odd shape, then timed on the
// ladder shapes (bf16, B * N = 16k tokens, H * d = 2048) beside the same kernel without
// modifiers in the same run, on each engine (--engines): mma, module 07's kernel (the
// baseline module 07's forward()); wgmma, module 09's on Hopper (the baseline module 09's
// forward(); score modifiers, masks and RoPE with K turned by a pass before, not in the tiles):
//   score modifiers and RoPE: time / the baseline's time with the same mask (target <= 1.10
//     for the score modifiers, <= 1.05 for RoPE), and (module07_ms) over module 07's;
//   masks: time / (visible fraction x the baseline's unmasked time + one tile column of keys:
//     64 for mma; for wgmma m12::hopper_tile_keys: 128 or 160), the time a kernel that skips
//     masked tiles perfectly would take (target <= 1.10).
// RoPE's rows on mma also carry its K pass timed alone (k_pass_ms, k_pass_gbs: K read and
// written; the same pass runs before either kernel) beside a copy of K (copy_gbs, timed once
// per shape), both replayed from CUDA graphs (bench/replayed_timing.h).
// Writes one JSON file (--out) and prints a table.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/10_decoding/device_fill.cuh"
#include "bench/replayed_timing.h"
#include "common/buffers.h"
#include "common/compare.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/half.h"
#include "common/modifier_runner.h"
#include "common/modifiers.h"
#include "common/registry.h"
#include "common/problem.h"
#include "common/runner.h"
#include "common/timing.h"
#include "modules/07_tensor_cores/tensor_cores.h"
#include "modules/09_hopper/hopper.h"
#include "modules/12_modifiers/entry_points.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "solutions/12_modifiers/modifier_steps.cuh"

namespace {

using namespace attn;

void check_status(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

struct Variant {
  std::string name;
  ModifierSpec m;
  bool causal = false;
  bool is_mask = false;  // compared with the visible fraction, not with module 07
  bool rope_in_tiles = false;  // RoPE on every K tile in the kernel (RopeWhere::q_and_k)
};

std::vector<Variant> variants(int n) {
  std::vector<Variant> v;
  // No modifier, through forward_on: the hooks' own cost on each kernel (the classification of
  // each tile) beside the same kernel without them. (forward() itself runs it on module 09's
  // kernel with the hooks on Hopper, on module 07's own kernel elsewhere.)
  v.push_back({"no modifier", ModifierSpec{}, false});
  for (bool causal : {false, true}) {
    const std::string tag = causal ? " causal" : "";
    ModifierSpec m;
    m.score = ScoreMod::alibi;
    v.push_back({"alibi" + tag, m, causal});
    m = {};
    m.score = ScoreMod::bias;
    m.bias_per_head = false;  // one [seq_q, seq_k] bias for every head and batch entry
    v.push_back({"bias" + tag, m, causal});
    m = {};
    m.score = ScoreMod::softcap;
    m.softcap = 30.0f;
    v.push_back({"softcap" + tag, m, causal});
    m = {};
    m.score = ScoreMod::relative;
    v.push_back({"relative" + tag, m, causal});
    m = {};
    m.rope = RopeStyle::interleaved;
    v.push_back({"rope interleaved" + tag, m, causal});
    v.push_back({"rope interl. in tiles" + tag, m, causal, false, true});
    m.rope = RopeStyle::half;
    v.push_back({"rope half" + tag, m, causal});
    v.push_back({"rope half in tiles" + tag, m, causal, false, true});
  }
  for (int w : {256, 1024, 4096}) {
    if (w >= n) continue;
    ModifierSpec m;
    m.window = w;
    v.push_back({"window " + std::to_string(w), m, true, true});
  }
  ModifierSpec m;
  m.prefix = n / 4;
  v.push_back({"prefix N/4", m, true, true});
  m = {};
  m.documents = true;
  v.push_back({"documents x4", m, false, true});
  v.push_back({"documents x4 causal", m, true, true});
  m = {};
  v.push_back({"causal (07 rule)", m, true, true});
  return v;
}

// Four documents of equal length per batch entry: ids j / (n / 4).
void equal_documents(const Problem& p, ModifierInputs& mi) {
  mi.seg_q.resize(size_t(p.batch) * p.seq_q);
  mi.seg_k.resize(size_t(p.batch) * p.seq_k);
  const int len_q = (p.seq_q + 3) / 4, len_k = (p.seq_k + 3) / 4;
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.seq_q; ++i) mi.seg_q[size_t(b) * p.seq_q + i] = i / len_q;
    for (int j = 0; j < p.seq_k; ++j) mi.seg_k[size_t(b) * p.seq_k + j] = j / len_k;
  }
}

// Module 09's kernel runs score modifiers and masks, documents only without a score modifier,
// RoPE (K turned by the pass before) only without either.
bool runs_on_wgmma(const Variant& var) {
  if (var.rope_in_tiles) return false;
  if (var.m.rope != RopeStyle::none) return var.m.score == ScoreMod::none && !var.m.documents;
  return !var.m.documents || var.m.score == ScoreMod::none;
}

Status forward_on(m12::Engine e, const Variant& var, const Problem& p, const ModifierSpec& m,
                  const ModifierTensors& t, const void* q, const void* k, const void* v, void* o,
                  cudaStream_t s) {
  if (var.rope_in_tiles)
    return m12::forward<m12::solution::ModifierSteps, m12::RopeWhere::q_and_k>(p, m, t, q, k, v,
                                                                               o, s);
  return m12::solution::forward_on(e, p, m, t, q, k, v, o, s);
}

// The check of one variant on an odd shape: the solution against the double reference.
bool check_variant(const Variant& var, m12::Engine engine, int d, uint64_t seed, double* error) {
  Problem p = Problem::make(2, 4, 333, 333, d, var.causal, Layout::BSHD, 2);
  p.dtype = DType::bf16;
  ModifierSpec m = var.m;
  if (m.prefix > 0) m.prefix = 333 / 4;
  if (m.window > 0) m.window = std::min(m.window, 100);
  const Inputs in = random_inputs(p, seed);
  const ModifierInputs mi = random_modifier_inputs(p, m, seed + 1);
  const Kernel* registered = find_kernel(12, Impl::solution);
  if (!registered) throw std::runtime_error("module 12 is not registered");
  // The engine (and the in-tiles rung) through a copy of the registered entry with its own
  // forward.
  static Variant current;
  static m12::Engine current_engine;
  current = var;
  current_engine = engine;
  static const ModifierEntry chosen{
      registered->modifiers->supports,
      [](const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
         const void* k, const void* v, void* o, cudaStream_t s) {
        return forward_on(current_engine, current, p, m, t, q, k, v, o, s);
      }};
  Kernel kernel = *registered;
  kernel.modifiers = &chosen;
  const ModifierCheck r = check_modified(kernel, p, m, in, mi);
  if (!r.status) {
    std::printf("  %s d=%d refused: %s\n", var.name.c_str(), d, r.status.message().c_str());
    return false;
  }
  *error = r.comparison.rel_l2_error;
  return r.passed();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_12: module 12's modifiers beside module 07, checked then timed"};
  std::string out = "bench12.json";
  std::vector<int> seqs = {1024, 4096, 16384};
  std::vector<int> dims = {64, 128};
  std::vector<std::string> engines = {"mma", "wgmma"};
  std::vector<std::string> only;
  int warmup = 5, iters = 20;
  app.add_option("--out", out, "JSON output file");
  app.add_option("--variants", only, "only the variants whose name contains one of these");
  app.add_option("--seqs", seqs, "sequence lengths (B = 16384 / N)");
  app.add_option("--dims", dims, "head dims (H = 2048 / d)");
  app.add_option("--engines", engines, "mma (module 07's kernel), wgmma (module 09's, Hopper)")
      ->check(CLI::IsMember({"mma", "wgmma"}));
  app.add_option("--warmup", warmup);
  app.add_option("--iters", iters);
  CLI11_PARSE(app, argc, argv);
  try {
    const DeviceInfo info = query_device();
    std::printf("device: %s\n", info.name.c_str());
    const auto engine_of = [](const std::string& e) {
      return e == "wgmma" ? m12::Engine::wgmma : m12::Engine::mma;
    };
    // Module 09's kernel needs a Hopper GPU and a build with sm_90a code: elsewhere, module
    // 07's kernel alone.
    if (const Status hopper = m09::check_device_and_build(); !hopper) {
      const auto wgmma = std::find(engines.begin(), engines.end(), "wgmma");
      if (wgmma != engines.end()) {
        std::printf("engine wgmma skipped: %s\n", hopper.message().c_str());
        engines.erase(wgmma);
      }
    }
    const auto chosen = [&](const Variant& var) {
      return only.empty() || std::any_of(only.begin(), only.end(), [&](const std::string& w) {
               return var.name.find(w) != std::string::npos;
             });
    };
    // Checks first: a variant that fails is not timed.
    bool all_ok = true;
    for (const std::string& e : engines)
      for (int d : dims)
        for (const Variant& var : variants(4096)) {
          if ((e == "wgmma" && !runs_on_wgmma(var)) || !chosen(var)) continue;
          double err = 0;
          const bool ok = check_variant(var, engine_of(e), d, 12345, &err);
          std::printf("check %-5s %-22s d=%-3d %s (rel L2 %.2e)\n", e.c_str(), var.name.c_str(),
                      d, ok ? "PASS" : "FAIL", err);
          all_ok = all_ok && ok;
        }
    std::ofstream json(out);
    json << "{\"device\": \"" << info.name << "\", \"checks_passed\": " << (all_ok ? "true" : "false")
         << ", \"records\": [\n";
    bool first_record = true;
    std::printf("\n%-5s %-22s %4s %6s %10s %10s %8s %8s %8s\n", "eng.", "variant", "d", "N", "ms",
                "base ms", "ratio", "/ 07", "TFLOP/s");
    for (const std::string& engine : engines)
    for (int d : dims)
      for (int n : seqs) {
        const bool wgmma = engine == "wgmma";
        const int batch = std::max(1, 16384 / n), heads = 2048 / d;
        Problem base = Problem::make(batch, heads, n, n, d, false, Layout::BHSD);
        base.dtype = DType::bf16;
        DeviceBuffer<uint16_t> q(base.q_elements()), k(base.kv_elements()), v(base.kv_elements()),
            o(base.o_elements());
        bench10::fill_random(q.get(), q.size(), 1, base.dtype);
        bench10::fill_random(k.get(), k.size(), 2, base.dtype);
        bench10::fill_random(v.get(), v.size(), 3, base.dtype);
        // The kernel without modifiers: module 07's, or module 09's for the wgmma engine.
        auto time_plain = [&](bool causal, bool module09) {
          Problem p = base;
          p.causal = causal;
          return time_on_stream(
                     [&](cudaStream_t s) {
                       check_status(module09 ? m09::solution::forward(p, q.get(), k.get(),
                                                                      v.get(), o.get(), s)
                                             : m07::solution::forward(p, q.get(), k.get(),
                                                                      v.get(), o.get(), s));
                     },
                     warmup, iters)
              .median_ms;
        };
        // One tile column of keys of the kernel that runs the mask (the masks' allowance).
        const auto tile_keys = [&](const Problem& p, const Variant& var) {
          return wgmma ? double(m12::hopper_tile_keys(p, var.m)) : 64.0;
        };
        // The baseline is timed again next to each variant (with the variant's mask, and
        // unmasked for the masks' baseline): clocks and temperature drift over a run by a few
        // percent, more than some of the costs measured here.
        double t_base[2] = {0, 0}, t07 = 0;
        double copy_ms = 0;  // a copy of K, RoPE's ceiling for its K pass (once per shape)
        DeviceBuffer<uint16_t> k_rot;  // the K pass's output, allocated once per shape
        for (const Variant& var : variants(n)) {
          if ((wgmma && !runs_on_wgmma(var)) || !chosen(var)) continue;
          Problem p = base;
          p.causal = var.causal;
          ModifierSpec m = var.m;
          ModifierInputs mi;
          if (m.score == ScoreMod::relative) mi = random_modifier_inputs(p, m, 7);
          if (m.documents) equal_documents(p, mi);
          // The bias ([1, 1, N, N]: up to 512 MB) is filled on the device, not from mi.
          ModifierSpec no_bias = m;
          if (m.score == ScoreMod::bias) no_bias.score = ScoreMod::none;
          ModifierBuffers mods(p, no_bias, mi);
          if (m.score == ScoreMod::bias) {
            DeviceBuffer<uint16_t> bias(bias_elements(p, m));
            bench10::fill_random(bias.get(), bias.size(), 4, p.dtype);
            mods.use_device_bias(p, m, std::move(bias));
          }
          const double ms =
              time_on_stream(
                  [&](cudaStream_t s) {
                    check_status(forward_on(engine_of(engine), var, p, m, mods.tensors(), q.get(),
                                            k.get(), v.get(), o.get(), s));
                  },
                  warmup, iters)
                  .median_ms;
          t_base[0] = time_plain(false, wgmma);
          if (var.causal) t_base[1] = time_plain(true, wgmma);
          t07 = wgmma ? time_plain(var.causal, false) : t_base[var.causal ? 1 : 0];
          const int64_t pairs = visible_pairs(p, m, mi);
          const double flops = 4.0 * double(pairs) * d * heads;
          double predicted_ms;
          if (var.is_mask) {  // against a perfect skip: visible fraction of the full time
            const double fraction = double(pairs) / (double(batch) * n * n);
            predicted_ms = t_base[0] * (fraction + tile_keys(p, var) / n);
          } else {
            predicted_ms = t_base[var.causal ? 1 : 0];
          }
          const double ratio = ms / predicted_ms;
          // RoPE with K turned once per call: the K pass alone (read K, write it turned), the
          // part of the cost that does not shrink with the attention's work. It takes tens of
          // microseconds, about what a launch takes on the host: replayed from a graph.
          // Its ceiling: a device-to-device copy of K, timed the same way.
          double k_pass_ms = 0;
          if (!wgmma && m.rope != RopeStyle::none && !var.rope_in_tiles) {
            using Steps = m12::solution::ModifierSteps;
            if (k_rot.size() == 0) k_rot = DeviceBuffer<uint16_t>(p.kv_elements());
            k_pass_ms = time_replayed(
                            [&](cudaStream_t s) {
                              check_status(m12::rotate_keys<Steps>(p, m.rope, m.rope_base,
                                                                   k.get(), k_rot.get(), s));
                            },
                            10, warmup, iters)
                            .median_ms;
            if (copy_ms == 0)
              copy_ms = time_replayed(
                            [&](cudaStream_t s) {
                              ATTN_CUDA_CHECK(cudaMemcpyAsync(k_rot.get(), k.get(), k.size() * 2,
                                                              cudaMemcpyDeviceToDevice, s));
                            },
                            10, warmup, iters)
                            .median_ms;
          }
          std::printf("%-5s %-22s %4d %6d %10.4f %10.4f %8.3f %8.3f %8.1f\n", engine.c_str(),
                      var.name.c_str(), d, n, ms, predicted_ms, ratio, ms / t07,
                      flops / ms * 1e-9);
          json << (first_record ? "" : ",\n") << "  {\"engine\": \"" << engine
               << "\", \"variant\": \"" << var.name
               << "\", \"modifiers\": \"" << m.describe() << "\", \"causal\": "
               << (var.causal ? "true" : "false") << ", \"mask\": "
               << (var.is_mask ? "true" : "false") << ", \"head_dim\": " << d
               << ", \"seq\": " << n << ", \"batch\": " << batch << ", \"heads\": " << heads
               << ", \"ms\": " << ms << ", \"baseline_ms\": " << predicted_ms
               << ", \"plain_ms\": " << t_base[var.causal ? 1 : 0]
               << ", \"plain_full_ms\": " << t_base[0] << ", \"module07_ms\": " << t07
               << ", \"ratio\": " << ratio << ", \"visible_pairs\": " << pairs
               << ", \"tflops\": " << flops / ms * 1e-9;
          if (k_pass_ms > 0) {
            const double bytes = 2.0 * double(p.kv_elements()) * 2;  // K read and written
            std::printf("      K pass alone %.4f ms, %.0f GB/s (a copy of K: %.0f GB/s)\n",
                        k_pass_ms, bytes / k_pass_ms * 1e-6, bytes / copy_ms * 1e-6);
            json << ", \"k_pass_ms\": " << k_pass_ms << ", \"k_pass_gbs\": "
                 << bytes / k_pass_ms * 1e-6 << ", \"copy_gbs\": " << bytes / copy_ms * 1e-6;
          }
          json << "}";
          first_record = false;
        }
      }
    json << "\n]}\n";
    std::printf("\nwrote %s; checks %s\n", out.c_str(), all_ok ? "all passed" : "FAILED");
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_12: %s\n", e.what());
    return 1;
  }
}
