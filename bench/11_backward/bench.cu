// bench_11: module 11's backward beside its forward. The solution's kernels are first checked
// against the double reference of common/backward.h (odd shapes), then timed on the ladder
// shapes (bf16, B * N = 16k tokens, H * d = 2048, causal and not):
//   fwd      the forward with its log-sum-exp (module 07's kernel with the SaveLse hook);
//   bwd      the backward alone (row preparation, the kernel(s), dQ's store), scratch included;
//   fwd+bwd  both, as a training step runs them.
// Rungs: wgmma (Hopper's warpgroup MMA, a producer warpgroup loading the tiles with TMA, dQ
// added by bulk reductions), wgmma_cp_async (the same products without the producer: all
// threads copy with cp.async, a block-wide barrier per step), wgmma_atomics (the latter with dQ
// added by float2 atomics), wgmma_keys (at D = 128, dQ split by keys between
// the warpgroups instead of by columns), mma_sync (the FlashAttention-2 backward of
// backward_kernel.cuh, any GPU from sm_80), keys64 and two_blocks (its neighbouring
// configurations), rows (the readable kernels; short sequences only: slow). Each record says
// whether it is the kernel the module's entry runs for the shape ("picked": fastest_path).
// FLOPs: the forward 4 B H (visible pairs) d; the backward 2.5x that (five products of the
// same size as the forward's two, one of them, S, a recomputation: 5 / 2 = 2.5, the
// convention of the FlashAttention papers); fwd+bwd 3.5x.
// Writes one JSON file (--out) and prints a table; scripts/compare_torch_backward.py times
// PyTorch's backends on the same shapes.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/10_decoding/device_fill.cuh"
#include "common/backward.h"
#include "common/backward_runner.h"
#include "common/bench_json.h"
#include "common/buffers.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/timing.h"
#include "modules/11_backward/entry_points.cuh"
#include "solutions/11_backward/backward_steps.cuh"

