// Module 09 benchmark (program bench_09): the README's ladder, one rung per row, measured on
// the same shapes in one run. Every rung is first checked against the double reference on
// small odd shapes (its "check" column is the worst relative L2 error), then timed.
//
//   bench_09 [--quick | --seq N] [--rungs a,b] [--json ladder.json] [--iters 10] [--dtype bf16]
//   bench_09 --timeline timeline.json   one block's consumers, serial and ping-pong (clock64)
//   bench_09 --hang-check               a broken barrier protocol must report, not hang
//
// Rungs (README, section 5), each a Config<head_dim, keys per tile, consumer warpgroups,
// schedule, ring slots, persistent, heads first> of modules/09_hopper/hopper_kernel.cuh with
// the solution's steps:
//   serial           wgmma + TMA + a producer warpgroup and two consumers; each consumer waits
//                    for S, does the softmax, then issues P V and waits for it; one block per
//                    work tile, the work tiles ordered heads first
//   overlap          + S of the next tile issued with P V of this one; softmax under P V
//   pingpong         + the two consumers take turns to issue their products
//   qblocks_first    + the work tiles ordered query blocks first (K and V reused from L2)
//   persistent       + one block per SM walks the work tiles
//   three_wg_n176    persistent; d = 64: three consumer warpgroups, d = 128: 176-key tiles
//   three_wg_n192    one block per work tile; d = 64: three consumers, d = 128: 192-key tiles
//   n192_heads_first three_wg_n192 with the work tiles ordered heads first
//   stages3          persistent with three ring slots (d = 64: three consumers)
//   early_q          persistent, O staged in its own tile so that Q is released early
//   dynamic          early_q with the dynamic tile scheduler, work tiles heads first
//   dynamic_qblocks  the same, query blocks first
//   dynamic_qblocks_2wg  the same; d = 64 with two consumers, d = 128 with O in Q's rows
//   n160_dynamic     dynamic_qblocks; d = 128 with 160-key tiles
//   forward          the solution's forward(): its production configurations
// Shapes: 16k tokens (batch = 16384 / N), d = 64 with H = 32 and d = 128 with H = 16, causal
// and not, N = 8192 (--quick: N = 2048). Timing: CUDA events, 2 runs untimed, then the
// median of --iters runs (common/timing.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/ladder.h"
#include "common/bench_json.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"

// The solution's steps, instantiated here with the ladder's configurations. The build
// compiles this program with ATTN_IMPL=ladder, so its kernels are apart from the solution's
// own, whose forward() is linked in from m09_solution and declared below.
#include "modules/09_hopper/hopper.h"
#include "solutions/09_hopper/hopper_steps.cuh"

namespace attn::m09::solution {
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);
}

namespace {

using namespace attn;
using m09::Config;
using m09::Schedule;

template <class C64, class C128>
Status run_rung(const Problem& p, const void* q, const void* k, const void* v, void* o,
                cudaStream_t stream) {
  if (Status s = m09::supports(p); !s) return s;
  return m09::launch_with<m09::ladder::HopperSteps, C64, C128>(p, q, k, v, o, stream);
}

Status run_forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
                   cudaStream_t stream) {
  return m09::solution::forward(p, q, k, v, o, stream);
}

using ladder::Rung;

constexpr Schedule kSerial = Schedule::serial, kOverlap = Schedule::overlap,
                   kPingpong = Schedule::pingpong;
