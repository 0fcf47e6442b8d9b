#include "common/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/bench_json.h"
#include "common/buffers.h"
#include "common/cli_internal.h"
#include "common/device.h"
#include "common/diagnose.h"
#include "common/half.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/timing.h"

namespace attn::cli {

bool given(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, ++u;
  return fmt(u == 0 ? "%.0f" : "%.1f", bytes) + " " + units[u];
}

DType dtype_for(const Kernel& kernel, const std::string& flag) {
  DType t = kernel.native_dtype();
  if (!flag.empty()) parse_dtype(flag, &t);  // validated while parsing
  return t;
}

void require_gpu(const Kernel& k) {
  if (k.backend != Backend::gpu) return;
  if (cuda_device_count() == 0)
    throw UserError(no_device_reason() + ": module " + std::to_string(k.module) +
                    " needs a GPU (module 00 runs on the CPU; see docs/setup.md)");
}

void require_device_memory(const std::string& what, double need, const std::string& buffers) {
  size_t free_bytes = 0, total = 0;
  ATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (need > double(free_bytes))
    throw UserError(what + " needs " + human_bytes(need) + " of device memory for " + buffers +
                    "; the GPU has " + human_bytes(double(free_bytes)) + " free");
}

void require_host_memory(const std::string& what, double need, const std::string& buffers) {
  const double available = available_host_memory_bytes();
  if (available > 0 && need > available)
    throw UserError(what + " needs " + human_bytes(need) + " of host memory for " + buffers +
                    "; this machine has " + human_bytes(available) + " available");
}

void require_finite(const std::vector<float>& values, const std::string& path) {
  const auto bad = std::find_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
  if (bad != values.end())
    throw UserError(path + ": element " + std::to_string(bad - values.begin()) + " is " +
                    (std::isnan(*bad) ? "NaN" : "infinite") +
                    "; attention inputs must be finite numbers");
}

void require_agree(const std::optional<int>& flag, int value, const std::string& name) {
  if (flag && *flag != value)
    throw UserError("--" + name + " " + std::to_string(*flag) + " disagrees with the .npy files (" +
                    std::to_string(value) + ")");
}

namespace {

// CLI11 reads any integer as a flag's value (--verify=2 is true, --time=-1 false); these
// flags take 0 or 1 (or true/false), and nothing else passes silently.
CLI::Validator zero_or_one(const std::string& flag) {
  return CLI::Validator(
      [flag](std::string& value) -> std::string {
        std::string lower = value;
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (lower == "0" || lower == "1" || lower == "true" || lower == "false") return {};
        return "takes 0 or 1 (as in " + flag + "=1), got '" + value + "'";
      },
      "");
}

// --dtype: any spelling parse_dtype() knows (f32/fp32/float32, f16/fp16/half/float16,
// bf16/bfloat16); anything else is a parse error (exit 2).
CLI::Validator dtype_name_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        DType t;
        if (parse_dtype(value, &t)) return {};
        return "takes f32, f16 or bf16, got '" + value + "'";
      },
      "f32|f16|bf16");
}

void add_dtype_option(CLI::App* cmd, std::string& dtype, const char* which_default) {
  cmd->add_option("--dtype", dtype,
                  std::string("element type of Q, K, V, O: f32, f16 or bf16 (default: ") +
                      which_default + ")")
      ->check(dtype_name_check());
}

// A whole number >= `least`, with a message a person reads (CLI::PositiveNumber and
// CLI::Range print their range up to DBL_MAX or INT_MAX: "Value 0 not in range 1 to 1797...").
CLI::Validator at_least(int least) {
  return CLI::Validator(
      [least](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(value.c_str(), &end, 10);
        if (end == value.c_str() || *end != '\0' || errno == ERANGE || n < least ||
            n > std::numeric_limits<int>::max())
          return "takes a whole number >= " + std::to_string(least) + ", got '" + value + "'";
        return {};
      },
      ">= " + std::to_string(least));
}
const CLI::Validator kAtLeastOne = at_least(1);

// Composable Kernel's examples spell some flags with underscores (--seq_len, --head_dim,
// --kv_heads); both spellings are accepted.
void add_shape_options(CLI::App* cmd, ShapeOptions& s) {
  cmd->add_option("--batch,-b", s.batch,
                  "batch size (inference modules: the number of --random-seqlens lengths)");
  cmd->add_option("--heads", s.heads, "number of query heads");
  cmd->add_option("--kv-heads,--kv_heads", s.kv_heads,
                  "K/V heads, a divisor of --heads (GQA; 1 = MQA; default: = heads)")
      ->check(kAtLeastOne);
  cmd->add_option("--seq-q", s.seq_q, "query sequence length");
  cmd->add_option("--seq-k", s.seq_k, "key/value sequence length");
  cmd->add_option("--seq,--seq_len,-n", s.seq, "sets both --seq-q and --seq-k (unless given)");
  cmd->add_option("--dim,--head_dim,-d", s.dim, "head dimension");
  cmd->add_flag("--causal", s.causal, "causal mask (bottom-right aligned)");
  cmd->add_option("--layout", s.layout, "bhsd (default) or bshd")
      ->check(CLI::IsMember({"bhsd", "bshd"}, CLI::ignore_case));
  cmd->add_option("--scale", s.scale, "softmax scale (default 1/sqrt(dim))");
}

}  // namespace

