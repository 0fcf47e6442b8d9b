// What the ladder benchmarks (bench_07, bench_09) share: a rung is a named forward() (16-bit,
// or fp32 for module 07's TF32 rungs); each rung is checked against the double reference on
// small odd shapes, then timed on the ladder's shapes; the rows are printed as they come, then
// as one short table, and written as JSON. Host code only; each program keeps its own rungs
// and command line.
#pragma once

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "common/compare.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/timing.h"

namespace attn::ladder {

struct Rung {
  const char* name;
  Forward16Fn forward;                 // f16/bf16 tensors
  ForwardFn forward32 = nullptr;       // f32 tensors (module 07's TF32 rungs, module 06)
  double tolerance = kDtypeTolerance;  // the check's; kDtypeTolerance: default_tolerance(t)
};

struct Row {
  std::string rung, status;
  Problem p;
  double median_ms = 0, tflops = 0, check = 0;
};

// The module's kernel entry for a rung (its own supports(), the rung's forward()).
inline Kernel as_kernel(int module, SupportsFn supports, const Rung& rung) {
  return Kernel{module, rung.name, "", Backend::gpu, Impl::solution, supports, rung.forward32,
                rung.forward};
}

// The ladder's shapes: 16k tokens (batch = 16384 / n), d = 64 with H = 32 and d = 128 with
// H = 16, not causal then causal.
inline std::vector<Problem> shapes(int n, DType t) {
  std::vector<Problem> out;
  for (bool causal : {false, true})
    for (auto [heads, d] : {std::pair{32, 64}, {16, 128}}) {
      Problem p = Problem::make(16384 / n, heads, n, n, d, causal);
      p.dtype = t;
      out.push_back(p);
    }
  return out;
}

// Worst relative L2 error over `checks` (each run in dtype t); -1 and the reason in `status`
// when a check fails (relative L2 error above `tolerance`, kDtypeTolerance: the dtype's).
inline double check_rung(const Kernel& kern, DType t, std::vector<Problem> checks,
                         std::string& status, double tolerance = kDtypeTolerance) {
  double worst = 0;
  for (Problem p : checks) {
    p.dtype = t;
    const CheckResult r = check_kernel(kern, p, random_inputs(p, 7 + p.seq_q), tolerance);
    if (!r.passed()) {
      status = "check failed on " + p.describe() + ": " +
               (r.status ? r.comparison.summary() : r.status.message());
      return -1;
    }
    worst = std::max(worst, r.comparison.rel_l2_error);
  }
  return worst;
}

// Times kern on `tensors` (CUDA events, 2 runs untimed, the median of `iters`) into row:
// median_ms and tflops (attention_flops / time; 0 when count_flops is false, for a pass that
// is not the attention), or the error in row.status.
inline void time_row(Row& row, const Kernel& kern, DeviceTensors& tensors, int iters,
                     bool count_flops = true) {
  try {
    const Timing tm = time_on_stream(
        [&](cudaStream_t s) {
          const Status st = tensors.forward(kern, s);
          if (!st) throw std::runtime_error(st.message());
        },
        2, iters);
    row.median_ms = tm.median_ms;
    row.tflops = count_flops ? attention_flops(row.p) / (tm.median_ms * 1e9) : 0.0;
  } catch (const std::exception& e) {
    row.status = e.what();
  }
}

// Every rung: checked, then timed on every shape (CUDA events, 2 runs untimed, the median of
// `iters`); one line per row as it is measured.
inline std::vector<Row> run(int module, SupportsFn supports, const std::vector<Rung>& rungs,
                            const std::vector<Problem>& ladder, const std::vector<Problem>& checks,
                            DType t, int iters) {
  std::vector<Row> rows;
  for (const Rung& rung : rungs) {
    const Kernel kern = as_kernel(module, supports, rung);
    std::string status = "ok";
    const double check = check_rung(kern, t, checks, status, rung.tolerance);
    for (const Problem& p : ladder) {
      Row row{rung.name, status, p, 0, 0, check};
      if (check >= 0) {
        try {
          DeviceTensors tensors(p, random_inputs(p, 99));  // uploaded as p.dtype
          time_row(row, kern, tensors, iters);
        } catch (const std::exception& e) {  // the tensors did not fit on the GPU
          row.status = e.what();
        }
      }
      std::printf("%-12s %-44s %9.3f ms %7.1f TFLOP/s  check %.1e  %s\n", rung.name,
                  p.describe().c_str(), row.median_ms, row.tflops, row.check,
                  row.status == "ok" ? "" : row.status.c_str());
      rows.push_back(row);
    }
  }
  return rows;
}

// The short table: TFLOP/s per rung and shape.
inline void print_table(const std::vector<Row>& rows, const std::vector<Problem>& ladder) {
  std::printf("\n%-12s", "rung");
  for (const Problem& p : ladder)
    std::printf(" %14s", ("d" + std::to_string(p.head_dim) + (p.causal ? " causal" : "")).c_str());
  std::printf("\n");
  for (size_t i = 0; i < rows.size(); i += ladder.size()) {
    std::printf("%-12s", rows[i].rung.c_str());
    for (size_t j = 0; j < ladder.size(); ++j) std::printf(" %14.1f", rows[i + j].tflops);
    std::printf("\n");
  }
}

// How the rows were measured, and one row, as JSON objects.
inline json::Object method_json(int iters, int check_shapes) {
  json::Object method;
  method.add("timing", "CUDA events per run, median").add("runs_before_timed", 2)
      .add("iterations", iters)
      .add("check", "worst relative L2 error vs the double reference on " +
                        std::to_string(check_shapes) + " small shapes");
  return method;
}

inline json::Object row_json(const Row& r) {
  json::Object row;
  row.add("rung", r.rung).add("dtype", dtype_name(r.p.dtype)).add("batch", r.p.batch)
      .add("heads", r.p.heads).add("seq", r.p.seq_q).add("head_dim", r.p.head_dim)
      .add("causal", r.p.causal).add("median_ms", r.median_ms).add("tflops", r.tflops)
      .add("check_rel_l2", r.check).add("status", r.status == "ok" ? "ok" : "error");
  return row;
}

// The rows as JSON (`schema`, e.g. "attn-ladder09/1"), with the device and the method.
inline Status write_json(const std::string& path, const char* schema, const DeviceInfo& dev,
                         const std::vector<Row>& rows, int iters, int check_shapes) {
  std::vector<json::Object> json_rows;
  for (const Row& r : rows) json_rows.push_back(row_json(r));
  json::Document doc(schema);
  doc.field("device", json::device(dev)).field("method", method_json(iters, check_shapes))
      .list("rows", json_rows);
  return doc.write(path);
}

// 0 when every row ran.
inline int exit_code(const std::vector<Row>& rows) {
  for (const Row& r : rows)
    if (r.status != "ok") return 1;
  return 0;
}

}  // namespace attn::ladder
