// The backward part of the `attn` command line: module 11's forward (O and its log-sum-exp)
// and backward (dQ, dK, dV) on one shape. common/cli.cpp parses the flags and calls in here
// with --backward; module 11 without it runs the forward alone, as module 07 does.
//
//   attn run -m 11 --backward [--causal] [--kv-heads 2] [--dtype f32|f16|bf16] --verify --time
//   attn run -m 11 --backward --q q.npy --k k.npy --v v.npy [--dout do.npy] --out o.npy
//       --out-dq dq.npy --out-dk dk.npy --out-dv dv.npy
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/backward_runner.h"
#include "common/cli_internal.h"
#include "common/half.h"
#include "common/npy.h"
#include "common/random.h"

namespace attn::cli {

namespace {

// The flags that only mean something with --backward.
const char* const kBackwardOnlyFlags[] = {"--dout", "--out-dq", "--out-dk", "--out-dv"};

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

// "module 11 (backward)": the registered module with the backward entry points.
std::string backward_module() {
  for (const Kernel& k : registered_kernels())
    if (k.backward && k.impl == Impl::solution)
      return "module " + std::to_string(k.module) + " (" + k.name + ")";
  return "module 11 (backward)";
}

// O's (and dQ's) shape as the files have it: Q's, from --q or from the shape flags.
std::vector<int64_t> q_shape(const Problem& p, Layout layout) {
  return layout == Layout::BSHD ? std::vector<int64_t>{p.batch, p.seq_q, p.heads, p.head_dim}
                                : std::vector<int64_t>{p.batch, p.heads, p.seq_q, p.head_dim};
}

// dK's and dV's shape: K's, of the same rank as Q's (a rank-3 Q drops the batch, rank 2 the
// heads too; see problem_from_npy).
std::vector<int64_t> kv_shape(const Problem& p, const std::vector<int64_t>& q, Layout layout) {
  if (q.size() == 2) return {p.seq_k, p.head_dim};
  if (q.size() == 3) return {p.kv_heads, p.seq_k, p.head_dim};
  return layout == Layout::BSHD ? std::vector<int64_t>{p.batch, p.seq_k, p.kv_heads, p.head_dim}
                                : std::vector<int64_t>{p.batch, p.kv_heads, p.seq_k, p.head_dim};
}

// --dout: a float32 .npy of O's shape, rounded to p.dtype as the kernel reads it.
std::vector<float> read_dout(const std::string& path, const Problem& p,
                             const std::vector<int64_t>& o_shape) {
  NpyArray a = read_npy(path);
  if (a.shape != o_shape)
    throw UserError("--dout " + path + ": shape " + shape_str(a.shape) + ", expected O's shape " +
                    shape_str(o_shape) + " for " + p.describe());
  require_finite(a.data, path);
  round_to_dtype(a.data, p.dtype);
  return std::move(a.data);
}

// Q, K, V, O, dO, dQ, dK, dV in p.dtype (dO, dQ, dK, dV are the shapes of O, Q, K, V) and lse.
double backward_device_bytes(const Problem& p) {
  return 2.0 * attention_buffer_bytes(p) + 4.0 * double(p.batch) * p.heads * p.seq_q;
}

// Inputs and outputs as float32; with --verify their rounded copies and the double reference.
double backward_host_bytes(const Problem& p, bool verify) {
  const double tensors = double(p.q_elements()) + 2.0 * double(p.kv_elements()) +
                         double(p.o_elements());
  const double rows = double(p.batch) * p.heads * p.seq_q;
  return 8.0 * tensors + 4.0 * rows + (verify ? 12.0 * tensors + 24.0 * rows : 0.0);
}

struct Outputs {
  std::vector<float> o, dq, dk, dv;
};

// Both entry points once, without the reference (no --verify).
Outputs run_once(const Kernel& kernel, const Problem& p, const BackwardInputs& in) {
  BackwardDeviceTensors t(p, in);
  const auto finish = [](Status s) {
    if (!s) throw UserError(s.message());
    ATTN_CUDA_CHECK(cudaGetLastError());
    ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  };
  finish(t.forward(kernel, nullptr));
  finish(t.backward(kernel, nullptr));
  return {t.o(), t.dq(), t.dk(), t.dv()};
}

std::string lse_line(const Problem& p, const BackwardCheck& r) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  int64_t no_key = 0;
  for (int i = 0; i < p.seq_q; ++i) no_key += p.first_masked_key(i) == 0;
  no_key *= int64_t(p.batch) * p.heads;
  if (r.lse_bad == 0)
    return "PASS  every row within 1e-3" +
           (no_key > 0 ? ", +inf for the " + std::to_string(no_key) + " rows that see no key"
                       : std::string());
  return "FAIL  " + std::to_string(r.lse_bad) + " of " + std::to_string(rows) +
         " rows off by more than 1e-3 (or not +inf where the row sees no key)";
}

}  // namespace

void add_backward_options(CLI::App* cmd, BackwardOptions& o) {
  const std::string m11 = "module 11: ";
  cmd->add_flag("--backward", o.backward,
                m11 + "the forward (O and the log-sum-exp of every row), then the backward: dQ, "
                      "dK, dV for a random dO from the seed (or --dout)");
  cmd->add_option("--dout", o.dout_path,
                  "with --backward: dO from a float32 .npy of O's shape (rounded to --dtype)");
  cmd->add_option("--out-dq", o.out_dq_path, "with --backward: write dQ to this .npy (Q's shape)");
  cmd->add_option("--out-dk", o.out_dk_path, "with --backward: write dK to this .npy (K's shape)");
  cmd->add_option("--out-dv", o.out_dv_path, "with --backward: write dV to this .npy (V's shape)");
}