constexpr bool kOneTilePerBlock = false, kPersistentGrid = true, kHeadsFirst = true;
const Rung kRungs[] = {
    // The ladder: one block per work tile, 128-key tiles, two consumers, heads first.
    {"serial", run_rung<Config<64, 128, 2, kSerial, 2, kOneTilePerBlock, kHeadsFirst>,
                        Config<128, 128, 2, kSerial, 2, kOneTilePerBlock, kHeadsFirst>>},
    {"overlap", run_rung<Config<64, 128, 2, kOverlap, 2, kOneTilePerBlock, kHeadsFirst>,
                         Config<128, 128, 2, kOverlap, 2, kOneTilePerBlock, kHeadsFirst>>},
    {"pingpong", run_rung<Config<64, 128, 2, kPingpong, 2, kOneTilePerBlock, kHeadsFirst>,
                          Config<128, 128, 2, kPingpong, 2, kOneTilePerBlock, kHeadsFirst>>},
    {"qblocks_first", run_rung<Config<64, 128, 2, kPingpong, 2, kOneTilePerBlock>,
                               Config<128, 128, 2, kPingpong, 2, kOneTilePerBlock>>},
    {"persistent", run_rung<Config<64, 128, 2, kPingpong>, Config<128, 128, 2, kPingpong>>},
    // Tile shapes: three consumers at d = 64, wider K/V tiles at d = 128.
    {"three_wg_n176", run_rung<Config<64, 128, 3, kPingpong>, Config<128, 176, 2, kPingpong>>},
    {"three_wg_n192", run_rung<Config<64, 128, 3, kPingpong, 2, kOneTilePerBlock>,
                               Config<128, 192, 2, kPingpong, 2, kOneTilePerBlock>>},
    {"n192_heads_first", run_rung<Config<64, 128, 3, kPingpong, 2, kOneTilePerBlock, kHeadsFirst>,
                                  Config<128, 192, 2, kPingpong, 2, kOneTilePerBlock, kHeadsFirst>>},
    {"stages3", run_rung<Config<64, 128, 3, kPingpong, 3>, Config<128, 128, 2, kPingpong, 3>>},
    // Persistent, with O staged in its own tile: Q is released after the last S = Q K^T of a
    // work tile, so the next work tile's Q loads while this one finishes.
    {"early_q", run_rung<Config<64, 128, 3, kPingpong, 3, kPersistentGrid, false, false, true>,
                         Config<128, 128, 2, kPingpong, 2, kPersistentGrid, false, false, true>>},
    // Persistent with the dynamic tile scheduler: each block draws its next work tile from a
    // global counter; heads first, so with the causal mask the longest tiles are drawn first.
    {"dynamic", run_rung<Config<64, 128, 3, kPingpong, 3, kPersistentGrid, kHeadsFirst, false,
                                true, true>,
                         Config<128, 128, 2, kPingpong, 2, kPersistentGrid, kHeadsFirst, false,
                                true, true>>},
    {"dynamic_qblocks", run_rung<Config<64, 128, 3, kPingpong, 3, kPersistentGrid, false, false,
                                        true, true>,
                                 Config<128, 128, 2, kPingpong, 2, kPersistentGrid, false, false,
                                        true, true>>},
    // dynamic_qblocks with two consumers at d = 64 (128-row work tiles waste less of the
    // causal diagonal than 192-row ones); d = 128 without the separate O tile.
    {"dynamic_qblocks_2wg", run_rung<Config<64, 128, 2, kPingpong, 2, kPersistentGrid, false,
                                            false, true, true>,
                                     Config<128, 128, 2, kPingpong, 2, kPersistentGrid, false,
                                            false, false, true>>},
    // d = 128 with 160-key tiles, the widest that fit in shared memory beside a separate O
    // tile (4 x 40 KB of K/V + 2 x 32 KB); d = 64 as dynamic_qblocks.
    {"n160_dynamic", run_rung<Config<64, 128, 3, kPingpong, 3, kPersistentGrid, false, false,
                                     true, true>,
                              Config<128, 160, 2, kPingpong, 2, kPersistentGrid, false, false,
                                     true, true>>},
    {"forward", run_forward},
};

// A deliberately broken protocol for --hang-check: the K tile's full barrier is told to expect
// 16 bytes more than the copies bring, so it never completes and the consumers' wait on it must
// give up and report (hopper_ptx.cuh, mbarrier_wait).
struct WrongByteCountSteps : m09::ladder::HopperSteps {
  template <class Plan>
  __device__ static void load_kv_tile(const Plan& plan, const CUtensorMap* k_map,
                                      const CUtensorMap* v_map, m09::RingPosition ring,
                                      int first_key, int kv_head, int batch) {
    using C = typename Plan::Config;
    fill_slot(plan, m09::k_empty, m09::k_full, plan.k(ring.slot), k_map, ring, first_key,
              kv_head, batch, C::kKVBytes + 16);
    (void)v_map;
  }
};

