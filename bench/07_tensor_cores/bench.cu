// Module 07 benchmark (program bench_07): the README's ladder, one rung per row, measured on
// the same shapes in one run. Every rung is first checked against the double reference on
// small odd shapes (its "check" column is the worst relative L2 error), then timed.
//
//   bench_07 [--quick] [--json ladder.json] [--iters 10] [--dtype bf16]
//   bench_07 --dtype f32 [--quick | --seqs 512,8192] [--json fp32.json] [--inputs DIR]
//
// --dtype f32 runs the fp32 rungs instead (FFMA, TF32, 3xTF32; README section 10) over
// N = 512 .. 16384 and their error table: bench/07_tensor_cores/fp32_ladder.cu.
//
// Rungs (README, section 5):
//   wmma          nvcuda::wmma fragments; S and P go through shared memory, O lives there
//                 (bench/07_tensor_cores/wmma_step.cuh)
//   mma_plain     mma.sync m16n8k16 + ldmatrix; S, softmax, P and O in registers; plain
//                 (unswizzled) shared tiles; each K/V tile copied, waited for, then computed
//   mma_swizzle   + the XOR swizzle: conflict-free ldmatrix
//   mma_async     + cp.async double buffering: tile t + 1 copied while tile t is computed
//   rows32        + 32 query rows per warp (two row tiles share every K and V fragment)
//   fa2_pipeline  + FlashAttention-2's copy order (D = 128)
//   qblocks_fast  neighbouring blocks take query blocks of the same head instead (not adopted:
//                 slower with the causal mask)
//   forward       the solution's forward(): its production configurations
// Shapes: 16k tokens (batch = 16384 / N), d = 64 with H = 32 and d = 128 with H = 16, causal
// and not, N = 8192 (--quick: N = 2048). Timing: CUDA events, 2 runs untimed, then the
// median of --iters runs (common/timing.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/07_tensor_cores/fp32_ladder.h"
#include "bench/ladder.h"
#include "common/bench_json.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"

// The solution's warp step, instantiated here with the ladder's configurations. The build
// compiles this program with ATTN_IMPL=ladder, so its kernels are attn::m07::ladder::...,
// apart from the solution's own (attn::m07::solution::...), whose forward() is linked in from
// m07_solution and declared below.
#include "modules/07_tensor_cores/tensor_cores.h"
#include "solutions/07_tensor_cores/warp_mma.cuh"
#include "bench/07_tensor_cores/wmma_step.cuh"

namespace attn::m07::solution {
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);
}

namespace {

using namespace attn;
using attn::m07::Config;

// One rung: D = 64 and D = 128 configurations of the same step.
template <class C64, class C128>
Status run_rung(const Problem& p, const void* q, const void* k, const void* v, void* o,
                cudaStream_t stream) {
  if (Status s = m07::supports(p); !s) return s;
  return m07::launch_for_head_dim<m07::ladder::WarpMma, C64, C128>(p, q, k, v, o, stream);
}

Status run_wmma(const Problem& p, const void* q, const void* k, const void* v, void* o,
                cudaStream_t stream) {
  if (Status s = m07::supports(p); !s) return s;
  return p.dtype == DType::bf16
             ? m07::wmma_step::forward<__nv_bfloat16>(p, q, k, v, o, stream)
             : m07::wmma_step::forward<__half>(p, q, k, v, o, stream);
}

Status run_forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
                   cudaStream_t stream) {
  return m07::solution::forward(p, q, k, v, o, stream);
}

using ladder::Rung;

