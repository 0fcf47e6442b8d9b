// bench_12_layer: the layer around attention (module 12, README section 4), fused and unfused.
// One self-attention layer of a transformer block on 16k tokens (batch x seq), bf16:
//   QKV projection  x [tokens, hidden] -> Q, K, V [tokens, heads, head_dim], RoPE on Q and K:
//     fused     module 12's GEMM with RoPE in its epilogue (qkv_projection)
//     unfused   the same GEMM to a packed [tokens, 3 x heads x head_dim] buffer, then
//               split_rope (a pass that reads it back, turns Q and K, writes Q, K, V)
//     cuBLAS    cublasGemmEx to the packed buffer, then the same split_rope
//   attention       module 12's forward() without modifiers (module 09's kernel on Hopper, module
//                   07's elsewhere), causal
//   out projection  O [tokens, heads x head_dim] -> [tokens, hidden]: module 12's GEMM, cuBLAS
// The fused and unfused outputs are first compared with each other and with cuBLAS's. Times:
// median of event-timed runs after warm-up. Writes one JSON file (--out) and prints a table.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/10_decoding/device_fill.cuh"
#include "common/bench_json.h"
#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/half.h"
#include "common/timing.h"
#include "modules/12_modifiers/entry_points.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "solutions/12_modifiers/modifier_steps.cuh"

