// The inference half of the `attn` command line: module 10's decode over a paged KV cache and
// its packed variable-length prefill, for `attn run` and `attn bench` (common/cli.cpp parses
// the flags and calls in here for an inference module).
//
//   attn run -m 10 --seqlens-k 1,17,4096 [--seq-q 1] [--heads 32 --kv-heads 8 --dim 128]
//                  [--page-size 16] [--shuffle-pages] [--causal] [--verify] [--time]
//   attn run -m 10 --random-seqlens 4096 --batch 8 ...
//   attn run -m 10 --q q.npy --k-cache k.npy --v-cache v.npy --block-table t.npy --seqlens-k ...
//   attn run -m 10 --varlen --seqlens-q 5,1,9 --seqlens-k 5,30,9 [--q q.npy --k k.npy --v v.npy]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "common/cli_internal.h"
#include "common/device.h"
#include "common/npy.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "common/random.h"
#include "common/runner.h"

namespace attn::cli {

namespace {

// Defaults when the flags do not say: a Llama-like head shape (the module takes head_dim 64
// or 128), a small batch, and lengths whose CPU reference takes a moment, not minutes.
constexpr int kDefaultHeads = 32;
constexpr int kDefaultDim = 128;
constexpr int kDefaultBatch = 4;
constexpr int kDefaultDecodeMaxLength = 4096;  // decode: keys per sequence
constexpr int kDefaultPrefillMaxLength = 256;  // prefill: queries (and keys) per sequence
constexpr int kDefaultBenchBatch = 8;
constexpr uint64_t kBenchSeed = 1234;

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

// ---------------------------------------------------------------------------------------------
// Which flags go with which module

struct FlagHint {
  const char* flag;
  const char* instead;
};

// Dense flags that have no meaning for an inference module, and what to use instead.
const FlagHint kDenseOnly[] = {
    {"--layout", "has fixed layouts: Q and O [batch, seq_q, heads, dim], the cache "
                 "[pages, page_size, kv_heads, dim], packed prefill [tokens, heads, dim]"},
    {"--seq-k", "takes one key length per sequence: --seqlens-k 1,17,4096 or --random-seqlens MAX"},
    {"--seq", "takes one length per sequence: --seqlens-k 1,17,4096 or --random-seqlens MAX "
              "(decode: --seq-q new tokens per sequence)"},
};

// Flags of decode only, refused with --varlen.
const char* const kDecodeOnly[] = {"--page-size", "--shuffle-pages", "--k-cache", "--v-cache",
                                   "--block-table"};

// Every inference flag, refused with a dense module.
const char* const kInferenceFlags[] = {"--seqlens-k",    "--seqlens-q", "--random-seqlens",
                                       "--page-size",    "--shuffle-pages", "--varlen",
                                       "--k-cache",      "--v-cache",   "--block-table"};

}  // namespace

void check_flags_for_module(const RunOptions& o, const Kernel& kernel) {
  if (!kernel.inference) {
    for (const char* flag : kInferenceFlags)
      if (given(o.given, flag))
        throw UserError(std::string(flag) + " is for inference modules (module 10: decode over a "
                        "paged KV cache, --varlen prefill); " + module_name(kernel) +
                        " runs dense problems (--seq-q, --seq-k)");
    return;
  }
  for (const FlagHint& hint : kDenseOnly)
    if (given(o.given, hint.flag))
      throw UserError(std::string(hint.flag) + " is for dense modules; " + module_name(kernel) +
                      " " + hint.instead);
  if (o.inference.varlen) {
    if (given(o.given, "--seq-q"))
      throw UserError("with --varlen each sequence has its own query length: --seqlens-q "
                      "(default: = --seqlens-k), not --seq-q");
    for (const char* flag : kDecodeOnly)
      if (given(o.given, flag))
        throw UserError(std::string(flag) + " is for paged decode; --varlen prefill reads packed "
                        "--q, --k and --v");
    return;
  }
  if (given(o.given, "--seqlens-q"))
    throw UserError("--seqlens-q goes with --varlen (prefill); decode has --seq-q new tokens per "
                    "sequence");
  for (const char* flag : {"--k", "--v"})
    if (given(o.given, flag))
      throw UserError(std::string(flag) + " is a packed prefill input (with --varlen); decode "
                      "reads --q, --k-cache, --v-cache and --block-table");
}

namespace {

// ---------------------------------------------------------------------------------------------
// Sequence lengths

// "1,17,4096", or a .npy file of int32/int64 lengths (rank 1).
std::vector<int> lengths_from(const std::string& text, const char* flag) {
  const std::string suffix = ".npy";
  if (text.size() > suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const NpyIntArray a = read_npy_int32(text);
    if (a.shape.size() != 1)
      throw UserError(text + ": shape " + shape_str(a.shape) +
                      ", expected a list of lengths (rank 1)");
    return std::vector<int>(a.data.begin(), a.data.end());
  }
  std::vector<int> lengths;
  if (Status s = parse_seqlens(text, &lengths); !s)
    throw UserError(std::string(flag) + ": " + s.message());
  return lengths;
}

// The key length of each sequence: --seqlens-k, or `batch` random lengths in [0, MAX] from the
// seed (--random-seqlens MAX, default `default_max`). `batch` is --batch, or the batch of the
// input file `batch_file` when that is not empty (for the message when --seqlens-k disagrees).
std::vector<int> key_lengths(const InferenceOptions& f, std::optional<int> batch,
                             const std::string& batch_file, uint64_t seed, int default_max) {
  if (f.seqlens_k && f.random_seqlens)
    throw UserError("--seqlens-k and --random-seqlens both give the lengths: use one");
  if (batch && *batch < 1)
    throw UserError("batch must be >= 1 (got " + std::to_string(*batch) + ")");
  if (!f.seqlens_k)
    return random_seqlens(batch.value_or(kDefaultBatch), f.random_seqlens.value_or(default_max),
                          seed);
  std::vector<int> lengths = lengths_from(*f.seqlens_k, "--seqlens-k");
  if (batch && size_t(*batch) != lengths.size())
    throw UserError(batch_file.empty()
                        ? "--batch " + std::to_string(*batch) + " disagrees with --seqlens-k (" +
                              std::to_string(lengths.size()) + " lengths)"
                        : "--seqlens-k gives " + std::to_string(lengths.size()) +
                              " lengths for the " + std::to_string(*batch) + " sequences of " +
                              batch_file);
  return lengths;
}

// ---------------------------------------------------------------------------------------------
// .npy inputs

// The axes of a tensor from a file, each in [least, 2^31).
std::vector<int> axes_of(const std::vector<int64_t>& shape, const std::string& path, size_t rank,
                         const char* layout, int least = 1) {
  if (shape.size() != rank)
    throw UserError(path + ": shape " + shape_str(shape) + " has rank " +
                    std::to_string(shape.size()) + ", expected " + layout + " (rank " +
                    std::to_string(rank) + ")");
  std::vector<int> axes;
  for (int64_t n : shape) {
    if (n < least || n > INT32_MAX)
      throw UserError(path + ": shape " + shape_str(shape) + " has an empty or huge axis (" +
                      layout + ")");
    axes.push_back(int(n));
  }
  return axes;
}

// Decode from Q [B, Sq, H, D], the caches [P, page_size, KVH, D] and the table
// [B, pages_per_seq]; lengths from --seqlens-k (or --random-seqlens).
PagedProblem decode_problem_from_npy(const RunOptions& o, DType dtype, uint64_t seed,
                                     PagedInputs& in) {
  const InferenceOptions& f = o.inference;
  NpyArray q = read_npy(o.q_path), k = read_npy(f.k_cache_path), v = read_npy(f.v_cache_path);
  const NpyIntArray table = read_npy_int32(f.block_table_path);
  const std::vector<int> dq = axes_of(q.shape, o.q_path, 4, "[batch, seq_q, heads, dim]");
  // A pool of 0 pages and a table of 0 columns are valid when every sequence is empty.
  const std::vector<int> dk =
      axes_of(k.shape, f.k_cache_path, 4, "[pages, page_size, kv_heads, dim]", 0);
  if (v.shape != k.shape)
    throw UserError(f.v_cache_path + ": shape " + shape_str(v.shape) + " differs from the K "
                    "cache's " + shape_str(k.shape));
  const std::vector<int> dt =
      axes_of(table.shape, f.block_table_path, 2, "[batch, pages_per_seq]", 0);
  if (dk[1] < 1 || dk[2] < 1 || dk[3] < 1)
    throw UserError(f.k_cache_path + ": shape " + shape_str(k.shape) +
                    " has an empty axis ([pages, page_size, kv_heads, dim])");
  if (dk[3] != dq[3])
    throw UserError(f.k_cache_path + ": head dim " + std::to_string(dk[3]) + " differs from Q's " +
                    std::to_string(dq[3]) + " (" + o.q_path + ")");
  if (dt[0] != dq[0])
    throw UserError(f.block_table_path + ": " + std::to_string(dt[0]) + " rows for the " +
                    std::to_string(dq[0]) + " sequences of " + o.q_path + " (one row each)");
  const ShapeOptions& s = o.shape;
  require_agree(s.batch, dq[0], "batch");
  require_agree(s.seq_q, dq[1], "seq-q");
  require_agree(s.heads, dq[2], "heads");
  require_agree(s.dim, dq[3], "dim");
  require_agree(s.kv_heads, dk[2], "kv-heads");
  if (given(o.given, "--page-size")) require_agree(f.page_size, dk[1], "page-size");
  if (!f.seqlens_k && !f.random_seqlens)
    throw UserError("the .npy files do not say how long each sequence is: give --seqlens-k "
                    "(a list, or a .npy of lengths)");
  std::vector<int> lengths = key_lengths(f, dq[0], o.q_path, seed, 0);
  require_finite(q.data, o.q_path);
  require_finite(k.data, f.k_cache_path);
  require_finite(v.data, f.v_cache_path);

  PagedProblem p = PagedProblem::make(dq[2], dk[2], dq[3], dq[1], std::move(lengths), dk[1],
                                      s.causal, dtype);
  p.pages_per_seq = dt[1];
  p.num_pages = dk[0];
  p.scale = s.scale;
  in.q = std::move(q.data);
  in.k_cache = std::move(k.data);
  in.v_cache = std::move(v.data);
  in.block_table = table.data;
  // .npy inputs are float32; the kernel gets them rounded to nearest, and the host copies are
  // rounded the same way so that --verify compares on exactly the values the kernel read.
  round_inputs(in, dtype);
  return p;
}

PagedProblem decode_problem(const RunOptions& o, DType dtype, uint64_t seed) {
  const ShapeOptions& s = o.shape;
  PagedProblem p = PagedProblem::make(
      s.heads.value_or(kDefaultHeads), s.kv_heads.value_or(0), s.dim.value_or(kDefaultDim),
      s.seq_q.value_or(1), key_lengths(o.inference, s.batch, "", seed, kDefaultDecodeMaxLength),
      o.inference.page_size, s.causal, dtype);
  p.scale = s.scale;
  return p;
}

// Prefill: lengths from the flags; packed Q [total_q, H, D], K and V [total_k, KVH, D] from
// files when given (their heads and dim then), else random.
VarlenProblem varlen_problem(const RunOptions& o, DType dtype, uint64_t seed, VarlenInputs& in,
                             bool from_files) {
  const InferenceOptions& f = o.inference;
  const ShapeOptions& s = o.shape;
  std::vector<int> keys = key_lengths(f, s.batch, "", seed, kDefaultPrefillMaxLength);
  std::vector<int> queries = f.seqlens_q ? lengths_from(*f.seqlens_q, "--seqlens-q") : keys;
  if (queries.size() != keys.size())
    throw UserError("--seqlens-q gives " + std::to_string(queries.size()) + " lengths and the "
                    "keys " + std::to_string(keys.size()) + ": one of each per sequence");
  int heads = s.heads.value_or(kDefaultHeads), kv_heads = s.kv_heads.value_or(0);
  int dim = s.dim.value_or(kDefaultDim);
  NpyArray q, k, v;
  if (from_files) {
    q = read_npy(o.q_path), k = read_npy(o.k_path), v = read_npy(o.v_path);
    const std::vector<int> dq = axes_of(q.shape, o.q_path, 3, "[total_q, heads, dim]");
    const std::vector<int> dk = axes_of(k.shape, o.k_path, 3, "[total_k, kv_heads, dim]", 0);
    if (v.shape != k.shape)
      throw UserError(o.v_path + ": shape " + shape_str(v.shape) + " differs from K's " +
                      shape_str(k.shape));
    if (dk[1] < 1 || dk[2] < 1)
      throw UserError(o.k_path + ": shape " + shape_str(k.shape) +
                      " has an empty axis ([total_k, kv_heads, dim])");
    if (dk[2] != dq[2])
      throw UserError(o.k_path + ": head dim " + std::to_string(dk[2]) + " differs from Q's " +
                      std::to_string(dq[2]) + " (" + o.q_path + ")");
    const int64_t total_q = std::accumulate(queries.begin(), queries.end(), int64_t(0));
    const int64_t total_k = std::accumulate(keys.begin(), keys.end(), int64_t(0));
    const char* query_flag = f.seqlens_q ? "--seqlens-q" : "--seqlens-k";
    if (dq[0] != total_q)
      throw UserError(o.q_path + " holds " + std::to_string(dq[0]) + " query rows but " +
                      query_flag + " sums to " + std::to_string(total_q));
    if (dk[0] != total_k)
      throw UserError(o.k_path + " holds " + std::to_string(dk[0]) +
                      " key rows but the key lengths sum to " + std::to_string(total_k));
    require_agree(s.heads, dq[1], "heads");
    require_agree(s.dim, dq[2], "dim");
    require_agree(s.kv_heads, dk[1], "kv-heads");
    require_finite(q.data, o.q_path);
    require_finite(k.data, o.k_path);
    require_finite(v.data, o.v_path);
    heads = dq[1], kv_heads = dk[1], dim = dq[2];
  }
  VarlenProblem p =
      VarlenProblem::make(heads, kv_heads, dim, std::move(queries), std::move(keys), s.causal, dtype);
  p.scale = s.scale;
  if (from_files) {
    in.q = std::move(q.data);
    in.k = std::move(k.data);
    in.v = std::move(v.data);
    round_inputs(in, dtype);
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Memory, before anything is allocated

// The split partials `kernel` asks for (it may answer for the current GPU only).
double workspace_bytes(const Kernel& kernel, const PagedProblem& p) {
  return kernel.inference && kernel.inference->decode_workspace_bytes
             ? double(kernel.inference->decode_workspace_bytes(p))
             : 0.0;
}

// Device: Q and O, the two caches in 16 bits; the table and lengths in int32; the workspace.
double decode_device_bytes(const PagedProblem& p, double workspace) {
  return dtype_bytes(p.dtype) * (2.0 * double(p.q_elements()) + 2.0 * double(p.cache_elements())) +
         4.0 * (double(p.table_elements()) + p.batch) + workspace;
}

// Host: the float32 inputs and output; with --verify a rounded copy of the inputs and the
// double reference beside a float copy of O.
double decode_host_bytes(const PagedProblem& p, bool verify) {
  const double inputs = 4.0 * (double(p.q_elements()) + 2.0 * double(p.cache_elements()) +
                               double(p.table_elements()));
  return inputs + 4.0 * double(p.q_elements()) +
         (verify ? inputs + 12.0 * double(p.q_elements()) : 0.0);
}

double varlen_elements(const VarlenProblem& p) {
  return double(p.total_q()) * p.heads * p.head_dim * 2.0 +
         double(p.total_k()) * p.kv_heads * p.head_dim * 2.0;  // Q and O, K and V
}

// ---------------------------------------------------------------------------------------------
// Reporting a check

// Where the first wrong element is, in the terms of the problem: which sequence, which query
// token, how many keys it sees.
void print_decode_hints(std::ostream& out, const PagedProblem& p, const InferenceCheck& r) {
  if (r.guard_writes > 0)
    out << "  hint: " << r.guard_writes << " elements after the end of O were written: a block "
        << "stores past the last query row (check the bounds of the store)\n";
  const Comparison& c = r.comparison;
  if (c.bad_elements == 0 || c.first_bad.b < 0) return;
  const Index4& at = c.first_bad;
  out << "  hint: first wrong element: sequence " << at.b << " (" << p.seqlens_k[size_t(at.b)]
      << " keys, " << p.pages_of(at.b) << " pages), query token " << at.i << " (sees "
      << p.visible_keys(at.b, at.i) << " keys), head " << at.h << " (K/V head "
      << p.kv_head(at.h) << "), dim " << at.d << ": got " << c.first_bad_got << ", want "
      << c.first_bad_want << "\n";
}

void print_prefill_hints(std::ostream& out, const VarlenProblem& p, const InferenceCheck& r) {
  if (r.guard_writes > 0)
    out << "  hint: " << r.guard_writes << " elements after the end of O were written: a block "
        << "stores past the last packed row (check the bounds of the store)\n";
  const Comparison& c = r.comparison;
  if (c.bad_elements == 0 || c.first_bad.i < 0) return;
  const std::vector<int32_t> cu = p.cu_seqlens_q();
  const int row = c.first_bad.i;  // a packed query row
  const int b = int(std::upper_bound(cu.begin(), cu.end(), row) - cu.begin()) - 1;
  out << "  hint: first wrong element: packed row " << row << " = sequence " << b << " ("
      << p.seqlens_q[size_t(b)] << " queries, " << p.seqlens_k[size_t(b)] << " keys), query "
      << row - cu[size_t(b)] << " (sees " << p.visible_keys(b, row - cu[size_t(b)])
      << " keys), head " << c.first_bad.h << ", dim " << c.first_bad.d << ": got "
      << c.first_bad_got << ", want " << c.first_bad_want << "\n";
}

// ---------------------------------------------------------------------------------------------
// attn run

int run_decode_command(const RunOptions& o, const Kernel& kernel, DType dtype, uint64_t seed,
                       std::ostream& out) {
  const InferenceOptions& f = o.inference;
  const int files = !o.q_path.empty() + !f.k_cache_path.empty() + !f.v_cache_path.empty() +
                    !f.block_table_path.empty();
  if (files != 0 && files != 4)
    throw UserError("--q, --k-cache, --v-cache and --block-table go together: give all four "
                    ".npy files");
  const bool from_files = files == 4;
  PagedInputs in;
  const PagedProblem p =
      from_files ? decode_problem_from_npy(o, dtype, seed, in) : decode_problem(o, dtype, seed);
  if (Status s = check_problem(kernel, p); !s) throw UserError(s.message());
  if (from_files) {
    if (Status s = validate_inputs(p, in); !s)
      throw UserError(f.block_table_path + ": " + s.message());
  } else {
    require_host_memory(p.describe(), decode_host_bytes(p, o.verify),
                        std::string("Q, the K/V cache and O") +
                            (o.verify ? " and the reference" : ""));
  }
  require_gpu(kernel);
  require_device_memory(p.describe(), decode_device_bytes(p, workspace_bytes(kernel, p)),
                        "Q, the K/V cache, the block table, O and the split partials");
  if (!from_files) in = random_paged_inputs(p, seed, f.shuffle_pages);

  out << kernel.label() << "  " << p.describe()
      << (from_files ? std::string("  inputs from .npy, rounded to ") + dtype_name(dtype)
                     : std::string("  pages ") + (f.shuffle_pages ? "shuffled" : "in order") +
                           "  seed " + std::to_string(seed))
      << "\n";
  int exit_code = 0;
  std::vector<float> result;
  if (o.verify) {
    InferenceCheck r = check_decode(kernel, p, in);
    if (!r.status) throw UserError(r.status.message());
    out << "  " << r.comparison.summary() << "\n";
    print_decode_hints(out, p, r);
    if (!r.passed()) exit_code = 1;
    result = std::move(r.output);
  } else if (!o.out_path.empty() || !o.time) {
    if (Status s = run_decode(kernel, p, in, result); !s) throw UserError(s.message());
    out << "  ran (add --verify to compare with the CPU reference)\n";
  }
  if (!o.out_path.empty())
    write_output(out, o.out_path, {p.batch, p.seq_q, p.heads, p.head_dim}, result, dtype);
  if (o.time && may_time(kernel, exit_code, out)) {
    PagedDeviceTensors tensors(kernel, p, in);
    const Timing t = time_launches([&](cudaStream_t s) { return tensors.decode(s); }, o.warmup,
                                   o.iters);
    print_time(out, kernel, dtype, t, paged_flops(p), paged_bytes(p));
    out << "  bytes: minimum " << human_bytes(paged_bytes(p)) << " (each visible K/V row once, "
        << "Q and O once); the pool holds " << human_bytes(2.0 * dtype_bytes(dtype) *
                                                           double(p.cache_elements()))
        << " of K/V\n";
  }
  return exit_code;
}

int run_prefill_command(const RunOptions& o, const Kernel& kernel, DType dtype, uint64_t seed,
                        std::ostream& out) {
  const int files = !o.q_path.empty() + !o.k_path.empty() + !o.v_path.empty();
  if (files != 0 && files != 3)
    throw UserError("--q, --k and --v go together: give all three .npy files");
  const bool from_files = files == 3;
  VarlenInputs in;
  const VarlenProblem p = varlen_problem(o, dtype, seed, in, from_files);
  if (Status s = check_problem(kernel, p); !s) throw UserError(s.message());
  const double elements = varlen_elements(p);
  if (!from_files) {
    // Float32 tensors; with --verify a rounded copy of the inputs and the double reference.
    const double o_elements = double(p.total_q()) * p.heads * p.head_dim;
    require_host_memory(p.describe(),
                        4.0 * elements + (o.verify ? 4.0 * elements + 12.0 * o_elements : 0.0),
                        std::string("Q, K, V, O") + (o.verify ? " and the reference" : ""));
  }
  require_gpu(kernel);
  require_device_memory(p.describe(), dtype_bytes(dtype) * elements + 8.0 * (p.batch() + 1),
                        "Q, K, V, O and the sequence offsets");
  if (!from_files) in = random_varlen_inputs(p, seed);

  out << kernel.label() << "  " << p.describe()
      << (from_files ? std::string("  inputs from .npy, rounded to ") + dtype_name(dtype)
                     : "  seed " + std::to_string(seed))
      << "\n";
  int exit_code = 0;
  std::vector<float> result;
  if (o.verify) {
    InferenceCheck r = check_prefill(kernel, p, in);
    if (!r.status) throw UserError(r.status.message());
    out << "  " << r.comparison.summary() << "\n";
    print_prefill_hints(out, p, r);
    if (!r.passed()) exit_code = 1;
    result = std::move(r.output);
  } else if (!o.out_path.empty() || !o.time) {
    if (Status s = run_prefill(kernel, p, in, result); !s) throw UserError(s.message());
    out << "  ran (add --verify to compare with the CPU reference)\n";
  }
  if (!o.out_path.empty())
    write_output(out, o.out_path, {p.total_q(), p.heads, p.head_dim}, result, dtype);
  if (o.time && may_time(kernel, exit_code, out)) {
    VarlenDeviceTensors tensors(kernel, p, in);
    const Timing t = time_launches([&](cudaStream_t s) { return tensors.prefill(s); }, o.warmup,
                                   o.iters);
    print_time(out, kernel, dtype, t, varlen_flops(p), varlen_bytes(p));
    out << "  bytes: minimum " << human_bytes(varlen_bytes(p)) << " (Q, K, V read once, O "
        << "written once)\n";
  }
  return exit_code;
}

}  // namespace

int cmd_run_inference(const RunOptions& o, const Kernel& kernel, std::ostream& out) {
  // The type first, before any shape or device: module 10 in f32 is wrong on any machine.
  const DType dtype = dtype_for(kernel, o.dtype);
  if (Status s = supports_dtype(kernel, dtype); !s) throw UserError(s.message());
  // One seed for the random lengths, the inputs and the page shuffle: a run replays exactly.
  const uint64_t seed = o.seed.value_or(fresh_seed());
  return o.inference.varlen ? run_prefill_command(o, kernel, dtype, seed, out)
                            : run_decode_command(o, kernel, dtype, seed, out);
}

// ---------------------------------------------------------------------------------------------
// attn bench

std::vector<PagedProblem> decode_bench_shapes(const BenchOptions& o, DType dtype) {
  const InferenceOptions& f = o.inference;
  if (o.batch && !f.random_seqlens)
    throw UserError("--batch in a benchmark is the number of --random-seqlens lengths: give "
                    "--random-seqlens MAX too");
  // The batches of lengths: the flags', or the preset's (uniform lengths over a range of batch
  // sizes, and one mixed batch as a serving engine sees it).
  std::vector<std::vector<int>> batches;
  if (f.seqlens_k || f.random_seqlens) {
    batches.push_back(key_lengths(f, f.random_seqlens ? o.batch.value_or(kDefaultBenchBatch)
                                                      : std::optional<int>{},
                                  "", kBenchSeed, 0));
  } else if (o.preset == "quick") {
    batches = {{4096}, std::vector<int>(8, 1024)};
  } else if (o.preset == "ladder") {
    for (int batch : {1, 8, 32, 128})
      for (int length : {1024, 4096, 16384}) batches.push_back(std::vector<int>(size_t(batch), length));
    batches.push_back(random_seqlens(32, 16384, kBenchSeed));
  } else {
    throw UserError("unknown bench preset '" + o.preset + "' (quick, ladder)");
  }
  // Llama-3-8B's and -70B's attention (32 or 64 query heads over 8 K/V heads, head_dim 128):
  // GQA groups of 4 and 8, the packing module 10 teaches. --kv-heads replaces the 8.
  std::vector<PagedProblem> shapes;
  for (const int heads : {32, 64})
    for (const std::vector<int>& lengths : batches) {
      PagedProblem p = PagedProblem::make(heads, o.kv_heads.value_or(8), kDefaultDim, 1, lengths,
                                          f.page_size, false, dtype);
      if (Status s = validate(p); !s)
        throw UserError("decode shape " + p.describe() + ": " + s.message());
      shapes.push_back(std::move(p));
    }
  return shapes;
}

json::Object bench_decode(const Kernel& kernel, const PagedProblem& p, const BenchOptions& o,
                          std::ostream& out) {
  std::string status = "ok", check = "-";
  Timing t;
  if (Status s = check_problem(kernel, p); !s) {
    status = "unsupported: " + s.message();
  } else {
    const PagedInputs in = random_paged_inputs(p, kBenchSeed, o.inference.shuffle_pages);
    // Correctness at this shape when the CPU reference is affordable (<= 4 GFLOP).
    if (paged_flops(p) <= 4e9) check = check_decode(kernel, p, in).passed() ? "pass" : "FAIL";
    PagedDeviceTensors tensors(kernel, p, in);
    t = bench_time(
        [&](int warmup, int iters) {
          return time_launches([&](cudaStream_t s) { return tensors.decode(s); }, warmup, iters);
        },
        o);
  }
  const bool ok = status == "ok";
  const double seconds = t.median_ms * 1e-3;
  const double tflops = ok ? paged_flops(p) / seconds / 1e12 : 0.0;
  const double gbs = ok ? paged_bytes(p) / seconds / 1e9 : 0.0;
  if (ok) print_bench_row(out, kernel, p.describe(), t, tflops, gbs, check);
  const auto [shortest, longest] = std::minmax_element(p.seqlens_k.begin(), p.seqlens_k.end());
  json::Object lengths;
  lengths.add("count", p.batch).add("min", *shortest).add("mean", double(p.total_keys()) / p.batch)
      .add("max", *longest).add("total", p.total_keys());
  json::Object row = bench_row(kernel);
  // "problem": decode rows are not dense sweeps (scripts/plot_bench.py plots those).
  row.add("problem", "decode").add("batch", p.batch).add("heads", p.heads)
      .add("kv_heads", p.kv_heads).add("seq_q", p.seq_q).add("seq_k", p.max_seqlen_k())
      .add("head_dim", p.head_dim).add("causal", p.causal).add("dtype", dtype_name(p.dtype))
      .add("status", status).add("check", check).add("median_ms", t.median_ms)
      .add("min_ms", t.min_ms).add("iterations", t.iterations).add("flops", paged_flops(p))
      .add("tflops", tflops).add("gbs", gbs).add("bytes_fused", paged_bytes(p))
      .add("device_bytes", decode_device_bytes(p, ok ? workspace_bytes(kernel, p) : 0.0))
      .add("seqlens_k", lengths)
      .add("page_size", p.page_size).add("num_pages", p.num_pages)
      .add("shuffle_pages", o.inference.shuffle_pages);
  return row;
}

}  // namespace attn::cli
