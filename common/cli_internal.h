// The pieces of the `attn` command line that its parts share: the dense path (cli.cpp:
// parsing, `attn run` on a Problem, `attn bench`, list, info), the inference path of module 10
// (cli_inference.cpp: decode over a paged KV cache, packed prefill), the modifier path of
// module 12 (cli_modifiers.cpp: score modifiers, masks, RoPE) and the backward path of module
// 11 (cli_backward.cpp: dQ, dK, dV). Not an interface for anything else: run_cli
// (common/cli.h) is.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "common/modifiers.h"
#include "common/paged.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "common/status.h"
#include "common/timing.h"

namespace CLI {
class App;
}

namespace attn::cli {

// A failure the user can fix; printed as one line "attn: <message>", exit code 1.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Built against the CPU emulation (attn_emu, common/emulation/): GPU modules run there too,
// thousands of times slower, and nothing it measures says anything about a GPU.
#ifdef ATTN_EMULATION
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

// ---- Options ---------------------------------------------------------------------------------

struct ShapeOptions {
  std::optional<int> batch, heads, kv_heads, seq_q, seq_k, seq, dim;
  bool causal = false;
  std::string layout = "bhsd";
  float scale = 0.0f;
};

// The flags of an inference module (module 10): per-sequence lengths and the paged cache.
struct InferenceOptions {
  std::optional<std::string> seqlens_k, seqlens_q;  // "1,17,4096" or a .npy of lengths
  std::optional<int> random_seqlens;      // --random-seqlens MAX
  int page_size = 16;
  bool shuffle_pages = false;
  bool varlen = false;                    // run prefill instead of decode
  std::string k_cache_path, v_cache_path, block_table_path;
};

// The flags of the modifier module (module 12): one score modifier, masks, RoPE. What each
// means: add_modifier_options in cli_modifiers.cpp.
struct ModifierOptions {
  bool alibi = false, random_bias = false, relative = false, rel_causal = false;
  std::string bias_path;             // --bias FILE.npy [B|1, H|1, seq_q, seq_k]
  std::string bias_broadcast = "batch";  // --random-bias: none | batch | heads | both
  float softcap = 0.0f;
  int rel_buckets = 32, rel_max_distance = 128;
  int window = 0, prefix = 0;
  std::optional<int> documents;      // --documents N: N random documents per batch entry
  std::string segments_path, segments_k_path;  // --segments / --segments-k FILE.npy
  std::string rope;                  // interleaved | half
  double rope_base = 10000.0;
};

// The flags of the backward module (module 11): the forward and the backward on one shape.
struct BackwardOptions {
  bool backward = false;
  std::string dout_path;                              // --dout FILE.npy, O's shape
  std::string out_dq_path, out_dk_path, out_dv_path;  // --out-dq/--out-dk/--out-dv FILE.npy
};

struct RunOptions {
  int module = -1;
  std::string impl = "solution";
  ShapeOptions shape;
  InferenceOptions inference;
  ModifierOptions modifiers;
  BackwardOptions backward;
  std::string dtype;  // --dtype as typed; empty: the module's native type
  bool verify = false, time = false;
  int warmup = 5, iters = 20;
  std::optional<uint64_t> seed;
  std::string q_path, k_path, v_path, out_path;
  std::vector<std::string> given;  // the flags on the command line, by their first long name
};

struct BenchOptions {
  std::vector<int> modules;
  std::string impl = "solution";
  std::string preset = "ladder";
  std::string out_path = "bench.json";
  std::optional<int> kv_heads;  // grouped K/V heads for every preset shape (default: = heads)
  std::string dtype;            // --dtype for every module; empty: each module's native type
  int warmup = 3, iters = 20;
  double max_seconds = 2.0;  // per shape: fewer iterations for very slow kernels
  std::optional<int> batch;      // sequences of --random-seqlens
  InferenceOptions inference;    // lengths and paging of the decode shapes
  bool causal = false;           // every preset shape with the causal mask
  ModifierOptions modifiers;     // module 12's modifiers, on every shape
  std::vector<std::string> given;
};

// Whether `flag` ("--layout") was on the command line.
bool given(const std::vector<std::string>& flags, const std::string& flag);

// ---- Problems from flags and files (cli.cpp) ---------------------------------------------------

Layout parse_layout(const std::string& name);
// The shape flags over the defaults (a smaller default for a CPU module or the CPU emulation).
Problem shape_from_options(const ShapeOptions& s, bool cpu_module);
// The Problem of --q, --k, --v (.npy files, checked against the shape flags); `in` gets their
// values, `out_shape` Q's shape (the shape of --out).
Problem problem_from_npy(const RunOptions& o, Inputs& in, std::vector<int64_t>& out_shape);
// The dense Problem of `attn run` in type `dtype`: from --q/--k/--v when any is given (all
// three or a UserError; `in` gets their values rounded to dtype, `from_files` is set), else
// from the shape flags (`in` left empty).
Problem run_problem(const RunOptions& o, const Kernel& kernel, DType dtype, Inputs& in,
                    std::vector<int64_t>& out_shape, bool& from_files);

// ---- Checks before any work --------------------------------------------------------------------

// The element type to run `kernel` in: --dtype when given, else the module's own
// (f32 for modules 00-06, bf16 for the 16-bit and inference modules).
DType dtype_for(const Kernel& kernel, const std::string& flag);

std::string fmt(const char* format, double value);
std::string human_bytes(double bytes);

// A GPU module needs a GPU: one line when there is none.
void require_gpu(const Kernel& kernel);
// Refused before allocating: "<what> needs 1.2 GiB of device memory for <buffers>; the GPU has ...".
void require_device_memory(const std::string& what, double need_bytes, const std::string& buffers);
void require_host_memory(const std::string& what, double need_bytes, const std::string& buffers);
// A NaN or infinity in an input file makes every output it touches NaN: that is the data's
// fault, not the kernel's, so it is refused with the file and the element.
void require_finite(const std::vector<float>& values, const std::string& path);
// A shape flag given beside .npy files must agree with them.
void require_agree(const std::optional<int>& flag, int value, const std::string& name);

// ---- Running and timing ------------------------------------------------------------------------

// `launch` (a kernel call that returns a Status) timed with CUDA events: median of `iters`
// after `warmup`. A refusal inside becomes a UserError.
Timing time_launches(const std::function<Status(cudaStream_t)>& launch, int warmup, int iters);
// Whether a run's time may be measured; if not, prints the line that says why (the CPU
// emulation measures nothing; a wrong output is not timed: a kernel that skips work looks fast).
bool may_time(const Kernel& kernel, int exit_code, std::ostream& out);
// "  time 0.0123 ms (median of 20, min 0.0120)  1.23 TFLOP/s  456.7 GB/s  (device peak: ...)"
void print_time(std::ostream& out, const Kernel& kernel, DType dtype, const Timing& t,
                double flops, double bytes);
// Writes O as float32 .npy and says so (and in which type its values are).
void write_output(std::ostream& out, const std::string& path, const std::vector<int64_t>& shape,
                  const std::vector<float>& values, DType dtype);

// ---- attn bench ----------------------------------------------------------------------------------

// Times with `time(warmup, iters)`: one untimed-warmup run first sets the iteration count so a
// slow kernel stays near o.max_seconds per shape (at least 3 timed runs, at most o.iters).
Timing bench_time(const std::function<Timing(int warmup, int iters)>& time, const BenchOptions& o);
// One line of the bench table.
void print_bench_row(std::ostream& out, const Kernel& kernel, const std::string& shape,
                     const Timing& t, double tflops, double gbs, const std::string& check);
// The fields every bench row starts with (kernel, module, impl).
json::Object bench_row(const Kernel& kernel);

// ---- The inference path (cli_inference.cpp) ---------------------------------------------------

// Refuses, in one line, flags that do not apply to `kernel`: module 10's flags with a dense
// module, dense-only flags (--layout, --seq-k, ...) with module 10.
void check_flags_for_module(const RunOptions& o, const Kernel& kernel);
// `attn run` on an inference module: decode, or prefill with --varlen.
int cmd_run_inference(const RunOptions& o, const Kernel& kernel, std::ostream& out);

// The decode shapes `attn bench` runs on an inference module: the preset's, or the lengths of
// --seqlens-k / --random-seqlens. Checked (one line) before the benchmark looks for a GPU.
std::vector<PagedProblem> decode_bench_shapes(const BenchOptions& o, DType dtype);
// Checks (when the CPU reference is affordable), times and prints one decode shape.
json::Object bench_decode(const Kernel& kernel, const PagedProblem& p, const BenchOptions& o,
                          std::ostream& out);

// ---- The modifier path (cli_modifiers.cpp) ------------------------------------------------------

// Module 12's flags on `cmd`; `run` adds those that read files (--bias, --segments,
// --segments-k), which a sweep of many shapes cannot take.
void add_modifier_options(CLI::App* cmd, ModifierOptions& o, bool run);
// "module 12": the registered module with the modifier entry point, as messages name it.
std::string modifier_module();
// The first of module 12's flags among `given` ("--alibi"), or "" when there is none.
std::string first_modifier_flag(const std::vector<std::string>& given);
bool any_modifier_flag(const std::vector<std::string>& given);
// Refuses, in one line, module 12's flags with a module that has no modifier entry point:
// "--alibi needs module 12 (modifiers); module 07 runs plain attention".
void check_modifier_flags(const std::vector<std::string>& given, const Kernel& kernel);
// The ModifierSpec the flags ask for; one line on a combination that makes no sense (two score
// modifiers, --rel-buckets without --relative, ...). Values are checked later by validate().
ModifierSpec modifier_spec(const ModifierOptions& o, const std::vector<std::string>& given);
// `attn run` on the modifier module with at least one modifier flag.
int cmd_run_modified(const RunOptions& o, const Kernel& kernel, std::ostream& out);
// Checks (when the CPU reference is affordable), times and prints one shape with modifiers.
json::Object bench_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                            const BenchOptions& o, std::ostream& out);

// ---- The backward path (cli_backward.cpp) -------------------------------------------------------

// Module 11's flags on `attn run`.
void add_backward_options(CLI::App* cmd, BackwardOptions& o);
// Refuses, in one line, the backward flags without --backward, --backward on a module without
// a backward entry point, and --backward with flags it does not take (module 12's modifiers).
void check_backward_flags(const RunOptions& o, const Kernel& kernel);
// `attn run --backward`: the forward with its lse, then dQ, dK, dV; --verify, --time, outputs.
int cmd_run_backward(const RunOptions& o, const Kernel& kernel, std::ostream& out);

}  // namespace attn::cli