Layout parse_layout(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return lower == "bshd" ? Layout::BSHD : Layout::BHSD;
}

namespace {

Impl parse_impl(const std::string& name) {
  if (name == "exercise") return Impl::exercise;
  return Impl::solution;
}

const Kernel& lookup_kernel(int module, Impl impl) {
  const Kernel* k = find_kernel(module, impl);
  if (!k) {
    std::string known;
    for (const Kernel& r : registered_kernels())
      if (r.impl == Impl::solution) known += (known.empty() ? "" : ", ") + std::to_string(r.module);
    throw UserError("unknown module " + std::to_string(module) + " (modules: " + known + ")");
  }
  return *k;
}

}  // namespace

// Shape flags override the defaults; a CPU module (or any module in the CPU emulation) gets a
// smaller default shape.
Problem shape_from_options(const ShapeOptions& s, bool cpu_module) {
  const int def_seq = cpu_module ? 256 : 1024, def_heads = cpu_module ? 2 : 8;
  const int seq_q = s.seq_q.value_or(s.seq.value_or(def_seq));
  const int seq_k = s.seq_k.value_or(s.seq.value_or(def_seq));
  Problem p = Problem::make(s.batch.value_or(1), s.heads.value_or(def_heads), seq_q, seq_k,
                            s.dim.value_or(64), s.causal, parse_layout(s.layout),
                            s.kv_heads.value_or(0));
  p.scale = s.scale;
  return p;
}

namespace {

// Refuses problems whose buffers cannot fit on the device, before any allocation.
void require_memory(const Problem& p, const Kernel& k) {
  if (k.backend != Backend::gpu) return;
  require_device_memory(p.describe(), attention_buffer_bytes(p), "Q, K, V and O");
}

// Host memory a run needs: Q, K, V and O as float32 (the CLI keeps its inputs on the host,
// and module 00 computes there), plus the double-precision reference output and a float32
// copy of the kernel's output when verifying. Refused before any allocation.
double host_bytes_needed(const Problem& p, bool verify) {
  const double tensors = 4.0 * (double(p.q_elements()) + 2.0 * double(p.kv_elements()) +
                                double(p.o_elements()));
  return tensors + (verify ? 12.0 * double(p.o_elements()) : 0.0);
}

void require_host_memory(const Problem& p, bool verify) {
  cli::require_host_memory(p.describe(), host_bytes_needed(p, verify),
                           std::string("Q, K, V, O") + (verify ? " and the reference" : ""));
}

// ---------------------------------------------------------------------------------------------
// .npy inputs: Q is [B, H, Sq, D] (or [B, Sq, H, D] with --layout bshd); rank 3 drops B,
// rank 2 drops B and H. K and V have the same rank with Sk in place of Sq and KVH (K/V heads,
// a divisor of H: grouped K/V heads) in place of H.

struct Dims { int batch, heads, seq, dim; };

Dims dims_from_npy(const NpyArray& a, const std::string& path, Layout layout) {
  const auto& s = a.shape;
  for (int64_t n : s)
    if (n < 1 || n > INT32_MAX) throw UserError(path + ": shape " + shape_str(s) + " has an empty or huge axis");
  if (s.size() == 4)
    return layout == Layout::BHSD ? Dims{int(s[0]), int(s[1]), int(s[2]), int(s[3])}
                                  : Dims{int(s[0]), int(s[2]), int(s[1]), int(s[3])};
  if (s.size() == 3) return {1, int(s[0]), int(s[1]), int(s[2])};
  if (s.size() == 2) return {1, 1, int(s[0]), int(s[1])};
  throw UserError(path + ": rank " + std::to_string(s.size()) + " array " + shape_str(s) +
                  ", expected [batch, heads, seq, dim] (rank 4, 3 or 2)");
}

}  // namespace

Problem run_problem(const RunOptions& o, const Kernel& kernel, DType dtype, Inputs& in,
                    std::vector<int64_t>& out_shape, bool& from_files) {
  from_files = !o.q_path.empty() || !o.k_path.empty() || !o.v_path.empty();
  if (from_files && (o.q_path.empty() || o.k_path.empty() || o.v_path.empty()))
    throw UserError("--q, --k and --v go together: give all three .npy files");
  Problem p = from_files ? problem_from_npy(o, in, out_shape)
                         : shape_from_options(o.shape, kernel.backend == Backend::cpu || kEmulated);
  p.dtype = dtype;
  // .npy inputs are float32; a 16-bit kernel gets them rounded to nearest, and the host
  // copies are rounded the same way so that --verify compares against the reference on
  // exactly the values the kernel read (and --out writes those values' result).
  if (from_files) round_inputs(in, dtype);
  return p;
}