namespace {

using namespace attn;
using Steps = m12::solution::ModifierSteps;

void check(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed (cuBLAS status " +
                             std::to_string(int(s)) + ")");
}

// y [rows, out] = x [rows, in] w^T with w [out, in], row-major: in cuBLAS's column-major
// terms y^T [out, rows] = w [out, in] (stored as w^T column-major: op T) x^T [in, rows].
void cublas_linear(cublasHandle_t h, const void* x, const void* w, void* y, int rows, int in,
                   int out, cudaStream_t s) {
  const float one = 1.0f, zero = 0.0f;
  check(cublasSetStream(h, s), "cublasSetStream");
  check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, CUDA_R_16BF, in, x,
                     CUDA_R_16BF, in, &zero, y, CUDA_R_16BF, out, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

// Relative L2 distance between two 16-bit tensors of n elements.
double rel_l2(const DeviceBuffer<uint16_t>& a, const DeviceBuffer<uint16_t>& b) {
  const std::vector<uint16_t> x = a.to_host(), y = b.to_host();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double p = from_bits16(x[i], DType::bf16), q = from_bits16(y[i], DType::bf16);
    num += (p - q) * (p - q), den += q * q;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_12_layer: the projections around attention, fused and unfused (module 12)"};
  int iters = 20, warmup = 3, hidden = 2048;
  std::string out = "bench12_layer.json";
  app.add_option("--iters", iters, "timed runs per row");
  app.add_option("--hidden", hidden, "hidden size (heads x head_dim is the same)");
  app.add_option("--out", out, "JSON file to write");
  CLI11_PARSE(app, argc, argv);
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_12_layer: %s\n", no_device_reason().c_str());
    return 1;
  }
  try {
    const DeviceInfo dev = query_device(0);
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle), "cublasCreate");
    std::vector<json::Object> rows;
    std::printf("%s\n%-30s %6s %5s %9s %9s  %s\n", dev.name.c_str(), "row", "seq", "d", "ms",
                "TFLOP/s", "note");
    for (int d : {64, 128})
      for (int seq : {1024, 4096}) {
        m12::LayerShape s;
        s.tokens = 16384, s.seq = seq, s.hidden = hidden, s.heads = hidden / d, s.head_dim = d;
        const int width = s.heads * d;
        const RopeStyle style = RopeStyle::interleaved;
        const double base = 10000.0;
        DeviceBuffer<uint16_t> x(size_t(s.tokens) * hidden), w_qkv(size_t(3) * width * hidden),
            w_o(size_t(hidden) * width), packed(size_t(s.tokens) * 3 * width),
            y(size_t(s.tokens) * hidden), o(size_t(s.tokens) * width);
        DeviceBuffer<uint16_t> fused[3], unfused[3];
        for (int t = 0; t < 3; ++t)
          fused[t] = DeviceBuffer<uint16_t>(size_t(s.tokens) * width),
          unfused[t] = DeviceBuffer<uint16_t>(size_t(s.tokens) * width);
        bench10::fill_random(x.get(), int64_t(x.size()), 1, s.dtype);
        bench10::fill_random(w_qkv.get(), int64_t(w_qkv.size()), 2, s.dtype);
        bench10::fill_random(w_o.get(), int64_t(w_o.size()), 3, s.dtype);

        auto fused_with = [&](RopeStyle r) {
          return [&, r](cudaStream_t st) {
            check(m12::qkv_projection<Steps>(s, r, base, x.get(), w_qkv.get(), fused[0].get(),
                                             fused[1].get(), fused[2].get(), st));
          };
        };
        auto run_fused = fused_with(style);
        auto run_gemm = [&](cudaStream_t st) {
          check(m12::linear(x.get(), w_qkv.get(), packed.get(), s.tokens, hidden, 3 * width,
                            s.dtype, st));
        };
        auto run_cublas = [&](cudaStream_t st) {
          cublas_linear(handle, x.get(), w_qkv.get(), packed.get(), s.tokens, hidden, 3 * width,
                        st);
        };
        auto run_split = [&](cudaStream_t st) {
          check(m12::split_rope<Steps>(s, style, base, packed.get(), unfused[0].get(),
                                       unfused[1].get(), unfused[2].get(), st));
        };
        Problem p = Problem::make(s.tokens / seq, s.heads, seq, seq, d, true, Layout::BSHD);
        p.dtype = s.dtype;
        auto run_attention = [&](cudaStream_t st) {
          check(m12::solution::forward(p, fused[0].get(), fused[1].get(), fused[2].get(), o.get(),
                                       st));
        };
        auto run_out = [&](cudaStream_t st) {
          check(m12::linear(o.get(), w_o.get(), y.get(), s.tokens, width, hidden, s.dtype, st));
        };
        auto run_cublas_out = [&](cudaStream_t st) {
          cublas_linear(handle, o.get(), w_o.get(), y.get(), s.tokens, width, hidden, st);
        };

        // The three ways to Q, K, V agree (to bf16 rounding: the unfused ones round twice).
        run_fused(nullptr), run_gemm(nullptr), run_split(nullptr);
        ATTN_CUDA_CHECK(cudaDeviceSynchronize());
        double ours_err = 0, cublas_err = 0;
        for (int t = 0; t < 3; ++t) ours_err = std::max(ours_err, rel_l2(unfused[t], fused[t]));
        run_cublas(nullptr), run_split(nullptr);
        ATTN_CUDA_CHECK(cudaDeviceSynchronize());
        for (int t = 0; t < 3; ++t) cublas_err = std::max(cublas_err, rel_l2(unfused[t], fused[t]));
        const bool agree = ours_err < 1e-2 && cublas_err < 1e-2;
        std::printf("check d=%d seq=%d: unfused vs fused rel L2 %.2e, "
                    "cuBLAS+split vs fused %.2e: %s\n",
                    d, seq, ours_err, cublas_err, agree ? "ok" : "FAILED");
        if (!agree) return 1;

        const double gemm_flops = 2.0 * s.tokens * double(hidden) * 3 * width;
        const double out_flops = 2.0 * s.tokens * double(width) * hidden;
        auto report = [&](const char* name, const std::function<void(cudaStream_t)>& fn,
                          double flops, const char* note = "") {
          const double ms = time_on_stream(fn, warmup, iters).median_ms;
          const double tf = flops > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
          std::printf("%-30s %6d %5d %9.4f %9.1f  %s\n", name, seq, d, ms, tf, note);
          rows.push_back(json::Object().add("row", name).add("tokens", s.tokens).add("seq", seq)
                             .add("hidden", hidden).add("heads", s.heads).add("head_dim", d)
                             .add("dtype", "bf16").add("rope", rope_style_name(style))
                             .add("median_ms", ms).add("flops", flops).add("tflops", tf));
          return ms;
        };
        report("qkv fused (gemm + rope epilogue)", run_fused, gemm_flops);
        report("qkv fused, half-split rope", fused_with(RopeStyle::half), gemm_flops);
        report("qkv fused, no rope (split only)", fused_with(RopeStyle::none), gemm_flops);
        report("qkv gemm (ours, packed)", run_gemm, gemm_flops);
        report("split + rope pass", run_split, 0.0, "reads and writes Q, K, V once");
        report("qkv unfused (ours)", [&](cudaStream_t st) { run_gemm(st), run_split(st); },
               gemm_flops);
        report("qkv gemm (cuBLAS, packed)", run_cublas, gemm_flops);
        report("qkv unfused (cuBLAS)", [&](cudaStream_t st) { run_cublas(st), run_split(st); },
               gemm_flops);
        report("attention (causal)", run_attention, 0.0, "module 12 forward, no modifier");
        report("out projection (ours)", run_out, out_flops);
        report("out projection (cuBLAS)", run_cublas_out, out_flops);
        report("layer fused (ours)",
               [&](cudaStream_t st) { run_fused(st), run_attention(st), run_out(st); }, 0.0);
        report("layer unfused (ours)",
               [&](cudaStream_t st) {
                 run_gemm(st), run_split(st), run_attention(st), run_out(st);
               },
               0.0);
        report("layer unfused (cuBLAS)",
               [&](cudaStream_t st) {
                 run_cublas(st), run_split(st), run_attention(st), run_cublas_out(st);
               },
               0.0);
      }
    cublasDestroy(handle);
    json::Document doc("attn-layer-bench/1");
    doc.field("device", json::device(dev));
    doc.field("created", "\"" + json::utc_now() + "\"");
    doc.field("timing", "\"median of event-timed runs after warm-up\"");
    doc.list("rows", rows);
    if (Status st = doc.write(out); !st) {
      std::fprintf(stderr, "bench_12_layer: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_12_layer: %s\n", e.what());
    return 1;
  }
  return 0;
}