// Config<D, warps, row tiles per warp, keys per tile, min blocks per SM, swizzle, pipeline,
//        Q in registers, query blocks fast> (tensor_core_kernel.cuh)
using m07::Pipeline;
constexpr Pipeline kSync = Pipeline::sync, kTwo = Pipeline::two_stage, kFa2 = Pipeline::fa2;
const Rung kRungs[] = {
    {"wmma", run_wmma},
    {"mma_plain", run_rung<Config<64, 4, 1, 64, 3, false, kSync>,
                           Config<128, 4, 1, 64, 2, false, kSync>>},
    {"mma_swizzle", run_rung<Config<64, 4, 1, 64, 3, true, kSync>,
                             Config<128, 4, 1, 64, 2, true, kSync>>},
    {"mma_async", run_rung<Config<64, 4, 1, 64, 3, true, kTwo>, Config<128, 4, 1, 64, 2, true, kTwo>>},
    // 32 query rows per warp: every K and V fragment feeds two row tiles. At D = 128 Q must
    // then be re-read from shared memory (registers), which two stages cannot hide.
    {"rows32", run_rung<Config<64, 4, 2, 64, 2, true, kTwo>,
                        Config<128, 4, 2, 64, 2, true, kTwo, false>>},
    // + FlashAttention-2's copy order at D = 128 (one K and one V buffer, separate waits).
    {"fa2_pipeline", run_rung<Config<64, 4, 2, 64, 2, true, kTwo>,
                              Config<128, 4, 2, 64, 2, true, kFa2, false>>},
    // Query blocks of one head on neighbouring blocks instead (meant to keep K/V of fewer heads
    // in L2 at a time; slower with the causal mask, so forward() puts heads first).
    {"qblocks_fast", run_rung<Config<64, 4, 2, 64, 2, true, kTwo, true, true>,
                              Config<128, 4, 2, 64, 2, true, kFa2, false, true>>},
    {"forward", run_forward},
};

// Small shapes that take every path (partial tiles, masks, odd head dims, unaligned rows):
// each rung's "check" is its worst relative L2 error over them.
const std::vector<Problem> kChecks = {
    Problem::make(1, 2, 1000, 777, 128), Problem::make(2, 3, 65, 129, 96, true),
    Problem::make(1, 2, 513, 1000, 64), Problem::make(1, 2, 300, 100, 59, true),
    Problem::make(1, 4, 200, 300, 64, true, Layout::BSHD, 2)};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Module 07 ladder benchmark: each rung checked, then timed"};
  bool quick = false;
  int iters = 10;
  std::string json_path, dtype_text = "bf16", inputs_dir;
  std::vector<int> seqs;
  app.add_flag("--quick", quick, "N = 2048 instead of 8192 (f32: instead of 512 .. 16384)");
  app.add_option("--iters", iters, "timed runs per row (median)")->check(CLI::Range(1, 1000));
  app.add_option("--json", json_path,
                 "write the rows as JSON (schema attn-ladder07/1; f32: attn-ladder07-fp32/1)");
  app.add_option("--dtype", dtype_text, "bf16 (default) or f16; f32: the TF32 rungs");
  app.add_option("--seqs", seqs, "f32 only: the N to time, e.g. --seqs 512,8192")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--inputs", inputs_dir,
                 "f32 only: write the error table's inputs as .npy (for compare_torch.py)");
  CLI11_PARSE(app, argc, argv);
  DType t;
  if (!parse_dtype(dtype_text, &t)) {
    std::cerr << "error: --dtype must be bf16, f16 or f32 (got '" << dtype_text << "')\n";
    return 2;
  }
  if (t == DType::f32)
    return fp32_ladder::run({quick, seqs, iters, json_path, inputs_dir});
  if (!seqs.empty() || !inputs_dir.empty()) {
    std::cerr << "error: --seqs and --inputs go with --dtype f32\n";
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::cerr << "error: no GPU: " << no_device_reason() << "\n";
    return 1;
  }
  const DeviceInfo dev = query_device();
  std::cout << dev.summary() << "\n";

  const std::vector<Problem> shapes = ladder::shapes(quick ? 2048 : 8192, t);
  const std::vector<ladder::Row> rows =
      ladder::run(7, m07::supports, {std::begin(kRungs), std::end(kRungs)}, shapes, kChecks, t,
                  iters);
  ladder::print_table(rows, shapes);
  if (!json_path.empty()) {
    if (Status s = ladder::write_json(json_path, "attn-ladder07/1", dev, rows, iters,
                                      static_cast<int>(kChecks.size()));
        !s) {
      std::cerr << "error: " << s.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << json_path << "\n";
  }
  return ladder::exit_code(rows);
}