void check_backward_flags(const RunOptions& o, const Kernel& kernel) {
  if (!o.backward.backward) {
    for (const char* flag : kBackwardOnlyFlags)
      if (given(o.given, flag))
        throw UserError(std::string(flag) + " goes with --backward: the backward pass of " +
                        backward_module());
    return;
  }
  if (!kernel.backward)
    throw UserError("--backward needs " + backward_module() + "; " + module_name(kernel) +
                    " runs " + (kernel.inference ? "decode and prefill" : "the forward only"));
  const std::string modifier = first_modifier_flag(o.given);
  if (!modifier.empty())
    throw UserError(modifier + " with --backward is not supported: the backward pass takes "
                    "plain attention (with --causal); score modifiers, masks and RoPE run "
                    "forward only, on " + modifier_module());
}

int cmd_run_backward(const RunOptions& o, const Kernel& kernel, std::ostream& out) {
  const BackwardOptions& f = o.backward;
  const DType dtype = dtype_for(kernel, o.dtype);
  const Layout layout = parse_layout(o.shape.layout);
  BackwardInputs in;
  std::vector<int64_t> o_shape;
  bool from_files = false;
  const Problem p = run_problem(o, kernel, dtype, in.in, o_shape, from_files);
  if (Status s = check_backward_problem(kernel, p); !s) throw UserError(s.message());
  if (!from_files) o_shape = q_shape(p, layout);
  require_host_memory(p.describe(), backward_host_bytes(p, o.verify),
                      std::string("Q, K, V, O, dO, dQ, dK, dV") +
                          (o.verify ? " and the reference" : ""));
  // A wrong dO file is the same mistake on any machine: refused before looking for a GPU.
  if (!f.dout_path.empty()) in.dout = read_dout(f.dout_path, p, o_shape);
  require_gpu(kernel);
  require_device_memory(p.describe(), backward_device_bytes(p),
                        "Q, K, V, O, dO, dQ, dK, dV and lse");
  // One seed for whatever is random (Q, K, V and dO): a run replays exactly.
  const bool random = !from_files || f.dout_path.empty();
  const uint64_t seed = o.seed.value_or(fresh_seed());
  if (!from_files) in.in = random_inputs(p, seed);
  if (f.dout_path.empty()) in.dout = random_dout(p, seed);

  out << kernel.label() << "  " << p.describe() << " " << o.shape.layout << "  forward + backward"
      << (from_files ? std::string("  inputs from .npy") +
                           (dtype != DType::f32 ? std::string(", rounded to ") + dtype_name(dtype)
                                                : "")
                     : "")
      << (f.dout_path.empty() ? "" : "  dO from .npy")
      << (random ? "  seed " + std::to_string(seed) : "") << "\n";
  int exit_code = 0;
  Outputs result;
  const bool write = !o.out_path.empty() || !f.out_dq_path.empty() || !f.out_dk_path.empty() ||
                     !f.out_dv_path.empty();
  if (o.verify) {
    BackwardCheck r = check_backward(kernel, p, in);
    if (!r.status) throw UserError(r.status.message());
    out << "  O    " << r.o.summary() << "\n"
        << "  lse  " << lse_line(p, r) << "\n"
        << "  dQ   " << r.dq.summary() << "\n"
        << "  dK   " << r.dk.summary() << "\n"
        << "  dV   " << r.dv.summary() << "\n";
    for (const std::string& hint : diagnose_backward(p, in, r)) out << "  hint: " << hint << "\n";
    if (!r.passed()) exit_code = 1;
    result = {std::move(r.out_o), std::move(r.out_dq), std::move(r.out_dk), std::move(r.out_dv)};
  } else if (write || !o.time) {
    result = run_once(kernel, p, in);
    out << "  ran the forward and the backward (add --verify to compare with the CPU "
           "reference)\n";
  }
  const std::vector<int64_t> k_shape = kv_shape(p, o_shape, layout);
  if (!o.out_path.empty()) write_output(out, o.out_path, o_shape, result.o, dtype);
  if (!f.out_dq_path.empty()) write_output(out, f.out_dq_path, o_shape, result.dq, dtype);
  if (!f.out_dk_path.empty()) write_output(out, f.out_dk_path, k_shape, result.dk, dtype);
  if (!f.out_dv_path.empty()) write_output(out, f.out_dv_path, k_shape, result.dv, dtype);

  if (o.time && may_time(kernel, exit_code, out)) {
    BackwardDeviceTensors t(p, in);
    // The forward first: the backward reads the O and lse it leaves.
    const Timing forward =
        time_launches([&](cudaStream_t s) { return t.forward(kernel, s); }, o.warmup, o.iters);
    const Timing backward =
        time_launches([&](cudaStream_t s) { return t.backward(kernel, s); }, o.warmup, o.iters);
    const double forward_flops = attention_flops(p);
    const double backward_flops = 2.5 * forward_flops;
    const auto line = [&](const char* name, const Timing& time, double flops) {
      out << "  " << name << fmt("%.4f", time.median_ms) << " ms (median of " << time.iterations
          << ", min " << fmt("%.4f", time.min_ms) << ")  "
          << fmt("%.2f", flops / (time.median_ms * 1e-3) / 1e12) << " TFLOP/s\n";
    };
    line("forward   ", forward, forward_flops);
    line("backward  ", backward, backward_flops);
    out << "  FLOPs: forward 4 * batch * heads * visible pairs * head_dim = "
        << fmt("%.4g", forward_flops) << "; backward 2.5x the forward = "
        << fmt("%.4g", backward_flops) << " (five products of the forward's size: S = Q K^T "
           "again, dV, dP, dQ, dK, against the forward's two)\n";
  }
  return exit_code;
}

}  // namespace attn::cli