Problem problem_from_npy(const RunOptions& o, Inputs& in, std::vector<int64_t>& out_shape) {
  const Layout layout = parse_layout(o.shape.layout);
  NpyArray q = read_npy(o.q_path), k = read_npy(o.k_path), v = read_npy(o.v_path);
  const Dims dq = dims_from_npy(q, o.q_path, layout), dk = dims_from_npy(k, o.k_path, layout),
             dv = dims_from_npy(v, o.v_path, layout);
  if (k.shape != v.shape)
    throw UserError(o.v_path + ": shape " + shape_str(v.shape) + " differs from K's " +
                    shape_str(k.shape));
  if (q.shape.size() != k.shape.size() || dq.batch != dk.batch || dq.dim != dk.dim ||
      dq.heads % dk.heads != 0)
    throw UserError(o.k_path + ": shape " + shape_str(k.shape) + " does not match Q's " +
                    shape_str(q.shape) +
                    " (batch and dim must agree; K/V heads must equal or divide Q's heads)");
  (void)dv;
  const ShapeOptions& s = o.shape;
  require_agree(s.batch, dq.batch, "batch");
  require_agree(s.heads, dq.heads, "heads");
  require_agree(s.kv_heads, dk.heads, "kv-heads");
  require_agree(s.dim, dq.dim, "dim");
  require_agree(s.seq_q, dq.seq, "seq-q");
  require_agree(s.seq_k, dk.seq, "seq-k");
  // --seq sets both lengths; with files it must match both, as --seq-q and --seq-k must.
  if (s.seq && (*s.seq != dq.seq || *s.seq != dk.seq))
    throw UserError("--seq " + std::to_string(*s.seq) + " disagrees with the .npy files (seq_q " +
                    std::to_string(dq.seq) + ", seq_k " + std::to_string(dk.seq) + ")");
  // Refused here instead of failing --verify with a hint about the kernel.
  require_finite(q.data, o.q_path);
  require_finite(k.data, o.k_path);
  require_finite(v.data, o.v_path);
  Problem p = Problem::make(dq.batch, dq.heads, dq.seq, dk.seq, dq.dim, s.causal, layout,
                            dk.heads);
  p.scale = s.scale;
  in.q = std::move(q.data);
  in.k = std::move(k.data);
  in.v = std::move(v.data);
  out_shape = q.shape;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Timing and printing, shared with the inference path (cli_inference.cpp).

Timing time_launches(const std::function<Status(cudaStream_t)>& launch, int warmup, int iters) {
  Status status = Status::ok();
  Timing t = time_on_stream(
      [&](cudaStream_t stream) {
        Status s = launch(stream);
        if (!s && status) status = s;
      },
      warmup, iters);
  if (!status) throw UserError(status.message());
  return t;
}

bool may_time(const Kernel& kernel, int exit_code, std::ostream& out) {
  if (kEmulated && kernel.backend == Backend::gpu) {
    out << "  time: not measured (emulated on the CPU: correctness only, no timing)\n";
    return false;
  }
  if (exit_code != 0) {
    // A kernel that skips work finishes early: its time would read as a record speed.
    out << "  time: not measured, the output is wrong (fix the kernel first; a kernel that "
           "skips work looks fast)\n";
    return false;
  }
  return true;
}

void print_time(std::ostream& out, const Kernel& kernel, DType dtype, const Timing& t,
                double flops, double bytes) {
  const double seconds = t.median_ms * 1e-3;
  out << "  time " << fmt("%.4f", t.median_ms) << " ms (median of " << t.iterations << ", min "
      << fmt("%.4f", t.min_ms) << ")  " << fmt("%.2f", flops / seconds / 1e12) << " TFLOP/s  "
      << fmt("%.1f", bytes / seconds / 1e9) << " GB/s";
  if (kernel.backend == Backend::gpu) {
    const DeviceInfo d = query_device();
    const char* const beyond =
        dtype != DType::f32 ? " on the CUDA cores; 16-bit tensor cores go higher"
        : kernel.f32_on_tensor_cores
            ? " on the CUDA cores; this kernel's fp32 products run on the tensor cores (3xTF32)"
            : "";
    out << "  (device peak: " << fmt("%.1f", d.peak_fp32_tflops) << " TFLOP/s fp32" << beyond
        << ", " << fmt("%.0f", d.peak_bandwidth_gbs) << " GB/s)";
  }
  out << "\n";
}

void write_output(std::ostream& out, const std::string& path, const std::vector<int64_t>& shape,
                  const std::vector<float>& values, DType dtype) {
  // Always a float32 file (what NumPy and PyTorch read everywhere); for a 16-bit run it
  // holds the kernel's 16-bit outputs exactly, and the line below says so.
  write_npy(path, shape, values);
  out << "  wrote " << path << " " << shape_str(shape)
      << (dtype != DType::f32 ? std::string(" (float32 holding ") + dtype_name(dtype) + " values)"
                              : "")
      << "\n";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Timing a kernel: CUDA events for GPU modules, the host clock for the CPU module.

Timing time_kernel(const Kernel& kernel, const Problem& p, const Inputs& in, int warmup,
                   int iters) {
  if (Status s = supports_dtype(kernel, p.dtype); !s) throw UserError(s.message());
  if (kernel.backend == Backend::cpu) {
    std::vector<float> o(size_t(p.o_elements()));
    std::vector<double> samples;
    for (int i = 0; i < warmup + iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Status s = kernel.forward(p, in.q.data(), in.k.data(), in.v.data(), o.data(), nullptr);
      const auto t1 = std::chrono::steady_clock::now();
      if (!s) throw UserError(s.message());
      if (i >= warmup) samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return summarize_times(samples);
  }
  DeviceTensors tensors(p, in);  // in p.dtype's element type, as the kernel reads them
  return time_launches([&](cudaStream_t stream) { return tensors.forward(kernel, stream); },
                       warmup, iters);
}

// ---------------------------------------------------------------------------------------------
// attn run

int cmd_run(const RunOptions& o, std::ostream& out) {
  const Kernel& kernel = lookup_kernel(o.module, parse_impl(o.impl));
  check_backward_flags(o, kernel);
  check_modifier_flags(o.given, kernel);
  check_flags_for_module(o, kernel);
  if (kernel.inference) return cmd_run_inference(o, kernel, out);
  // The backward module with --backward; without it it runs the forward alone, below.
  if (o.backward.backward) return cmd_run_backward(o, kernel, out);
  // The modifier module with a modifier flag; without one it runs plain problems below.
  if (any_modifier_flag(o.given)) return cmd_run_modified(o, kernel, out);
  // The type before the GPU: running module 03 in bf16 is wrong on any machine.
  const DType dtype = dtype_for(kernel, o.dtype);
  if (Status s = supports_dtype(kernel, dtype); !s) throw UserError(s.message());
  require_gpu(kernel);

  Inputs in;
  std::vector<int64_t> out_shape;
  bool from_files = false;
  const Problem p = run_problem(o, kernel, dtype, in, out_shape, from_files);
  if (Status s = check_problem(kernel, p); !s) throw UserError(s.message());
  require_memory(p, kernel);
  if (!from_files) {
    require_host_memory(p, o.verify);
    in = random_inputs(p, o.seed.value_or(fresh_seed()));
    out_shape = parse_layout(o.shape.layout) == Layout::BSHD
                    ? std::vector<int64_t>{p.batch, p.seq_q, p.heads, p.head_dim}
                    : std::vector<int64_t>{p.batch, p.heads, p.seq_q, p.head_dim};
  }

  out << kernel.label() << "  " << p.describe() << " " << o.shape.layout
      << (from_files ? std::string("  inputs from .npy") +
                           (dtype != DType::f32 ? std::string(", rounded to ") + dtype_name(dtype)
                                                : "")
                     : "  seed " + std::to_string(in.seed))
      << "\n";
  int exit_code = 0;
  std::vector<float> result;
  if (o.verify) {
    CheckResult r = check_kernel(kernel, p, in);
    if (!r.status) throw UserError(r.status.message());
    out << "  " << r.comparison.summary() << "\n";
    for (const std::string& hint : diagnose(p, in, r)) out << "  hint: " << hint << "\n";
    if (!r.passed()) exit_code = 1;
    result = std::move(r.output);
  } else if (!o.out_path.empty() || !o.time) {
    if (Status s = run_kernel(kernel, p, in, result); !s) throw UserError(s.message());
    out << "  ran (add --verify to compare with the CPU reference)\n";
  }
  if (!o.out_path.empty()) write_output(out, o.out_path, out_shape, result, dtype);
  if (o.time && may_time(kernel, exit_code, out)) {
    const Timing t = time_kernel(kernel, p, in, o.warmup, o.iters);
    print_time(out, kernel, dtype, t, attention_flops(p), attention_bytes_fused(p));
    out << "  bytes: fused minimum " << human_bytes(attention_bytes_fused(p))
        << ", unfused (scores in memory) " << human_bytes(attention_bytes_unfused(p)) << " ("
        << fmt("%.1f", attention_bytes_unfused(p) / attention_bytes_fused(p)) << "x)\n";
  }
  return exit_code;
}

// ---------------------------------------------------------------------------------------------
// attn list / attn info

int cmd_list(std::ostream& out) {
  int name_width = int(std::strlen("name"));
  for (const Kernel& k : registered_kernels())
    name_width = std::max(name_width, int(k.name.size()));
  char line[512];
  std::snprintf(line, sizeof line, "%-6s  %-*s  %-7s  %s\n", "module", name_width, "name",
                "runs on", "what it teaches");
  out << line;
  for (const Kernel& k : registered_kernels()) {
    if (k.impl != Impl::solution) continue;
    std::snprintf(line, sizeof line, "%02d      %-*s  %-7s  %s\n", k.module, name_width,
                  k.name.c_str(), k.backend == Backend::gpu ? "GPU" : "CPU", k.title.c_str());
    out << line;
  }
  return 0;
}

// Device-to-device copy bandwidth, counting bytes read plus bytes written: the practical
// memory ceiling (spec-sheet bandwidth is rarely reached).
double measure_copy_gbs() {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<char> a(bytes), b(bytes);
  ATTN_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const Timing t = time_on_stream(
      [&](cudaStream_t s) {
        ATTN_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      2, 10);
  return 2.0 * double(bytes) / (t.median_ms * 1e-3) / 1e9;
}

int cmd_info(std::ostream& out) {
  const int count = cuda_device_count();
  if (count == 0) throw UserError(no_device_reason() + " (module 00 still runs on the CPU)");
  for (int i = 0; i < count; ++i) {
    const DeviceInfo d = query_device(i);
    out << "device " << i << ": " << d.summary() << "\n"
        << "  SM clock " << d.sm_clock_khz / 1000 << " MHz, memory " << d.mem_bus_bits
        << "-bit at " << d.mem_clock_khz / 1000 << " MHz, L2 " << human_bytes(d.l2_bytes)
        << ", shared memory " << human_bytes(d.smem_per_sm) << " per SM ("
        << human_bytes(d.smem_per_block_optin) << " per block), " << d.regs_per_sm
        << " registers per SM\n"
        << "  peak fp32 " << fmt("%.1f", d.peak_fp32_tflops) << " TFLOP/s, peak bandwidth "
        << fmt("%.0f", d.peak_bandwidth_gbs) << " GB/s (spec-sheet arithmetic)\n";
    if (i == 0) out << "  measured device copy " << fmt("%.0f", measure_copy_gbs()) << " GB/s\n";
  }
  return 0;
}

}  // namespace

Timing bench_time(const std::function<Timing(int, int)>& time, const BenchOptions& o) {
  // One run first (it also warms up) sets the iteration count, so that slow kernels stay near
  // max_seconds per shape: at least 3 timed runs, at most --iters.
  const Timing probe = time(0, 1);
  const double budget_runs = o.max_seconds * 1e3 / std::max(probe.median_ms, 1e-3);
  const int iters = std::clamp(int(budget_runs), 3, o.iters);
  const int warmup = budget_runs > iters + o.warmup ? o.warmup : 0;
  return time(warmup, iters);
}

void print_bench_row(std::ostream& out, const Kernel& kernel, const std::string& shape,
                     const Timing& t, double tflops, double gbs, const std::string& check) {
  char line[512];
  std::snprintf(line, sizeof line, "%-20s %-34s %9.3f %8.2f %8.1f   %s\n", kernel.label().c_str(),
                shape.c_str(), t.median_ms, tflops, gbs, check.c_str());
  out << line;
}

json::Object bench_row(const Kernel& kernel) {
  json::Object row;
  row.add("kernel", kernel.label()).add("module", kernel.module).add("impl", impl_name(kernel.impl));
  return row;
}

namespace {

// ---------------------------------------------------------------------------------------------
// attn bench: a sweep of shapes over modules, written as JSON (see docs/results.md for the
// schema and scripts/plot_bench.py for the plots).

std::vector<Problem> bench_shapes(const std::string& preset) {
  std::vector<Problem> shapes;
  if (preset == "quick") {
    for (int n : {256, 1024}) shapes.push_back(Problem::make(1, 8, n, n, 64));
  } else if (preset == "ladder") {
    // 16k tokens per batch (batch = 16384 / seq), heads*dim = 2048 as in a 2k-wide model.
    for (bool causal : {false, true})
      for (auto [heads, dim] : {std::pair{32, 64}, std::pair{16, 128}})
        for (int n = 512; n <= 16384; n *= 2)
          shapes.push_back(Problem::make(16384 / n, heads, n, n, dim, causal));
  } else {
    throw UserError("unknown bench preset '" + preset + "' (quick, ladder)");
  }
  return shapes;
}

// One dense shape of the sweep: checked when the CPU reference is affordable, timed, printed.
json::Object bench_dense(const Kernel& kernel, const Problem& p, const BenchOptions& o,
                         std::ostream& out) {
  std::string status = "ok", check = "-";
  Timing t;
  if (Status s = kernel.supports(p); !s) {
    status = "unsupported: " + s.message();
  } else {
    const Inputs in = random_inputs(p, 1234);
    // Correctness at this shape when the CPU reference is affordable (<= 4 GFLOP).
    if (attention_flops(p) <= 4e9) {
      const CheckResult r = check_kernel(kernel, p, in);
      check = r.passed() ? "pass" : "FAIL";
    }
    t = bench_time([&](int warmup, int iters) { return time_kernel(kernel, p, in, warmup, iters); },
                   o);
  }
  const bool ok = status == "ok";
  const double seconds = t.median_ms * 1e-3;
  const double tflops = ok ? attention_flops(p) / seconds / 1e12 : 0.0;
  const double gbs = ok ? attention_bytes_fused(p) / seconds / 1e9 : 0.0;
  if (ok) print_bench_row(out, kernel, p.describe(), t, tflops, gbs, check);
  json::Object row = bench_row(kernel);
  row.add("batch", p.batch).add("heads", p.heads).add("kv_heads", p.kv_heads)
      .add("seq_q", p.seq_q).add("seq_k", p.seq_k).add("head_dim", p.head_dim)
      .add("causal", p.causal).add("dtype", dtype_name(p.dtype)).add("modifiers", "none")
      .add("status", status).add("check", check).add("median_ms", t.median_ms).add("min_ms", t.min_ms)
      .add("iterations", t.iterations).add("flops", attention_flops(p))
      .add("tflops", tflops).add("gbs", gbs)
      .add("bytes_fused", attention_bytes_fused(p))
      .add("bytes_unfused", attention_bytes_unfused(p))
      .add("device_bytes", attention_buffer_bytes(p));
  return row;
}

// The flags that only the decode shapes of an inference module use.
const char* const kDecodeBenchFlags[] = {"--seqlens-k", "--random-seqlens", "--page-size",
                                         "--shuffle-pages", "--batch"};

int cmd_bench(const BenchOptions& o, std::ostream& out) {
  std::vector<int> modules = o.modules;
  if (modules.empty())
    for (const Kernel& k : registered_kernels())
      if (k.impl == Impl::solution && k.backend == Backend::gpu) modules.push_back(k.module);

  // Each module runs in its own type (f32 for 00-06, bf16 for the 16-bit ones) unless --dtype
  // names one; then the modules that do not take it are left out with a note. Decided before
  // looking for a GPU: a wrong command line gets the same answer on any machine.
  std::vector<std::pair<const Kernel*, DType>> runs;
  for (int module : modules) {
    const Kernel& kernel = lookup_kernel(module, parse_impl(o.impl));
    if (kernel.backend != Backend::gpu) continue;
    const DType dtype = dtype_for(kernel, o.dtype);
    if (Status s = supports_dtype(kernel, dtype); !s) {
      out << "note: skipped: " << s.message() << "\n";
      continue;
    }
    runs.emplace_back(&kernel, dtype);
  }
  if (runs.empty() && !o.dtype.empty())
    throw UserError("none of the modules to benchmark takes --dtype " + o.dtype);

  // Dense modules sweep the preset's Problems; an inference module (module 10) sweeps decode
  // shapes, whose lengths and paging the decode flags set.
  const bool any_inference = std::any_of(runs.begin(), runs.end(),
                                         [](const auto& run) { return run.first->inference; });
  for (const char* flag : kDecodeBenchFlags)
    if (given(o.given, flag) && !any_inference)
      throw UserError(std::string(flag) + " sets the decode shapes of an inference module "
                      "(module 10); none of the modules benchmarked here is one");
  const std::vector<PagedProblem> decode_shapes =
      any_inference ? decode_bench_shapes(o, DType::bf16) : std::vector<PagedProblem>{};

  std::vector<Problem> shapes = bench_shapes(o.preset);
  if (o.causal) {
    // Every shape with the causal mask; a shape the preset has both ways is kept once.
    std::vector<Problem> causal;
    for (Problem p : shapes) {
      p.causal = true;
      if (std::none_of(causal.begin(), causal.end(),
                       [&](const Problem& c) { return c.describe() == p.describe(); }))
        causal.push_back(p);
    }
    shapes = std::move(causal);
  }
  if (o.kv_heads)
    for (Problem& p : shapes) {
      p = Problem::make(p.batch, p.heads, p.seq_q, p.seq_k, p.head_dim, p.causal, Layout::BHSD,
                        *o.kv_heads);
      if (Status s = validate(p); !s)
        throw UserError("--kv-heads " + std::to_string(*o.kv_heads) + " on preset '" + o.preset +
                        "' (" + p.describe() + "): " + s.message());
    }

  // Module 12's modifiers apply to every dense shape of the modules that have them; the other
  // modules run the plain shapes beside them (their rows say "modifiers": "none").
  const ModifierSpec modifiers =
      any_modifier_flag(o.given) ? modifier_spec(o.modifiers, o.given) : ModifierSpec{};
  if (modifiers.any()) {
    const auto with_modifiers = [](const auto& run) { return run.first->modifiers != nullptr; };
    if (std::none_of(runs.begin(), runs.end(), with_modifiers))
      throw UserError(first_modifier_flag(o.given) + " needs " + modifier_module() +
                      " (modifiers); none of the modules benchmarked here has them");
    for (const auto& [kernel, dtype] : runs) {
      if (!kernel->modifiers) continue;
      for (Problem p : shapes) {
        p.dtype = dtype;
        if (Status s = validate(p, modifiers); !s)
          throw UserError(s.message() + " (shape " + p.describe() + " of preset '" + o.preset +
                          "'" + (p.causal ? "" : "; attn bench --causal runs every shape with "
                                                 "the causal mask") + ")");
      }
    }
    for (const auto& [kernel, dtype] : runs)
      if (!kernel->modifiers)
        out << "note: module " << fmt("%02.0f", kernel->module)
            << " has no modifiers: it runs the plain shapes (\"modifiers\": \"none\")\n";
  }

  if (cuda_device_count() == 0) throw UserError(no_device_reason() + ": the benchmark needs a GPU");
  const DeviceInfo dev = query_device();
  const double copy_gbs = measure_copy_gbs();

  std::vector<json::Object> rows;
  out << "device: " << dev.summary() << ", measured copy " << fmt("%.0f", copy_gbs) << " GB/s\n";
  out << "kernel               shape                               ms      TFLOP/s   GB/s   check\n";
  for (const auto& [kernel_ptr, dtype] : runs) {
    const Kernel& kernel = *kernel_ptr;
    if (kernel.inference) {
      for (PagedProblem p : decode_shapes) {
        p.dtype = dtype;
        rows.push_back(bench_decode(kernel, p, o, out));
      }
      continue;
    }
    for (Problem p : shapes) {
      p.dtype = dtype;  // the presets' shapes are the same for every type
      rows.push_back(kernel.modifiers && modifiers.any()
                         ? bench_modified(kernel, p, modifiers, o, out)
                         : bench_dense(kernel, p, o, out));
    }
  }
  json::Document doc("attn-bench/1");
  doc.field("created", "\"" + json::utc_now() + "\"")
      .field("preset", "\"" + json::escape(o.preset) + "\"")
      .field("modifiers", "\"" + json::escape(modifiers.describe()) + "\"")
      .field("device", json::device(dev).add("measured_copy_gbs", copy_gbs))
      .list("results", rows);
  if (Status s = doc.write(o.out_path); !s) throw UserError(s.message());
  out << "wrote " << o.out_path << "\n";
  return 0;
}

// The flags the user typed, by their first long name ("--seq" for --seq_len or -n too), so
// that a flag which does not apply to the module is refused instead of silently ignored.
std::vector<std::string> given_flags(const CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* option : cmd->get_options())
    if (option->count() > 0) names.push_back(option->get_name());
  return names;
}

// Module 10's flags: per-sequence lengths, the paged cache, packed prefill.
void add_inference_options(CLI::App* cmd, InferenceOptions& o, bool run) {
  cmd->add_option("--seqlens-k", o.seqlens_k,
                  "inference modules: the cache length (decode) or key length (--varlen) of each "
                  "sequence, e.g. 1,17,4096, or a .npy file of int32/int64 lengths");
  cmd->add_option("--random-seqlens", o.random_seqlens,
                  "inference modules: --batch random lengths in [0, MAX] from the seed")
      ->check(at_least(0));
  cmd->add_option("--page-size", o.page_size,
                  "inference modules: tokens per page of the KV cache, a power of two (default 16)");
  cmd->add_flag("--shuffle-pages", o.shuffle_pages,
                "inference modules: scatter each sequence's pages over the pool (default: in order)");
  if (!run) return;
  cmd->add_option("--seqlens-q", o.seqlens_q,
                  "with --varlen: the query length of each sequence (default: = --seqlens-k)");
  cmd->add_flag("--varlen", o.varlen,
                "inference modules: packed variable-length prefill instead of paged decode");
  cmd->add_option("--k-cache", o.k_cache_path,
                  "decode: K cache from a float32 .npy [pages, page_size, KVH, D]");
  cmd->add_option("--v-cache", o.v_cache_path,
                  "decode: V cache from a float32 .npy [pages, page_size, KVH, D]");
  cmd->add_option("--block-table", o.block_table_path,
                  "decode: block table from an int32/int64 .npy [batch, pages_per_seq]");
}

}  // namespace
}  // namespace attn::cli

namespace attn {

using namespace cli;

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"attn: run, check and time the course's attention kernels", "attn"};
  app.require_subcommand(1);

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "run one module on one shape");
  run_cmd->add_option("--module,-m", run.module, "module number (see `attn list`)")->required();
  run_cmd->add_option("--impl", run.impl, "exercise or solution")
      ->check(CLI::IsMember({"exercise", "solution"}));
  add_shape_options(run_cmd, run.shape);
  // Flags also take a value, Composable Kernel style: --verify=1, --time=0 (or true/false;
  // anything else is a parse error, see zero_or_one).
  run_cmd->add_flag("--verify", run.verify,
                    "compare with the double-precision CPU reference (--verify=0/1 also works)")
      ->check(zero_or_one("--verify"));
  run_cmd->add_flag("--time", run.time,
                    "time it: median of --iters after --warmup (--time=0/1 also works)")
      ->check(zero_or_one("--time"));
  run_cmd->add_option("--warmup", run.warmup, "untimed runs first")->check(at_least(0));
  run_cmd->add_option("--iters", run.iters, "timed runs")->check(kAtLeastOne);
  add_dtype_option(run_cmd, run.dtype, "the module's own: f32 for 00-06, bf16 from 07 on");
  run_cmd->add_option("--seed", run.seed, "seed of the random inputs (printed when not given)");
  run_cmd->add_option("--q", run.q_path,
                      "Q from a float32 .npy file [B,H,Sq,D] (rounded to --dtype if 16-bit); "
                      "module 10: [B,Sq,H,D] for decode, packed [total_q,H,D] with --varlen");
  run_cmd->add_option("--k", run.k_path,
                      "K from a float32 .npy file [B,KVH,Sk,D] (module 10 --varlen: [total_k,KVH,D])");
  run_cmd->add_option("--v", run.v_path, "V from a float32 .npy file, K's shape");
  run_cmd->add_option("--out", run.out_path, "write O to this .npy file");
  add_inference_options(run_cmd, run.inference, true);
  add_modifier_options(run_cmd, run.modifiers, true);
  add_backward_options(run_cmd, run.backward);

  app.add_subcommand("list", "list the modules");
  app.add_subcommand("info", "show the GPU and its ceilings");

  BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "sweep shapes and write JSON");
  bench_cmd->add_option("--modules", bench.modules, "module numbers (default: all GPU modules)")
      ->delimiter(',');
  bench_cmd->add_option("--impl", bench.impl, "exercise or solution")
      ->check(CLI::IsMember({"exercise", "solution"}));
  bench_cmd->add_option("--preset", bench.preset, "quick or ladder (default)");
  bench_cmd->add_option("--kv-heads,--kv_heads", bench.kv_heads,
                        "K/V heads for every shape (GQA/MQA; must divide the preset's heads)")
      ->check(kAtLeastOne);
  add_dtype_option(bench_cmd, bench.dtype,
                   "each module's own; with --dtype, modules that do not take it are skipped");
  bench_cmd->add_option("--out", bench.out_path, "JSON file to write");
  bench_cmd->add_option("--warmup", bench.warmup)->check(at_least(0));
  bench_cmd->add_option("--iters", bench.iters, "at most this many timed runs")->check(kAtLeastOne);
  bench_cmd->add_option("--max-seconds", bench.max_seconds, "time budget per shape");
  add_inference_options(bench_cmd, bench.inference, false);
  bench_cmd->add_option("--batch", bench.batch,
                        "inference modules: the number of --random-seqlens lengths (default 8)")
      ->check(kAtLeastOne);
  bench_cmd->add_flag("--causal", bench.causal,
                      "every dense shape of the preset with the causal mask (ladder: its causal "
                      "half)");
  add_modifier_options(bench_cmd, bench.modifiers, false);

  const auto& subs = app.get_subcommands({});
  if (!args.empty() && args[0][0] != '-' &&
      std::none_of(subs.begin(), subs.end(), [&](CLI::App* s) { return s->get_name() == args[0]; })) {
    err << "attn: unknown command '" << args[0] << "' (commands: run, list, info, bench)\n";
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed list
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    const auto subs = app.get_subcommands();
    out << (subs.empty() ? app.help() : subs.front()->help());
    return 0;
  } catch (const CLI::ParseError& e) {
    CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
    err << "attn: " << e.what() << " (see `attn " << (sub == &app ? "" : sub->get_name() + " ")
        << "--help`)\n";
    return 2;
  }
  run.given = given_flags(run_cmd);
  bench.given = given_flags(bench_cmd);
  try {
    if (run_cmd->parsed()) return cmd_run(run, out);
    if (bench_cmd->parsed()) return cmd_bench(bench, out);
    if (app.got_subcommand("list")) return cmd_list(out);
    return cmd_info(out);
  } catch (const UserError& e) {
    err << "attn: " << e.what() << "\n";
  } catch (const NpyError& e) {
    err << "attn: " << e.what() << "\n";
  } catch (const CudaError& e) {
    err << "attn: CUDA error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    err << "attn: out of host memory (" << human_bytes(available_host_memory_bytes())
        << " available): try a smaller shape\n";
  } catch (const std::length_error&) {
    err << "attn: the problem is too large to hold in host memory: try a smaller shape\n";
  } catch (const std::exception& e) {
    err << "attn: " << e.what() << "\n";
  }
  return 1;
}

}  // namespace attn
