// bench_07 --dtype f32: module 07's closing rungs (README, section 10), fp32 tensors.
//   1. Every rung is checked on small odd shapes (its "check" column, the worst relative L2
//      error; plain TF32 against its own tolerance), then timed on the ladder's shapes:
//      16k tokens (batch = 16384 / N), d = 64 with H = 32 and d = 128 with H = 16, causal and
//      not, N = 512 .. 16384 (--quick: N = 2048; --seqs: a list).
//   2. The error table: every rung's relative L2 error (and largest absolute error) against the
//      double reference, all rungs on the same inputs: 4 heads of N = 1024, d = 64 and 128,
//      causal and not, Q and K entries in [-1, 1) and in [-4, 4) (large logits), V in [-1, 1).
//      --inputs DIR writes those inputs as .npy files with a manifest (errors_inputs.json), so
//      that scripts/compare_torch.py --errors DIR measures PyTorch's fp32 SDPA on them too.
//
// Rungs:
//   ffma_06         module 06's forward: fp32 FFMA on the CUDA cores (the course's fastest)
//   tf32            forward_tf32: every operand rounded to TF32, one mma per product
//   3xtf32_smem_split  3xTF32 with K and V split once per tile into two shared planes (big,
//                   small) by the threads that copied them, the production tiles otherwise
//   3xtf32_fa2      3xTF32 in FlashAttention-2's copy order (one K and one V buffer, split as
//                   they land); at D = 128 4 warps and 2 blocks per SM instead of 8 warps and 1
//   3xtf32_q_regs   3xTF32 with one row tile per warp, Q's fragments split once into registers
//                   (K and V split in shared memory)
//   3xtf32_q_regs_at_load  the same with K and V split at each fragment load
//   3xtf32          forward_3xtf32: the production configurations (tf32_kernel.cuh): K and V
//                   split at each fragment load
// The rungs instantiate tf32_kernel.cuh with the solution's split (tf32_split.cuh) and their
// own Tf32Config<...>; the build compiles this file with ATTN_IMPL=ladder, so their kernels
// are apart from the solution's own, whose entry points are linked in and declared below.
#include "bench/07_tensor_cores/fp32_ladder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench/fp32_error_inputs.h"
#include "bench/ladder.h"
#include "common/bench_json.h"
#include "common/compare.h"
#include "common/device.h"
#include "common/npy.h"
#include "common/problem.h"
#include "common/reference.h"
#include "common/registry.h"
#include "common/runner.h"
#include "modules/07_tensor_cores/tensor_cores.h"
#include "modules/07_tensor_cores/tf32_kernel.cuh"
#include "solutions/07_tensor_cores/tf32_split.cuh"

namespace attn::m06::solution {
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);
}
namespace attn::m07::solution {
Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream);
Status forward_tf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream);
}  // namespace attn::m07::solution