Status run_wrong_byte_count(const Problem& p, const void* q, const void* k, const void* v,
                            void* o, cudaStream_t stream) {
  if (Status s = m09::supports(p); !s) return s;
  return m09::launch<WrongByteCountSteps>(p, q, k, v, o, stream);
}

// Runs the broken protocol once and reports what the kernel said and how long it took.
int hang_check() {
  Problem p = Problem::make(1, 2, 300, 300, 64);
  p.dtype = DType::bf16;
  const Kernel kern{9, "wrong_byte_count", "", Backend::gpu, Impl::solution, m09::supports,
                    nullptr, run_wrong_byte_count};
  const auto start = std::chrono::steady_clock::now();
  const CheckResult r = check_kernel(kern, p, random_inputs(p, 5));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string report = m09::hang_report();
  std::printf("hang check: %.1f s, output %s, report: %s\n", seconds,
              r.passed() ? "PASSED (unexpected)" : "wrong (expected)",
              report.empty() ? "(none)" : report.c_str());
  const cudaError_t after = cudaDeviceSynchronize();
  std::printf("hang check: device afterwards: %s\n", cudaGetErrorString(after));
  return !report.empty() && !r.passed() && after == cudaSuccess ? 0 : 1;
}

// ---- --timeline: when each consumer of one block issues, waits and computes ---------------

long long* g_timeline = nullptr;  // device buffer the timeline configurations write to

template <class C>
Status run_recording(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream) {
  if (Status s = m09::supports(p); !s) return s;
  if (Status s = m09::check_device_and_build(); !s) return s;
  return p.dtype == DType::bf16
             ? m09::launch_config<C, m09::ladder::HopperSteps, true, false>(p, q, k, v, o, stream,
                                                                            g_timeline)
             : m09::launch_config<C, m09::ladder::HopperSteps, false, false>(p, q, k, v, o,
                                                                             stream, g_timeline);
}

// Runs the serial and the ping-pong schedule (d = 128, 128-key tiles, one block per work tile)
// on one shape, records block 0 (a full row of key tiles) and writes the stamps as JSON:
// {"schedules": [{"name", "steps": [[consumer, step, issue, s_ready, softmax, pv_done], ...]}]}
// with clock64() cycles relative to the earliest stamp of that schedule.
int write_timeline(const std::string& path) {
  constexpr bool kRecord = true, kBlockPerTile = false, kQueryBlocksFirst = false;
  using Serial = Config<128, 128, 2, Schedule::serial, 2, kBlockPerTile, kQueryBlocksFirst, kRecord>;
  using Pingpong =
      Config<128, 128, 2, Schedule::pingpong, 2, kBlockPerTile, kQueryBlocksFirst, kRecord>;
  const std::pair<const char*, Forward16Fn> schedules[] = {{"serial", run_recording<Serial>},
                                                           {"pingpong", run_recording<Pingpong>}};
  Problem p = Problem::make(2, 16, 8192, 8192, 128);
  p.dtype = DType::bf16;
  const int count = 2 * m09::kTimelineSteps * m09::kTimelineEvents;
  if (cudaMalloc(&g_timeline, count * sizeof(long long)) != cudaSuccess) return 1;
  std::vector<json::Object> out;
  for (const auto& [name, fn] : schedules) {
    const Kernel kern{9, name, "", Backend::gpu, Impl::solution, m09::supports, nullptr, fn};
    DeviceTensors tensors(p, random_inputs(p, 99));
    for (int run = 0; run < 3; ++run) {  // the last of three runs is recorded (warm caches)
      cudaMemset(g_timeline, 0, count * sizeof(long long));
      if (Status st = tensors.forward(kern, nullptr); !st) {
        std::cerr << "error: " << st.message() << "\n";
        return 1;
      }
    }
    std::vector<long long> stamps(count);
    cudaMemcpy(stamps.data(), g_timeline, count * sizeof(long long), cudaMemcpyDeviceToHost);
    long long first = 0;
    for (long long t : stamps)
      if (t != 0 && (first == 0 || t < first)) first = t;
    std::vector<std::string> steps;
    for (int c = 0; c < 2; ++c)
      for (int j = 0; j < m09::kTimelineSteps; ++j) {
        const long long* e = &stamps[(c * m09::kTimelineSteps + j) * m09::kTimelineEvents];
        if (e[0] == 0) continue;
        steps.push_back("[" + std::to_string(c) + ", " + std::to_string(j) + ", " +
                        std::to_string(e[0] - first) + ", " + std::to_string(e[1] - first) +
                        ", " + std::to_string(e[2] - first) + ", " +
                        std::to_string(e[3] - first) + "]");
      }
    json::Object o;
    o.add("name", name).add("shape", p.describe()).add("block", 0);
    o.add_raw("steps", "[" + [&] {
      std::string joined;
      for (size_t i = 0; i < steps.size(); ++i) joined += (i ? ", " : "") + steps[i];
      return joined;
    }() + "]");
    out.push_back(o);
    std::printf("timeline %-9s %zu steps recorded\n", name, steps.size());
  }
  cudaFree(g_timeline);
  json::Document doc("attn-timeline09/1");
  doc.field("device", json::device(query_device()))
      .field("units", "\"clock64() cycles of the SM, relative to the first stamp\"")
      .list("schedules", out);
  if (Status s = doc.write(path); !s) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << path << "\n";
  return 0;
}

