// The modifier part of the `attn` command line: module 12's score modifiers, masks and RoPE for
// `attn run` and `attn bench` (common/cli.cpp parses the flags and calls in here when one of
// them is given; module 12 without them runs plain problems as module 07 does).
//
//   attn run -m 12 --causal --window 1024 [--verify] [--time]
//   attn run -m 12 --alibi | --random-bias | --bias b.npy | --softcap 50 | --relative ...
//   attn run -m 12 --documents 4 | --segments ids.npy [--segments-k key_ids.npy]
//   attn run -m 12 --rope half [--rope-base 500000]
//   attn bench --modules 7,12 --causal --window 1024
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "common/cli_internal.h"
#include "common/device.h"
#include "common/half.h"
#include "common/modifier_runner.h"
#include "common/modifiers.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/runner.h"

namespace attn::cli {

namespace {

constexpr uint64_t kBenchSeed = 1234;

// Every flag of module 12, by its first long name; the score modifiers among them exclude one
// another (the kernel applies one).
const char* const kModifierFlags[] = {
    "--alibi",   "--bias",   "--random-bias", "--bias-broadcast", "--softcap",
    "--relative", "--rel-buckets", "--rel-max-distance", "--rel-causal", "--window",
    "--prefix",  "--documents", "--segments", "--segments-k", "--rope", "--rope-base"};
const char* const kScoreFlags[] = {"--alibi", "--bias", "--random-bias", "--softcap",
                                   "--relative"};

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

std::string percent(double part, double whole) {
  return fmt("%.1f", whole > 0 ? 100.0 * part / whole : 0.0) + "%";
}

// ---------------------------------------------------------------------------------------------
// Tensors from files

// --bias: [batch or 1, heads or 1, seq_q, seq_k], float32 or float16, rounded to p.dtype. The
// file's leading axes say which ones the bias has (m.bias_per_batch, m.bias_per_head).
std::vector<float> read_bias(const std::string& path, const Problem& p, ModifierSpec& m) {
  NpyArray a = read_npy_f32_or_f16(path);
  const auto either = [](int n) { return n > 1 ? "1 or " + std::to_string(n) : std::string("1"); };
  const std::string want = "(" + either(p.batch) + ", " + either(p.heads) + ", " +
                           std::to_string(p.seq_q) + ", " + std::to_string(p.seq_k) + ")";
  const std::vector<int64_t>& s = a.shape;
  if (s.size() != 4)
    throw UserError("--bias " + path + ": shape " + shape_str(s) + ", expected [batch or 1, "
                    "heads or 1, seq_q, seq_k] = " + want);
  if ((s[0] != 1 && s[0] != p.batch) || (s[1] != 1 && s[1] != p.heads) || s[2] != p.seq_q ||
      s[3] != p.seq_k)
    throw UserError("--bias " + path + ": shape " + shape_str(s) + " does not fit " +
                    p.describe() + ": expected " + want + " (the shape flags set the problem)");
  m.bias_per_batch = p.batch > 1 && s[0] == p.batch;
  m.bias_per_head = p.heads > 1 && s[1] == p.heads;
  require_finite(a.data, path);
  std::vector<float> bias = std::move(a.data);
  for (size_t i = 0; i < bias.size(); ++i) {
    const float rounded = round_to_dtype(bias[i], p.dtype);
    if (!std::isfinite(rounded))
      throw UserError("--bias " + path + ": element " + std::to_string(i) + " (" +
                      fmt("%g", bias[i]) + ") is beyond the range of " + dtype_name(p.dtype) +
                      " (largest 65504)");
    bias[i] = rounded;
  }
  return bias;
}

// --segments / --segments-k: int32 or int64 ids [batch, seq] ([seq] for batch 1).
std::vector<int32_t> read_segments(const std::string& path, const char* flag, int batch, int seq,
                                   const char* axis) {
  NpyIntArray a = read_npy_int32(path);
  const bool fits = (a.shape.size() == 2 && a.shape[0] == batch && a.shape[1] == seq) ||
                    (a.shape.size() == 1 && batch == 1 && a.shape[0] == seq);
  if (!fits)
    throw UserError(std::string(flag) + " " + path + ": shape " + shape_str(a.shape) +
                    ", expected [batch, " + axis + "] = (" + std::to_string(batch) + ", " +
                    std::to_string(seq) + ")");
  return std::move(a.data);
}

// The modifier inputs of a run: random from the seed, or read from the files of the flags
// (which may change the bias axes of m).
ModifierInputs run_inputs(const ModifierOptions& f, const Problem& p, ModifierSpec& m,
                          uint64_t seed) {
  ModifierSpec random_part = m;
  if (!f.bias_path.empty()) random_part.score = ScoreMod::none;
  if (!f.segments_path.empty()) random_part.documents = false;
  ModifierInputs mi = random_modifier_inputs(p, random_part, seed, f.documents.value_or(1));
  if (!f.bias_path.empty()) mi.bias = read_bias(f.bias_path, p, m);
  if (!f.segments_path.empty()) {
    mi.seg_q = read_segments(f.segments_path, "--segments", p.batch, p.seq_q, "seq_q");
    if (!f.segments_k_path.empty())
      mi.seg_k = read_segments(f.segments_k_path, "--segments-k", p.batch, p.seq_k, "seq_k");
    else if (p.seq_q == p.seq_k)
      mi.seg_k = mi.seg_q;  // one id per token, queries and keys alike
    else
      throw UserError("--segments " + f.segments_path + " gives the queries' ids; with seq_q != "
                      "seq_k (" + std::to_string(p.seq_q) + " and " + std::to_string(p.seq_k) +
                      ") give the keys' ids too: --segments-k FILE [batch, seq_k]");
  }
  if (Status s = validate_inputs(p, m, mi); !s) {
    // Name the file a bad id came from.
    const std::string& text = s.message();
    std::string from;
    if (text.rfind("seg_q", 0) == 0) from = "--segments " + f.segments_path + ": ";
    if (text.rfind("seg_k", 0) == 0)
      from = f.segments_k_path.empty() ? "--segments " + f.segments_path + ": "
                                       : "--segments-k " + f.segments_k_path + ": ";
    throw UserError(from + text);
  }
  return mi;
}

// ---------------------------------------------------------------------------------------------
// Memory, before anything is allocated

double modifier_elements(const Problem& p, const ModifierSpec& m) {
  return double(bias_elements(p, m)) +
         (m.documents ? double(p.batch) * (double(p.seq_q) + p.seq_k) : 0.0) +
         (m.score == ScoreMod::relative ? double(p.heads) * (double(p.seq_q) + p.seq_k) : 0.0);
}

// Device: Q, K, V, O in p.dtype, the bias in p.dtype, ids and distance table in 4 bytes.
double modifier_device_bytes(const Problem& p, const ModifierSpec& m) {
  return attention_buffer_bytes(p) + dtype_bytes(p.dtype) * double(bias_elements(p, m)) +
         4.0 * (modifier_elements(p, m) - double(bias_elements(p, m)));
}

// Host: the float32 tensors and modifier inputs; with --verify their rounded copies, the
// double reference and a float copy of O.
double modifier_host_bytes(const Problem& p, const ModifierSpec& m, bool verify) {
  const double inputs = 4.0 * (double(p.q_elements()) + 2.0 * double(p.kv_elements()) +
                               modifier_elements(p, m));
  const double o = double(p.o_elements());
  return inputs + 4.0 * o + (verify ? inputs + 12.0 * o : 0.0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Flags

void add_modifier_options(CLI::App* cmd, ModifierOptions& o, bool run) {
  const std::string m12 = "module 12: ";
  cmd->add_flag("--alibi", o.alibi,
                m12 + "ALiBi: score -= slope(head) * |query position - key position|");
  if (run)
    cmd->add_option("--bias", o.bias_path,
                    m12 + "add a bias from a float32 or float16 .npy [batch or 1, heads or 1, "
                          "seq_q, seq_k] (a size-1 axis is shared), rounded to --dtype");
  cmd->add_flag("--random-bias", o.random_bias,
                m12 + "add a random bias in [-2, 2) from the seed, one per head (see "
                      "--bias-broadcast)");
  cmd->add_option("--bias-broadcast", o.bias_broadcast,
                  "with --random-bias: the axes the bias shares: batch ([1, H, Sq, Sk], the "
                  "default), heads ([B, 1, Sq, Sk]), both ([1, 1, Sq, Sk]) or none ([B, H, Sq, Sk])")
      ->check(CLI::IsMember({"none", "batch", "heads", "both"}));
  cmd->add_option("--softcap", o.softcap,
                  m12 + "soft-cap the scores: cap * tanh(score / cap) (Gemma 2 uses 50)");
  cmd->add_flag("--relative", o.relative,
                m12 + "T5 relative position buckets, with a random [heads, buckets] table from "
                      "the seed");
  cmd->add_option("--rel-buckets", o.rel_buckets, "with --relative: the buckets (default 32)");
  cmd->add_option("--rel-max-distance", o.rel_max_distance,
                  "with --relative: distances from this on share the last bucket (default 128)");
  cmd->add_flag("--rel-causal", o.rel_causal,
                "with --relative: one-way buckets, as a decoder's (keys after the query share "
                "bucket 0)");
  cmd->add_option("--window", o.window,
                  m12 + "with --causal: a sliding window of W keys ending at the query's position");
  cmd->add_option("--prefix", o.prefix,
                  m12 + "with --causal: prefix-LM, every query also sees the first P keys");
  cmd->add_option("--documents", o.documents,
                  m12 + "N packed documents of random lengths per batch entry (from the seed); a "
                        "query sees only its own document's keys");
  if (run) {
    cmd->add_option("--segments", o.segments_path,
                    m12 + "packed documents from an int32/int64 .npy of the queries' segment "
                          "ids [batch, seq_q], never decreasing along a row; they are the keys' "
                          "ids too when seq_q == seq_k");
    cmd->add_option("--segments-k", o.segments_k_path,
                    "with --segments: the keys' segment ids [batch, seq_k] (needed when seq_q "
                    "!= seq_k)");
  }
  cmd->add_option("--rope", o.rope,
                  m12 + "rotary position embeddings on q and k inside the kernel: interleaved "
                        "(pairs 2m, 2m+1: GPT-J) or half (pairs m, m + dim/2: GPT-NeoX, Llama)")
      ->check(CLI::IsMember({"interleaved", "half"}));
  cmd->add_option("--rope-base", o.rope_base,
                  "with --rope: the base of the frequencies (default 10000; Llama 3: 500000)");
}

std::string modifier_module() {
  for (const Kernel& k : registered_kernels())
    if (k.modifiers && k.impl == Impl::solution) return "module " + std::to_string(k.module);
  return "module 12";
}

std::string first_modifier_flag(const std::vector<std::string>& flags) {
  for (const char* flag : kModifierFlags)
    if (given(flags, flag)) return flag;
  return "";
}

bool any_modifier_flag(const std::vector<std::string>& flags) {
  return !first_modifier_flag(flags).empty();
}

void check_modifier_flags(const std::vector<std::string>& flags, const Kernel& kernel) {
  if (kernel.modifiers) return;
  const std::string flag = first_modifier_flag(flags);
  if (!flag.empty())
    throw UserError(flag + " needs " + modifier_module() + " (modifiers); " +
                    module_name(kernel) + " runs " +
                    (kernel.inference ? "decode and prefill without them" : "plain attention"));
}

ModifierSpec modifier_spec(const ModifierOptions& f, const std::vector<std::string>& flags) {
  const auto has = [&](const char* flag) { return given(flags, flag); };
  if (has("--bias") && has("--random-bias"))
    throw UserError("--bias and --random-bias both give the bias: use one");
  std::vector<std::string> scores;
  for (const char* flag : kScoreFlags)
    if (has(flag)) scores.push_back(flag);
  if (scores.size() > 1)
    throw UserError(scores[0] + " and " + scores[1] + " are both score modifiers: " +
                    modifier_module() + " applies one at a time");
  if (has("--bias-broadcast") && !has("--random-bias"))
    throw UserError("--bias-broadcast goes with --random-bias (a --bias file's shape says which "
                    "axes it has)");
  for (const char* flag : {"--rel-buckets", "--rel-max-distance", "--rel-causal"})
    if (has(flag) && !has("--relative"))
      throw UserError(std::string(flag) + " goes with --relative (T5 relative position buckets)");
  if (has("--rope-base") && !has("--rope"))
    throw UserError("--rope-base goes with --rope (interleaved or half)");
  if (has("--segments-k") && !has("--segments"))
    throw UserError("--segments-k goes with --segments (the queries' segment ids)");
  if (has("--documents") && has("--segments"))
    throw UserError("--documents and --segments both give the documents: use one");
  if (f.documents && *f.documents < 1)
    throw UserError("--documents must be >= 1 (got " + std::to_string(*f.documents) + ")");
  for (const auto& [flag, value] : {std::pair{"--window", f.window}, {"--prefix", f.prefix}})
    if (has(flag) && value < 1)
      throw UserError(std::string(flag) + " must be >= 1 (got " + std::to_string(value) + ")");

  ModifierSpec m;
  if (has("--alibi")) m.score = ScoreMod::alibi;
  if (has("--bias") || has("--random-bias")) {
    m.score = ScoreMod::bias;
    m.bias_per_batch = f.bias_broadcast == "none" || f.bias_broadcast == "heads";
    m.bias_per_head = f.bias_broadcast == "none" || f.bias_broadcast == "batch";
  }
  if (has("--softcap")) {
    m.score = ScoreMod::softcap;
    m.softcap = f.softcap;
  }
  if (has("--relative")) {
    m.score = ScoreMod::relative;
    m.rel_buckets = f.rel_buckets;
    m.rel_max_distance = f.rel_max_distance;
    m.rel_bidirectional = !f.rel_causal;
  }
  m.window = f.window;
  m.prefix = f.prefix;
  m.documents = has("--documents") || has("--segments");
  if (has("--rope")) {
    m.rope = f.rope == "half" ? RopeStyle::half : RopeStyle::interleaved;
    m.rope_base = f.rope_base;
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// attn run

int cmd_run_modified(const RunOptions& o, const Kernel& kernel, std::ostream& out) {
  const ModifierOptions& f = o.modifiers;
  // The type first, as for every module: module 12 in f32 is wrong on any machine.
  const DType dtype = dtype_for(kernel, o.dtype);
  if (Status s = supports_dtype(kernel, dtype); !s) throw UserError(s.message());
  ModifierSpec m = modifier_spec(f, o.given);
  // One seed for Q, K, V and the modifier inputs: a run replays exactly.
  const uint64_t seed = o.seed.value_or(fresh_seed());

  Inputs in;
  std::vector<int64_t> out_shape;
  bool from_files = false;
  Problem p = run_problem(o, kernel, dtype, in, out_shape, from_files);
  if (Status s = check_problem(kernel, p, m); !s) throw UserError(s.message());
  require_host_memory(p.describe() + " " + m.describe(), modifier_host_bytes(p, m, o.verify),
                      std::string("Q, K, V, O, the modifier tensors") +
                          (o.verify ? " and the reference" : ""));
  const ModifierInputs mi = run_inputs(f, p, m, seed);
  // Again with the bias axes of a --bias file, which the module's supports() may look at.
  if (Status s = check_problem(kernel, p, m); !s) throw UserError(s.message());
  require_gpu(kernel);
  require_device_memory(p.describe() + " " + m.describe(), modifier_device_bytes(p, m),
                        "Q, K, V, O and the modifier tensors");
  if (!from_files) {
    in = random_inputs(p, seed);
    out_shape = parse_layout(o.shape.layout) == Layout::BSHD
                    ? std::vector<int64_t>{p.batch, p.seq_q, p.heads, p.head_dim}
                    : std::vector<int64_t>{p.batch, p.heads, p.seq_q, p.head_dim};
  }

  out << kernel.label() << "  " << p.describe() << " " << o.shape.layout << "  " << m.describe()
      << (from_files ? std::string("  inputs from .npy, rounded to ") + dtype_name(dtype) : "")
      << "  seed " << seed << "\n";
  int exit_code = 0;
  std::vector<float> result;
  if (o.verify) {
    ModifierCheck r = check_modified(kernel, p, m, in, mi);
    if (!r.status) throw UserError(r.status.message());
    out << "  " << r.comparison.summary() << "\n";
    for (const std::string& hint : diagnose_modified(p, m, mi, in, r))
      out << "  hint: " << hint << "\n";
    if (!r.passed()) exit_code = 1;
    result = std::move(r.output);
  } else if (!o.out_path.empty() || !o.time) {
    if (Status s = run_modified(kernel, p, m, in, mi, result); !s) throw UserError(s.message());
    out << "  ran (add --verify to compare with the CPU reference)\n";
  }
  if (!o.out_path.empty()) write_output(out, o.out_path, out_shape, result, dtype);
  if (o.time && may_time(kernel, exit_code, out)) {
    ModifierDeviceTensors tensors(p, m, in, mi);
    const Timing t = time_launches([&](cudaStream_t s) { return tensors.forward(kernel, s); },
                                   o.warmup, o.iters);
    print_time(out, kernel, dtype, t, modifier_flops(p, m, mi), modifier_bytes_fused(p, m));
    const double pairs = double(visible_pairs(p, m, mi));
    out << "  work: " << percent(pairs, double(p.batch) * p.seq_q * p.seq_k)
        << " of the (query, key) pairs are visible; TFLOP/s counts only those (the work of a "
           "kernel that skips masked tiles)\n";
  }
  return exit_code;
}

// ---------------------------------------------------------------------------------------------
// attn bench

json::Object bench_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                            const BenchOptions& o, std::ostream& out) {
  std::string status = "ok", check = "-";
  Timing t;
  ModifierInputs mi;
  size_t free_bytes = 0, total_bytes = 0;
  ATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double host = available_host_memory_bytes();
  if (Status s = check_problem(kernel, p, m); !s) {
    status = "unsupported: " + s.message();
  } else if (host > 0 && modifier_host_bytes(p, m, false) > host) {
    status = "skipped: needs " + human_bytes(modifier_host_bytes(p, m, false)) +
             " of host memory";
  } else if (modifier_device_bytes(p, m) > double(free_bytes)) {
    status = "skipped: needs " + human_bytes(modifier_device_bytes(p, m)) +
             " of device memory";
  } else {
    mi = random_modifier_inputs(p, m, kBenchSeed, o.modifiers.documents.value_or(1));
    const Inputs in = random_inputs(p, kBenchSeed);
    // Correctness at this shape when the CPU reference is affordable (<= 4 GFLOP).
    if (modifier_flops(p, m, mi) <= 4e9)
      check = check_modified(kernel, p, m, in, mi).passed() ? "pass" : "FAIL";
    ModifierDeviceTensors tensors(p, m, in, mi);
    t = bench_time(
        [&](int warmup, int iters) {
          return time_launches([&](cudaStream_t s) { return tensors.forward(kernel, s); },
                               warmup, iters);
        },
        o);
  }
  const bool ok = status == "ok";
  // A shape that did not run has no segment ids: its row counts the pairs of the other masks.
  ModifierSpec counted = m;
  if (!ok) counted.documents = false;
  const double flops = modifier_flops(p, counted, mi);
  const double bytes = modifier_bytes_fused(p, m);
  const double seconds = t.median_ms * 1e-3;
  const double tflops = ok ? flops / seconds / 1e12 : 0.0;
  const double gbs = ok ? bytes / seconds / 1e9 : 0.0;
  if (ok) print_bench_row(out, kernel, p.describe() + " " + m.describe(), t, tflops, gbs, check);
  json::Object row = bench_row(kernel);
  row.add("batch", p.batch).add("heads", p.heads).add("kv_heads", p.kv_heads)
      .add("seq_q", p.seq_q).add("seq_k", p.seq_k).add("head_dim", p.head_dim)
      .add("causal", p.causal).add("dtype", dtype_name(p.dtype)).add("modifiers", m.describe())
      .add("status", status).add("check", check).add("median_ms", t.median_ms)
      .add("min_ms", t.min_ms).add("iterations", t.iterations).add("flops", flops)
      .add("tflops", tflops).add("gbs", gbs).add("bytes_fused", bytes)
      .add("bytes_unfused", attention_bytes_unfused(p) + bytes - attention_bytes_fused(p))
      .add("device_bytes", modifier_device_bytes(p, m))
      .add("visible_pairs", double(visible_pairs(p, counted, mi)));
  if (m.documents) row.add("documents_per_row", o.modifiers.documents.value_or(1));
  return row;
}

}  // namespace attn::cli