namespace {

using namespace attn;
using Steps = m11::solution::BackwardSteps;

void check_status(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

// The rungs as backward entries, so that the runner checks them like any module (the module's
// own entry runs the fastest kernel for the shape, Path::fastest). H64, H128: the wgmma
// kernel's configurations (dQ by bulk reductions, or by atomics).
template <m11::Path kPath, class H64 = m11::HopperBwdConfig<64>,
          class H128 = m11::HopperBwdConfig<128>>
Status backward_on(const Problem& p, const void* q, const void* k, const void* v,
                   const void* o, const void* dout, const float* lse, void* dq, void* dk,
                   void* dv, cudaStream_t stream) {
  return m11::backward<Steps, m11::Production64, m11::Production128, H64, H128>(
      p, q, k, v, o, dout, lse, dq, dk, dv, stream, kPath);
}
const BackwardEntry rows_entry{m11::forward_lse<Steps>, backward_on<m11::Path::rows>};
const BackwardEntry mma_sync_entry{m11::forward_lse<Steps>, backward_on<m11::Path::tensor_cores>};
const BackwardEntry wgmma_entry{m11::forward_lse<Steps>, backward_on<m11::Path::hopper>};
// The wgmma kernel's other forms: dQ by float2 atomics, and at D = 128 dQ split by keys
// between the warpgroups (no block-wide barrier) instead of by columns.
using KeysD128 = m11::HopperBwdConfig<128, true, false>;
const BackwardEntry wgmma_atomics_entry{
    m11::forward_lse<Steps>, backward_on<m11::Path::hopper, m11::HopperBwdConfig<64, false>,
                                         m11::HopperBwdConfig<128, false>>};
const BackwardEntry wgmma_cp_async_entry{
    m11::forward_lse<Steps>,
    backward_on<m11::Path::hopper, m11::HopperBwdConfig<64, true, false, false>,
                m11::HopperBwdConfig<128, true, true, false>>};
const BackwardEntry wgmma_keys_entry{
    m11::forward_lse<Steps>,
    backward_on<m11::Path::hopper, m11::HopperBwdConfig<64>, KeysD128>};

// Worst relative L2 error over O, dQ, dK, dV; -1 when a check fails.
double check(const Kernel& kern, const Problem& p) {
  const BackwardCheck r = check_backward(kern, p, random_backward_inputs(p, 11 + p.seq_q));
  if (!r.passed()) {
    std::printf("  FAIL %s: %s | dQ %s | dK %s | dV %s\n", p.describe().c_str(),
                r.status.message().c_str(), r.dq.summary().c_str(), r.dk.summary().c_str(),
                r.dv.summary().c_str());
    return -1;
  }
  return std::max({r.o.rel_l2_error, r.dq.rel_l2_error, r.dk.rel_l2_error, r.dv.rel_l2_error});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_11: module 11's forward and backward, checked then timed"};
  std::string out = "bench11.json";
  std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> dims = {64, 128};
  std::vector<std::string> only;
  int rows_max_seq = 1024, warmup = 3, iters = 10;
  app.add_option("--out", out, "JSON output file");
  app.add_option("--seqs", seqs, "sequence lengths (B = 16384 / N)")->delimiter(',');
  app.add_option("--dims", dims, "head dims (H = 2048 / d)")->delimiter(',');
  app.add_option("--rows-max-seq", rows_max_seq, "longest N the rows rung is timed at");
  app.add_option("--rungs", only, "time only these rungs (default: all)")->delimiter(',');
  app.add_option("--warmup", warmup);
  app.add_option("--iters", iters);
  CLI11_PARSE(app, argc, argv);
  try {
    const DeviceInfo info = query_device();
    std::printf("device: %s\n", info.name.c_str());
    const Kernel* solution = find_kernel(11, Impl::solution);
    if (!solution || !solution->backward) throw std::runtime_error("module 11 is not linked in");
    Kernel rows = *solution, mma_sync = *solution, wgmma = *solution, wgmma_cp_async = *solution,
           wgmma_atomics = *solution, wgmma_keys = *solution;
    rows.backward = &rows_entry;
    mma_sync.backward = &mma_sync_entry;
    wgmma.backward = &wgmma_entry;
    wgmma_cp_async.backward = &wgmma_cp_async_entry;
    wgmma_atomics.backward = &wgmma_atomics_entry;
    wgmma_keys.backward = &wgmma_keys_entry;
    bool all_ok = true;
    std::vector<json::Object> checks;
    std::set<std::string> failed;  // rungs that failed a check: not timed
    std::vector<std::pair<const char*, const Kernel*>> checked = {
        {"module", solution}, {"mma_sync", &mma_sync}, {"rows", &rows}};
    if (m11::hopper_available())
      checked.insert(checked.begin() + 1, {{"wgmma", &wgmma}, {"wgmma_cp_async", &wgmma_cp_async},
                                           {"wgmma_atomics", &wgmma_atomics},
                                           {"wgmma_keys", &wgmma_keys}});
    for (const auto& [name, kern] : checked)
      for (DType t : {DType::bf16, DType::f16})
        for (Problem p : {Problem::make(2, 4, 1000, 333, 128, true, Layout::BSHD, 2),
                          Problem::make(1, 3, 65, 1000, 64, false), Problem::make(1, 2, 300, 17, 80, true)}) {
          p.dtype = t;
          const double err = check(*kern, p);
          std::printf("check %-13s %-48s %s (worst rel L2 %.2e)\n", name, p.describe().c_str(),
                      err >= 0 ? "PASS" : "FAIL", err);
          all_ok = all_ok && err >= 0;
          if (err < 0) failed.insert(name);
          checks.push_back(json::Object().add("rung", name).add("problem", p.describe())
                               .add("passed", err >= 0).add("worst_rel_l2", err));
        }

    std::vector<json::Object> records;
    std::printf("\n%-13s %3s %6s %6s %9s %9s %9s %8s %8s %8s\n", "rung", "d", "N", "causal",
                "fwd ms", "bwd ms", "f+b ms", "fwd TF", "bwd TF", "f+b TF");
    for (int d : dims)
      for (int n : seqs)
        for (bool causal : {false, true}) {
          Problem p = Problem::make(std::max(1, 16384 / n), 2048 / d, n, n, d, causal);
          p.dtype = DType::bf16;
          DeviceBuffer<uint16_t> q(p.q_elements()), k(p.kv_elements()), v(p.kv_elements()),
              o(p.o_elements()), dout(p.o_elements()), dq(p.q_elements()), dk(p.kv_elements()),
              dv(p.kv_elements());
          DeviceBuffer<float> lse(int64_t(p.batch) * p.heads * p.seq_q);
          bench10::fill_random(q.get(), q.size(), 1, p.dtype);
          bench10::fill_random(k.get(), k.size(), 2, p.dtype);
          bench10::fill_random(v.get(), v.size(), 3, p.dtype);
          bench10::fill_random(dout.get(), dout.size(), 4, p.dtype);
          const double fwd_flops = 4.0 * double(p.batch) * p.heads * double(p.visible_pairs()) * d;
          auto fwd = [&](cudaStream_t s) {
            check_status(m11::forward_lse<Steps>(p, q.get(), k.get(), v.get(), o.get(), lse.get(), s));
          };
          // The rungs: the wgmma kernel (Hopper), the mma.sync kernel and two of its
          // neighbours (64 keys per block; at D = 64 two blocks per SM with 128 registers a
          // thread), the readable kernels.
          using m11::BwdConfig;
          using Keys64 = std::pair<BwdConfig<64, 64, 64, 2>, BwdConfig<128, 64, 64, 2>>;
          using TwoBlocks = std::pair<BwdConfig<64, 128, 64, 2>, m11::Production128>;
          std::vector<std::string> rungs = {"mma_sync", "keys64", "two_blocks", "rows"};
          if (m11::hopper_available())
            rungs.insert(rungs.begin(), {"wgmma", "wgmma_cp_async", "wgmma_atomics", "wgmma_keys"});
          for (const std::string& rung : rungs) {
            if (!only.empty() && std::find(only.begin(), only.end(), rung) == only.end()) continue;
            if (failed.count(rung)) continue;
            if (rung == "rows" && n > rows_max_seq) continue;
            if (rung == "two_blocks" && d != 64) continue;
            if (rung == "wgmma_keys" && d != 128) continue;  // D = 64 splits dQ by keys
            if ((rung == "keys64" || rung == "two_blocks") && n != 4096 && n != 16384) continue;
            const m11::Path path = rung == "rows"                 ? m11::Path::rows
                                   : rung.rfind("wgmma", 0) == 0 ? m11::Path::hopper
                                                                  : m11::Path::tensor_cores;
            // The wgmma kernel's other forms run through their checked entries.
            const BackwardEntry* entry = rung == "wgmma_cp_async"  ? &wgmma_cp_async_entry
                                         : rung == "wgmma_atomics" ? &wgmma_atomics_entry
                                         : rung == "wgmma_keys"  ? &wgmma_keys_entry
                                                                 : nullptr;
            auto bwd = [&](cudaStream_t s) {
              auto args = std::make_tuple(p, q.get(), k.get(), v.get(), o.get(), dout.get(),
                                          lse.get(), dq.get(), dk.get(), dv.get(), s, path);
              if (entry) {
                check_status(entry->backward(p, q.get(), k.get(), v.get(), o.get(), dout.get(),
                                             lse.get(), dq.get(), dk.get(), dv.get(), s));
                return;
              }
              if (rung == "keys64")
                check_status(std::apply(m11::backward<Steps, Keys64::first_type, Keys64::second_type>, args));
              else if (rung == "two_blocks")
                check_status(std::apply(m11::backward<Steps, TwoBlocks::first_type, TwoBlocks::second_type>, args));
              else
                check_status(std::apply(m11::backward<Steps>, args));
            };
            const int it = path == m11::Path::rows ? 3 : iters;
            const int wu = path == m11::Path::rows ? 1 : warmup;
            const double fwd_ms = time_on_stream(fwd, wu, it).median_ms;
            const double bwd_ms = time_on_stream(bwd, wu, it).median_ms;
            const double both_ms =
                time_on_stream([&](cudaStream_t s) { fwd(s), bwd(s); }, wu, it).median_ms;
            const double tf[3] = {fwd_flops / fwd_ms * 1e-9, 2.5 * fwd_flops / bwd_ms * 1e-9,
                                  3.5 * fwd_flops / both_ms * 1e-9};
            std::printf("%-13s %3d %6d %6s %9.4f %9.4f %9.4f %8.1f %8.1f %8.1f\n", rung.c_str(), d, n,
                        causal ? "yes" : "no", fwd_ms, bwd_ms, both_ms, tf[0], tf[1], tf[2]);
            records.push_back(json::Object()
                                  .add("rung", rung).add("seq", n).add("head_dim", d)
                                  .add("heads", p.heads).add("batch", p.batch).add("causal", causal)
                                  .add("fwd_ms", fwd_ms).add("bwd_ms", bwd_ms)
                                  .add("fwd_bwd_ms", both_ms).add("fwd_tflops", tf[0])
                                  .add("bwd_tflops", tf[1]).add("fwd_bwd_tflops", tf[2])
                                  // the kernel the module's own entry (Path::fastest) runs here
                                  .add("picked", rung != "keys64" && rung != "two_blocks" &&
                                                     entry == nullptr &&
                                                     path == m11::fastest_path(p)));
          }
        }
    json::Document doc("attn.bench11.v1");
    doc.field("device", json::device(info))
        .field("created", "\"" + json::utc_now() + "\"")
        .field("checks_passed", all_ok ? "true" : "false")
        .field("flops", "\"forward 4*B*H*visible_pairs*d; backward 2.5x; fwd+bwd 3.5x\"")
        .list("checks", checks)
        .list("records", records);
    check_status(doc.write(out));
    std::printf("\nwrote %s; checks %s\n", out.c_str(), all_ok ? "all passed" : "FAILED");
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_11: %s\n", e.what());
    return 1;
  }
}