// Small shapes that take every path (partial tiles, the causal diagonal, seq_q != seq_k, GQA,
// BSHD): each rung's "check" is its worst relative L2 error over them.
const std::vector<Problem> kChecks = {
    Problem::make(1, 2, 1000, 777, 128), Problem::make(2, 3, 65, 129, 64, true),
    Problem::make(1, 2, 513, 1000, 64), Problem::make(1, 2, 300, 100, 128, true),
    Problem::make(1, 4, 200, 300, 64, true, Layout::BSHD, 2)};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Module 09 ladder benchmark: each rung checked, then timed"};
  bool quick = false;
  int iters = 10;
  std::string json_path, dtype_text = "bf16";
  app.add_flag("--quick", quick, "N = 2048 instead of 8192");
  int seq = 0;
  app.add_option("--seq", seq, "N (16k tokens: batch = 16384 / N); overrides --quick")
      ->check(CLI::Range(16, 16384));
  app.add_option("--iters", iters, "timed runs per row (median)")->check(CLI::Range(1, 1000));
  app.add_option("--json", json_path, "write the rows as JSON (schema attn-ladder09/1)");
  app.add_option("--dtype", dtype_text, "bf16 (default) or f16");
  bool hang = false;
  std::string timeline_path;
  app.add_option("--timeline", timeline_path,
                 "record one block's schedule (serial and ping-pong) and write it as JSON");
  app.add_flag("--hang-check", hang,
               "run a kernel whose barrier never completes: it must give up and report");
  std::vector<std::string> only;
  app.add_option("--rungs", only, "run only these rungs (names as in the table)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (hang) return hang_check();
  std::vector<ladder::Rung> rungs;
  for (const ladder::Rung& r : kRungs)
    if (only.empty() || std::find(only.begin(), only.end(), r.name) != only.end())
      rungs.push_back(r);
  if (rungs.empty()) {
    std::cerr << "error: --rungs names no rung of this ladder\n";
    return 2;
  }
  if (!timeline_path.empty()) return write_timeline(timeline_path);
  DType t;
  if (!parse_dtype(dtype_text, &t) || t == DType::f32) {
    std::cerr << "error: --dtype must be bf16 or f16 (got '" << dtype_text << "')\n";
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::cerr << "error: no GPU: " << no_device_reason() << "\n";
    return 1;
  }
  const DeviceInfo dev = query_device();
  std::cout << dev.summary() << "\n";

  const std::vector<Problem> shapes = ladder::shapes(seq > 0 ? seq : quick ? 2048 : 8192, t);
  const std::vector<ladder::Row> rows =
      ladder::run(9, m09::supports, rungs, shapes, kChecks, t, iters);
  ladder::print_table(rows, shapes);
  if (!json_path.empty()) {
    if (Status s = ladder::write_json(json_path, "attn-ladder09/1", dev, rows, iters,
                                      static_cast<int>(kChecks.size()));
        !s) {
      std::cerr << "error: " << s.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << json_path << "\n";
  }
  return ladder::exit_code(rows);
}
