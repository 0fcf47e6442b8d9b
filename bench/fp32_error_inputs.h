// The inputs of the fp32 error tables (bench_07 --dtype f32, bench_09_tf32): one list, so that
// every fp32 rung of the course, and PyTorch's fp32 SDPA (scripts/compare_torch.py --errors),
// is measured on exactly the same Q, K, V. 4 heads of N = 1024, d = 64 and 128, causal and
// not, Q and K entries in [-1, 1) and in [-4, 4) (large logits), V in [-1, 1); set i is drawn
// from seed 2024 + i.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "common/compare.h"
#include "common/npy.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/status.h"

namespace attn::fp32_errors {

struct InputSet {
  Problem p;
  float range;  // Q and K entries in [-range, range)
  std::string name;
  uint64_t seed;
};

inline std::vector<InputSet> input_sets() {
  std::vector<InputSet> sets;
  for (float range : {1.0f, 4.0f})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        Problem p = Problem::make(1, 4, 1024, 1024, d, causal);
        p.dtype = DType::f32;
        char name[64];
        std::snprintf(name, sizeof name, "d%d_range%g%s", d, double(range),
                      causal ? "_causal" : "");
        sets.push_back({p, range, name, 2024 + sets.size()});
      }
  return sets;
}

inline Inputs inputs_of(const InputSet& s) { return random_inputs(s.p, s.seed, s.range); }

// One kernel's error on one set: the relative L2 error (-1 for non-finite outputs) and the
// largest absolute error of O against `want` (the double reference on `in`), or why it did
// not run.
struct SetError {
  double rel_l2 = -1, max_abs = -1;
  std::string status = "ok";
};
inline SetError error_on(const Kernel& kern, const InputSet& s, const Inputs& in,
                         const std::vector<double>& want) {
  SetError e;
  std::vector<float> got;
  if (const Status st = run_kernel(kern, s.p, in, got); !st) {
    e.status = st.message();
    return e;
  }
  const Comparison c = compare_output(s.p, got, want, 1.0);
  e.rel_l2 = c.nan_count ? -1 : c.rel_l2_error;
  e.max_abs = c.max_abs_error;
  if (c.nan_count) e.status = "non-finite outputs";
  return e;
}

// Writes every set's Q, K, V as float32 .npy files <dir>/<name>_{q,k,v}.npy, layout
// [B, H, N, D], and the manifest <dir>/errors_inputs.json that compare_torch.py --errors reads.
inline Status write_input_sets(const std::string& dir, const char* program) {
  std::vector<json::Object> manifest;
  for (const InputSet& s : input_sets()) {
    const Inputs in = inputs_of(s);
    const std::vector<int64_t> shape = {s.p.batch, s.p.heads, s.p.seq_q, s.p.head_dim};
    for (auto [tensor, values] : {std::pair{"q", &in.q}, {"k", &in.k}, {"v", &in.v}})
      write_npy(dir + "/" + s.name + "_" + tensor + ".npy", shape, *values);
    json::Object m;
    m.add("name", s.name).add("batch", s.p.batch).add("heads", s.p.heads).add("seq", s.p.seq_q)
        .add("head_dim", s.p.head_dim).add("causal", s.p.causal).add("range", double(s.range))
        .add("layout", "bhsd");
    manifest.push_back(m);
  }
  json::Document doc("attn-errors-inputs/1");
  doc.field("note", std::string("\"Q, K, V of ") + program +
                        "'s error table, float32 .npy files <name>_q.npy, <name>_k.npy, "
                        "<name>_v.npy, layout [B, H, N, D]\"")
      .list("sets", manifest);
  return doc.write(dir + "/errors_inputs.json");
}

}  // namespace attn::fp32_errors