namespace attn::fp32_ladder {

namespace {

using m07::Pipeline;
using m07::Tf32Config;
using X3 = m07::Tf32x3<m07::ladder::Tf32Split>;
constexpr Pipeline kTwo = Pipeline::two_stage, kFa2 = Pipeline::fa2;

template <class Prec, class C64, class C128>
Status run_rung(const Problem& p, const float* q, const float* k, const float* v, float* o,
                cudaStream_t stream) {
  if (Status s = m07::supports(p); !s) return s;
  return m07::launch_tf32_for_head_dim<Prec, C64, C128>(p, q, k, v, o, stream);
}

using ladder::Rung;

// Tf32Config<D, warps, row tiles per warp, keys per tile, min blocks per SM, pipeline,
//            K/V split in shared memory, Q in registers> (tf32_kernel.cuh)
const Rung kRungs[] = {
    {"ffma_06", nullptr, m06::solution::forward},
    {"tf32", nullptr, m07::solution::forward_tf32, m07::kTf32Tolerance},
    {"3xtf32_smem_split", nullptr,
     run_rung<X3, Tf32Config<64, 4, 2, 32, 2, kTwo, true>,
              Tf32Config<128, 8, 2, 16, 1, kTwo, true>>},
    {"3xtf32_fa2", nullptr,
     run_rung<X3, Tf32Config<64, 4, 2, 32, 2, kFa2, true>, Tf32Config<128, 4, 2, 16, 2, kFa2, true>>},
    {"3xtf32_q_regs", nullptr,
     run_rung<X3, Tf32Config<64, 4, 1, 64, 2, kFa2, true, true>,
              Tf32Config<128, 8, 1, 32, 1, kFa2, true, true>>},
    {"3xtf32_q_regs_at_load", nullptr,
     run_rung<X3, Tf32Config<64, 4, 1, 64, 2, kFa2, false, true>,
              Tf32Config<128, 8, 1, 32, 1, kFa2, false, true>>},
    {"3xtf32", nullptr, m07::solution::forward_3xtf32},
};

// Small shapes that take every path: partial tiles, masks, odd head dims, unaligned rows.
const std::vector<Problem> kChecks = {
    Problem::make(1, 2, 1000, 777, 128), Problem::make(2, 3, 65, 129, 96, true),
    Problem::make(1, 2, 513, 1000, 64), Problem::make(1, 2, 300, 100, 59, true),
    Problem::make(1, 4, 200, 300, 64, true, Layout::BSHD, 2)};

// ---- The error table ------------------------------------------------------------------------

struct ErrorRow {
  std::string rung, set;
  Problem p;
  float range;
  double rel_l2 = -1, max_abs = -1;
  std::string status = "ok";
};

std::vector<ErrorRow> error_table(const std::string& inputs_dir) {
  std::vector<ErrorRow> rows;
  for (const fp32_errors::InputSet& s : fp32_errors::input_sets()) {
    const Inputs in = fp32_errors::inputs_of(s);
    const std::vector<double> want = reference_attention(s.p, in.q, in.k, in.v);
    for (const Rung& rung : kRungs) {
      ErrorRow row{rung.name, s.name, s.p, s.range};
      const fp32_errors::SetError e =
          fp32_errors::error_on(ladder::as_kernel(7, m07::supports, rung), s, in, want);
      row.rel_l2 = e.rel_l2;
      row.max_abs = e.max_abs;
      row.status = e.status;
      std::printf("error  %-15s %-20s rel L2 %.3e  max abs %.3e  %s\n", row.rung.c_str(),
                  row.set.c_str(), row.rel_l2, row.max_abs,
                  row.status == "ok" ? "" : row.status.c_str());
      rows.push_back(row);
    }
  }
  if (!inputs_dir.empty()) {
    if (Status st = fp32_errors::write_input_sets(inputs_dir, "bench_07 --dtype f32"); !st)
      std::cerr << "error: " << st.message() << "\n";
    else
      std::cout << "wrote the error table's inputs to " << inputs_dir << "\n";
  }
  return rows;
}

// ---- Tables -----------------------------------------------------------------------------------

// TFLOP/s per rung and (d, causal), one column per N.
void print_speed_table(const std::vector<ladder::Row>& rows, const std::vector<int>& seqs) {
  std::printf("\nTFLOP/s (causal: visible pairs)\n%-15s %-10s", "rung", "shape");
  for (int n : seqs) std::printf(" %8d", n);
  std::printf("\n");
  for (const Rung& rung : kRungs)
    for (bool causal : {false, true})
      for (int d : {64, 128}) {
        std::printf("%-15s %-10s", rung.name,
                    ("d" + std::to_string(d) + (causal ? " causal" : "")).c_str());
        for (int n : seqs) {
          double tf = 0;
          for (const ladder::Row& r : rows)
            if (r.rung == rung.name && r.p.head_dim == d && r.p.causal == causal && r.p.seq_q == n)
              tf = r.tflops;
          std::printf(" %8.1f", tf);
        }
        std::printf("\n");
      }
}

void print_error_table(const std::vector<ErrorRow>& rows) {
  std::printf("\nrelative L2 error vs the double reference (same inputs for every rung)\n%-15s",
              "rung");
  const std::vector<fp32_errors::InputSet> sets = fp32_errors::input_sets();
  for (const fp32_errors::InputSet& s : sets) std::printf(" %20s", s.name.c_str());
  std::printf("\n");
  for (const Rung& rung : kRungs) {
    std::printf("%-15s", rung.name);
    for (const fp32_errors::InputSet& s : sets)
      for (const ErrorRow& r : rows)
        if (r.rung == rung.name && r.set == s.name) std::printf(" %20.2e", r.rel_l2);
    std::printf("\n");
  }
}

}  // namespace

int run(const Options& o) {
  if (cuda_device_count() == 0) {
    std::cerr << "error: no GPU: " << no_device_reason() << "\n";
    return 1;
  }
  const DeviceInfo dev = query_device();
  std::cout << dev.summary() << "\n";
  if (!o.inputs_dir.empty()) std::filesystem::create_directories(o.inputs_dir);

  std::vector<int> seqs = o.seqs;
  if (seqs.empty())
    seqs = o.quick ? std::vector<int>{2048} : std::vector<int>{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<Problem> shapes;
  for (int n : seqs)
    for (const Problem& p : ladder::shapes(n, DType::f32)) shapes.push_back(p);
  const std::vector<ladder::Row> rows =
      ladder::run(7, m07::supports, {std::begin(kRungs), std::end(kRungs)}, shapes, kChecks,
                  DType::f32, o.iters);
  const std::vector<ErrorRow> errors = error_table(o.inputs_dir);
  print_speed_table(rows, seqs);
  print_error_table(errors);

  if (!o.json_path.empty()) {
    std::vector<json::Object> json_rows, json_errors;
    for (const ladder::Row& r : rows) json_rows.push_back(ladder::row_json(r));
    for (const ErrorRow& e : errors) {
      json::Object row;
      row.add("rung", e.rung).add("inputs", e.set).add("batch", e.p.batch)
          .add("heads", e.p.heads).add("seq", e.p.seq_q).add("head_dim", e.p.head_dim)
          .add("causal", e.p.causal).add("range", double(e.range)).add("rel_l2", e.rel_l2)
          .add("max_abs", e.max_abs).add("status", e.status == "ok" ? "ok" : "error");
      json_errors.push_back(row);
    }
    json::Document doc("attn-ladder07-fp32/1");
    doc.field("device", json::device(dev))
        .field("method", ladder::method_json(o.iters, int(kChecks.size())))
        .list("rows", json_rows)
        .list("errors", json_errors);
    if (Status s = doc.write(o.json_path); !s) {
      std::cerr << "error: " << s.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << o.json_path << "\n";
  }
  int code = ladder::exit_code(rows);
  for (const ErrorRow& e : errors)
    if (e.status != "ok") code = 1;
  return code;
}

}  // namespace attn::fp32_ladder
