// Module 05 benchmark (program bench_05): the unfused attention's batched GEMMs, timed with
// both dispatch strategies beside cuBLAS, the whole unfused forward beside them, a small-shape
// sweep where launch overhead dominates, and a probe for the longest sequence whose scores fit
// in device memory.
//
//   bench_05 [--quick] [--json results.json] [--iters 10] [--budget-ms 200]
//
// Sections (README, sections 2, 5 and 6):
//  attention_gemm     16k tokens (batch = 16384 / N), heads H in {16, 32}, head dim d in
//                     {64, 128}, N = 512 .. 16384 where memory allows. Both GEMMs of the
//                     forward, S = scale · Q K^T (M = N = seq, K = d, B transposed) and
//                     O = P V (M = seq, N = d, K = seq), with
//                       ours_strided            gemm_strided on contiguous (BHSD) heads
//                       ours_ptr_contiguous     gemm_pointer_array, pointers into the same heads
//                       ours_ptr_scattered      gemm_pointer_array, every head its own cudaMalloc
//                       cublas_strided          cublasSgemmStridedBatched, contiguous heads
//                       cublas_batched          cublasSgemmBatched, pointers to contiguous heads
//                       cublas_batched_scattered cublasSgemmBatched on the scattered heads
//                     "check" is the relative difference from ours_strided on 2^20 sampled
//                     entries of the output (a TF32 GEMM would show ~1e-3 here).
//  attention_softmax  row_softmax on the scores, in place.
//  attention_forward  forward() (strided) and forward_pointer_array() (scattered heads),
//                     scores workspace allocation included.
//  small_gemm         tiny M = N = K with 1 .. 16384 heads: one batched launch against one
//                     launch per head (ours_per_head_loop), and an empty kernel's launch.
//  oom_probe          B = 1, H = 32, d in {64, 128}: the largest N (doubling, then bisecting to
//                     a multiple of 256) for which forward() runs, the bytes it needed and the
//                     free memory cudaMemGetInfo reported.
// cuBLAS runs in CUBLAS_DEFAULT_MATH: plain fp32, TF32 tensor cores only when asked for with
// CUBLAS_TF32_TENSOR_OP_MATH, which this program does not set (the check column would show
// TF32's error; the JSON records the NVIDIA_TF32_OVERRIDE variable too).
// Timing: CUDA events around each launch (common/timing.h), one untimed run first (for the
// GEMMs, the run whose output is checked), then the median of `iterations` runs, as many as
// fit in --budget-ms per row (at least 3, at most --iters).
#include <CLI/CLI.hpp>
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/problem.h"
#include "common/timing.h"
#include "modules/05_batched_gemm/batched_gemm.h"

using namespace attn;
namespace ours = attn::m05::solution;

namespace {

constexpr int kTokens = 16384;          // batch · seq in the attention sections
constexpr int64_t kSamples = 1 << 20;   // entries compared between strategies

#define CUBLAS_OK(expr)                                                                     \
  do {                                                                                      \
    const cublasStatus_t st_ = (expr);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      throw std::runtime_error(std::string(#expr) + " failed with status " +               \
                               std::to_string(int(st_)));                                   \
  } while (0)

void ok(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

// ---- Device helpers ---------------------------------------------------------------------------

__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_uniform_kernel(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = float(mix(seed ^ mix(uint64_t(i))) >> 40) * (2.0f / float(1 << 24)) - 1.0f;
}

// out[i] = heads[h][r · ld + c] at (h, r, c) drawn from i: the same entries for every layout.
__global__ void sample_kernel(const float* const* heads, int64_t count, int rows, int cols,
                              int64_t ld, int64_t samples, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= samples) return;
  const uint64_t z = mix(uint64_t(i) * 3 + 17);
  const int64_t h = int64_t(z % uint64_t(count));
  const int r = int(mix(z) % uint64_t(rows)), c = int(mix(z + 1) % uint64_t(cols));
  out[i] = heads[h][int64_t(r) * ld + c];
}

__global__ void empty_kernel() {}

void fill(float* x, int64_t n, uint64_t seed) {
  fill_uniform_kernel<<<1024, 256>>>(x, n, seed);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

// ---- Heads: one tensor's batch · heads matrices, contiguous or each in its own allocation ----

struct Heads {
  DeviceBuffer<float> block;                // contiguous: all heads, head i at i · elements
  std::vector<DeviceBuffer<float>> own;     // scattered: one allocation per head
  std::vector<float*> ptr;                  // head i's first element
  int64_t count = 0, elements = 0;

  static Heads contiguous(int64_t count, int64_t elements) {
    Heads h;
    h.count = count, h.elements = elements;
    h.block = DeviceBuffer<float>(size_t(count * elements));
    for (int64_t i = 0; i < count; ++i) h.ptr.push_back(h.block.get() + i * elements);
    return h;
  }
  // Allocated in a shuffled order, so that the heads' addresses do not follow the head index.
  static Heads scattered(int64_t count, int64_t elements, uint64_t seed) {
    Heads h;
    h.count = count, h.elements = elements;
    h.own.resize(size_t(count));
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    for (int64_t i : order) h.own[size_t(i)] = DeviceBuffer<float>(size_t(elements));
    for (auto& b : h.own) h.ptr.push_back(b.get());
    return h;
  }
  float* base() const { return ptr.front(); }
  void fill_random(uint64_t seed) {
    if (block.size()) fill(block.get(), count * elements, seed);
    for (size_t i = 0; i < own.size(); ++i) fill(own[i].get(), elements, seed + 7919 * i);
  }
  void copy_from(const Heads& other) {
    for (int64_t i = 0; i < count; ++i)
      ATTN_CUDA_CHECK(cudaMemcpy(ptr[size_t(i)], other.ptr[size_t(i)],
                                 size_t(elements) * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  DeviceBuffer<const float*> table() const {
    return DeviceBuffer<const float*>(std::vector<const float*>(ptr.begin(), ptr.end()));
  }
  DeviceBuffer<float*> mutable_table() const { return DeviceBuffer<float*>(ptr); }
};

// 2^20 entries of a heads x rows x cols output (row stride ld), for comparing strategies.
std::vector<float> sample(const Heads& h, int rows, int cols, int64_t ld) {
  DeviceBuffer<const float*> table = h.table();
  DeviceBuffer<float> out(static_cast<size_t>(kSamples));
  sample_kernel<<<unsigned((kSamples + 255) / 256), 256>>>(table.get(), h.count, rows, cols, ld,
                                                           kSamples, out.get());
  ATTN_CUDA_CHECK(cudaGetLastError());
  return out.to_host();
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(r, 1e-300));
}

void trim_pool() {
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool;
  ATTN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  ATTN_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

bool is_out_of_memory(const std::exception& e) {
  const std::string w = e.what();
  return w.find("cudaErrorMemoryAllocation") != std::string::npos ||
         w.find("keeps the scores in device memory") != std::string::npos;
}

// ---- Rows of the result -------------------------------------------------------------------------

struct Row {
  std::string section, op, strategy, status = "ok";
  int batch = 0, heads = 0, seq = 0, head_dim = 0;
  int64_t M = 0, N = 0, K = 0;
  bool b_transposed = false;
  Timing t;
  double flops = 0.0, bytes = 0.0;
  double check = NAN;  // relative difference from the reference strategy (NaN: not checked)
  std::string note;
  double tflops() const { return t.median_ms > 0 ? flops / (t.median_ms * 1e-3) / 1e12 : 0.0; }
  double gbs() const { return t.median_ms > 0 ? bytes / (t.median_ms * 1e-3) / 1e9 : 0.0; }
};

using json::number;

struct Options {
  bool quick = false;
  std::string json_path;
  int iters = 10;
  double budget_ms = 200.0;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    CUBLAS_OK(cublasCreate(&cublas_));
    CUBLAS_OK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    // A blocking stream: it waits for the fills and copies issued on the default stream.
    ATTN_CUDA_CHECK(cudaStreamCreate(&stream_));
    CUBLAS_OK(cublasSetStream(cublas_, stream_));
  }
  ~Bench() {
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  void attention_section();
  void small_section();
  void oom_probe();
  void write_json(const DeviceInfo& dev) const;

 private:
  // One timed run (after a warm-up run unless the caller already ran it: `warmed`) sets the
  // iteration count, then the median of as many runs as fit in the budget: at least 3, at
  // most --iters.
  Timing measure(const std::function<void(cudaStream_t)>& launch, bool warmed = false) {
    const Timing probe = time_on_stream(launch, warmed ? 0 : 1, 1, stream_);
    const int iters = std::clamp(int(o_.budget_ms / std::max(probe.median_ms, 1e-3)), 3, o_.iters);
    return time_on_stream(launch, 0, iters, stream_);
  }
  void add(Row r) {
    print(r);
    rows_.push_back(std::move(r));
  }
  static void print(const Row& r) {
    char shape[96];
    if (r.section == "oom_probe") return;
    if (r.heads == 0)
      std::snprintf(shape, sizeof shape, "-");
    else if (r.section == "small_gemm")
      std::snprintf(shape, sizeof shape, "heads=%d M=N=K=%d", r.heads, r.seq);
    else
      std::snprintf(shape, sizeof shape, "B=%d H=%d N=%d d=%d", r.batch, r.heads, r.seq,
                    r.head_dim);
    char line[320];
    if (r.status == "ok")
      std::snprintf(line, sizeof line, "%-18s %-8s %-26s %-25s %10.4f %8.2f %9.1f  %s\n",
                    r.section.c_str(), r.op.c_str(), shape, r.strategy.c_str(), r.t.median_ms,
                    r.tflops(), r.gbs(),
                    std::isfinite(r.check) ? ("check " + number(r.check)).c_str() : "");
    else
      std::snprintf(line, sizeof line, "%-18s %-8s %-26s %-25s %s\n", r.section.c_str(),
                    r.op.c_str(), shape, r.strategy.c_str(), r.status.c_str());
    std::cout << line << std::flush;
  }

  // One GEMM of the attention (QK^T or PV) on one shape, every strategy.
  struct Gemm {
    std::string op;
    int M, N, K;
    bool b_transposed;
    float alpha;
    const Heads *a, *b;
    Heads* c;
    int64_t lda, ldb, ldc;
  };
  void time_gemm(const Row& base, const Gemm& g, const std::string& strategy,
                 const std::function<void(cudaStream_t)>& launch, const Heads& out,
                 const std::vector<float>* reference, std::vector<float>* reference_out);

  Options o_;
  cublasHandle_t cublas_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<Row> rows_;
  std::vector<json::Object> probe_json_;
};

void Bench::time_gemm(const Row& base, const Gemm& g, const std::string& strategy,
                      const std::function<void(cudaStream_t)>& launch, const Heads& out,
                      const std::vector<float>* reference, std::vector<float>* reference_out) {
  Row r = base;
  r.op = g.op, r.strategy = strategy;
  r.M = g.M, r.N = g.N, r.K = g.K, r.b_transposed = g.b_transposed;
  const double count = double(base.batch) * base.heads;
  r.flops = 2.0 * count * g.M * double(g.N) * g.K;
  r.bytes = 4.0 * count * (double(g.M) * g.K + double(g.K) * g.N + double(g.M) * g.N);
  try {
    launch(stream_);
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<float> s = sample(out, g.M, g.N, g.ldc);
    if (reference_out) *reference_out = s;
    if (reference) r.check = rel_diff(s, *reference);
    r.t = measure(launch, /*warmed=*/true);
  } catch (const std::exception& e) {
    r.status = is_out_of_memory(e) ? "out of memory" : std::string("error: ") + e.what();
  }
  add(r);
}

// ---- attention_gemm, attention_softmax, attention_forward ------------------------------------------

void Bench::attention_section() {
  std::vector<std::pair<int, int>> configs = {{32, 64}, {16, 64}, {32, 128}, {16, 128}};
  std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  if (o_.quick) configs = {{32, 64}, {16, 128}}, seqs = {1024, 4096};
  for (auto [H, d] : configs)
    for (int n : seqs) {
      const int B = kTokens / n;
      const int64_t count = int64_t(B) * H;
      const Problem p = Problem::make(B, H, n, n, d);
      Row base;
      base.section = "attention_gemm";
      base.batch = B, base.heads = H, base.seq = n, base.head_dim = d;
      const float scale = p.softmax_scale();
      try {
        // Phase 1: contiguous heads (BHSD): Q, K, V, O and the scores S.
        Heads q = Heads::contiguous(count, int64_t(n) * d), k = Heads::contiguous(count, int64_t(n) * d),
              v = Heads::contiguous(count, int64_t(n) * d), o = Heads::contiguous(count, int64_t(n) * d);
        q.fill_random(1), k.fill_random(2), v.fill_random(3);
        std::vector<float> ref_qk, ref_pv;
        {
          Heads s = Heads::contiguous(count, int64_t(n) * n);
          const Gemm qk{"QK^T", n, n, d, true, scale, &q, &k, &s, d, d, n};
          const Gemm pv{"PV", n, d, n, false, 1.0f, &s, &v, &o, n, d, d};
          DeviceBuffer<const float*> qt = q.table(), kt = k.table(), vt = v.table(), st = s.table();
          DeviceBuffer<float*> sm = s.mutable_table(), om = o.mutable_table();
          for (const Gemm* g : {&qk, &pv}) {
            const bool is_qk = g == &qk;
            const float* const* at = is_qk ? qt.get() : st.get();
            const float* const* bt = is_qk ? kt.get() : vt.get();
            float* const* ct = is_qk ? sm.get() : om.get();
            std::vector<float>& ref = is_qk ? ref_qk : ref_pv;
            m05::BatchedGemmStridedArgs a;
            a.A = g->a->base(), a.B = g->b->base(), a.C = g->c->base();
            a.M = g->M, a.N = g->N, a.K = g->K, a.batch = B, a.num_heads = H;
            a.a_head_stride = g->a->elements, a.a_batch_stride = H * g->a->elements;
            a.b_head_stride = g->b->elements, a.b_batch_stride = H * g->b->elements;
            a.c_head_stride = g->c->elements, a.c_batch_stride = H * g->c->elements;
            a.a_row_stride = g->lda, a.b_row_stride = g->ldb, a.c_row_stride = g->ldc;
            a.b_transposed = g->b_transposed, a.alpha = g->alpha;
            m05::BatchedGemmPtrArgs pa;
            pa.A = at, pa.B = bt, pa.C = ct;
            pa.M = g->M, pa.N = g->N, pa.K = g->K, pa.batch = B, pa.num_heads = H;
            pa.lda = g->lda, pa.ldb = g->ldb, pa.ldc = g->ldc;
            pa.b_transposed = g->b_transposed, pa.alpha = g->alpha;
            const cublasOperation_t op = g->b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
            const float alpha = g->alpha, beta = 0.0f;
            // cuBLAS is column-major: row-major C = A · B is column-major C^T = B^T · A^T.
            time_gemm(base, *g, "ours_strided",
                      [&](cudaStream_t st_) { ok(ours::gemm_strided(a, st_)); }, *g->c, nullptr, &ref);
            time_gemm(base, *g, "ours_ptr_contiguous",
                      [&](cudaStream_t st_) { ok(ours::gemm_pointer_array(pa, st_)); }, *g->c, &ref,
                      nullptr);
            time_gemm(base, *g, "cublas_strided", [&](cudaStream_t) {
              CUBLAS_OK(cublasSgemmStridedBatched(
                  cublas_, op, CUBLAS_OP_N, g->N, g->M, g->K, &alpha, g->b->base(), int(g->ldb),
                  g->b->elements, g->a->base(), int(g->lda), g->a->elements, &beta, g->c->base(),
                  int(g->ldc), g->c->elements, int(count)));
            }, *g->c, &ref, nullptr);
            time_gemm(base, *g, "cublas_batched", [&](cudaStream_t) {
              CUBLAS_OK(cublasSgemmBatched(cublas_, op, CUBLAS_OP_N, g->N, g->M, g->K, &alpha, bt,
                                           int(g->ldb), at, int(g->lda), &beta, ct, int(g->ldc),
                                           int(count)));
            }, *g->c, &ref, nullptr);
          }
          // The softmax between them, in place on S (the values do not matter for its speed).
          Row sm_row = base;
          sm_row.section = "attention_softmax", sm_row.op = "softmax", sm_row.strategy = "ours_row_softmax";
          sm_row.bytes = 3.0 * 4.0 * double(count) * n * double(n);  // read twice, write once
          m05::RowSoftmaxArgs sa;
          sa.scores = s.base(), sa.rows = count * n, sa.seq_q = n, sa.seq_k = n, sa.row_stride = n;
          sm_row.t = measure([&](cudaStream_t st_) { ok(ours::row_softmax(sa, st_)); });
          add(sm_row);
        }
        trim_pool();

        // Phase 2: every head of Q, K, V, S and O in its own allocation.
        Heads qs = Heads::scattered(count, int64_t(n) * d, 11), ks = Heads::scattered(count, int64_t(n) * d, 12),
              vs = Heads::scattered(count, int64_t(n) * d, 13), os = Heads::scattered(count, int64_t(n) * d, 14);
        qs.copy_from(q), ks.copy_from(k), vs.copy_from(v);
        {
          Heads ss = Heads::scattered(count, int64_t(n) * n, 15);
          const Gemm qk{"QK^T", n, n, d, true, scale, &qs, &ks, &ss, d, d, n};
          const Gemm pv{"PV", n, d, n, false, 1.0f, &ss, &vs, &os, n, d, d};
          DeviceBuffer<const float*> qt = qs.table(), kt = ks.table(), vt = vs.table(), st = ss.table();
          DeviceBuffer<float*> sm = ss.mutable_table(), om = os.mutable_table();
          for (const Gemm* g : {&qk, &pv}) {
            const bool is_qk = g == &qk;
            const float* const* at = is_qk ? qt.get() : st.get();
            const float* const* bt = is_qk ? kt.get() : vt.get();
            float* const* ct = is_qk ? sm.get() : om.get();
            const std::vector<float>& ref = is_qk ? ref_qk : ref_pv;
            m05::BatchedGemmPtrArgs pa;
            pa.A = at, pa.B = bt, pa.C = ct;
            pa.M = g->M, pa.N = g->N, pa.K = g->K, pa.batch = B, pa.num_heads = H;
            pa.lda = g->lda, pa.ldb = g->ldb, pa.ldc = g->ldc;
            pa.b_transposed = g->b_transposed, pa.alpha = g->alpha;
            const cublasOperation_t op = g->b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
            const float alpha = g->alpha, beta = 0.0f;
            time_gemm(base, *g, "ours_ptr_scattered",
                      [&](cudaStream_t st_) { ok(ours::gemm_pointer_array(pa, st_)); }, *g->c, &ref,
                      nullptr);
            time_gemm(base, *g, "cublas_batched_scattered", [&](cudaStream_t) {
              CUBLAS_OK(cublasSgemmBatched(cublas_, op, CUBLAS_OP_N, g->N, g->M, g->K, &alpha, bt,
                                           int(g->ldb), at, int(g->lda), &beta, ct, int(g->ldc),
                                           int(count)));
            }, *g->c, &ref, nullptr);
          }
        }
        trim_pool();

        // Phase 3: the whole unfused forward (scores workspace allocated inside).
        Row f = base;
        f.section = "attention_forward", f.op = "forward";
        f.flops = attention_flops(p);
        f.bytes = attention_bytes_unfused(p);
        f.note = "includes cudaMallocAsync/cudaFreeAsync of the scores";
        Row fs = f, fp = f;
        fs.strategy = "ours_forward_strided";
        fp.strategy = "ours_forward_ptr_scattered";
        std::vector<float> o_strided;
        try {
          fs.t = measure([&](cudaStream_t st_) {
            ok(ours::forward(p, q.base(), k.base(), v.base(), o.base(), st_));
          });
          o_strided = sample(o, n, d, d);
        } catch (const std::exception& e) {
          fs.status = is_out_of_memory(e) ? "out of memory" : std::string("error: ") + e.what();
        }
        add(fs);
        trim_pool();
        try {
          DeviceBuffer<const float*> qt = qs.table(), kt = ks.table(), vt = vs.table();
          DeviceBuffer<float*> om = os.mutable_table();
          fp.t = measure([&](cudaStream_t st_) {
            ok(ours::forward_pointer_array(p, qt.get(), kt.get(), vt.get(), om.get(), st_));
          });
          if (!o_strided.empty()) fp.check = rel_diff(sample(os, n, d, d), o_strided);
        } catch (const std::exception& e) {
          fp.status = is_out_of_memory(e) ? "out of memory" : std::string("error: ") + e.what();
        }
        add(fp);
      } catch (const std::exception& e) {
        Row r = base;
        r.op = "-", r.strategy = "all";
        r.status = is_out_of_memory(e) ? "out of memory" : std::string("error: ") + e.what();
        add(r);
      }
      trim_pool();
    }
}

// ---- small_gemm: launch overhead ---------------------------------------------------------------

void Bench::small_section() {
  {
    Row r;
    r.section = "small_gemm", r.op = "empty", r.strategy = "empty_kernel_launch";
    r.t = measure([](cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); });
    r.note = "one launch of an empty kernel: the floor of any launch";
    add(r);
  }
  std::vector<int> sizes = {16, 64}, head_counts = {1, 32, 1024, 16384};
  if (o_.quick) sizes = {16}, head_counts = {1, 1024};
  for (int s : sizes)
    for (int H : head_counts) {
      Row base;
      base.section = "small_gemm", base.batch = 1, base.heads = H, base.seq = s, base.head_dim = s;
      const int64_t e = int64_t(s) * s;
      Heads a = Heads::contiguous(H, e), b = Heads::contiguous(H, e), c = Heads::contiguous(H, e);
      a.fill_random(5), b.fill_random(6);
      DeviceBuffer<const float*> at = a.table(), bt = b.table();
      DeviceBuffer<float*> ct = c.mutable_table();
      const Gemm g{"A*B^T", s, s, s, true, 1.0f, &a, &b, &c, s, s, s};
      m05::BatchedGemmStridedArgs sa;
      sa.A = a.base(), sa.B = b.base(), sa.C = c.base(), sa.M = sa.N = sa.K = s;
      sa.batch = 1, sa.num_heads = H;
      sa.a_head_stride = sa.b_head_stride = sa.c_head_stride = e;
      sa.a_batch_stride = sa.b_batch_stride = sa.c_batch_stride = H * e;
      sa.a_row_stride = sa.b_row_stride = sa.c_row_stride = s;
      sa.b_transposed = true;
      m05::BatchedGemmPtrArgs pa;
      pa.A = at.get(), pa.B = bt.get(), pa.C = ct.get(), pa.M = pa.N = pa.K = s;
      pa.batch = 1, pa.num_heads = H, pa.lda = pa.ldb = pa.ldc = s, pa.b_transposed = true;
      const float one = 1.0f, zero = 0.0f;
      std::vector<float> ref;
      time_gemm(base, g, "ours_strided", [&](cudaStream_t st) { ok(ours::gemm_strided(sa, st)); },
                c, nullptr, &ref);
      time_gemm(base, g, "ours_ptr_contiguous",
                [&](cudaStream_t st) { ok(ours::gemm_pointer_array(pa, st)); }, c, &ref, nullptr);
      time_gemm(base, g, "cublas_strided", [&](cudaStream_t) {
        CUBLAS_OK(cublasSgemmStridedBatched(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, s, s, s, &one,
                                            b.base(), s, e, a.base(), s, e, &zero, c.base(), s, e,
                                            H));
      }, c, &ref, nullptr);
      time_gemm(base, g, "cublas_batched", [&](cudaStream_t) {
        CUBLAS_OK(cublasSgemmBatched(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, s, s, s, &one, bt.get(), s,
                                     at.get(), s, &zero, ct.get(), s, H));
      }, c, &ref, nullptr);
      if (H <= 1024)
        time_gemm(base, g, "ours_per_head_loop", [&](cudaStream_t st) {
          m05::BatchedGemmStridedArgs one_head = sa;
          one_head.num_heads = 1;
          for (int h = 0; h < H; ++h) {
            one_head.A = a.ptr[size_t(h)], one_head.B = b.ptr[size_t(h)], one_head.C = c.ptr[size_t(h)];
            ok(ours::gemm_strided(one_head, st));
          }
        }, c, &ref, nullptr);
    }
}

// ---- oom_probe -----------------------------------------------------------------------------------

void Bench::oom_probe() {
  std::vector<int> dims = {64, 128};
  if (o_.quick) dims = {64};
  const int H = 32;
  for (int d : dims) {
    trim_pool();
    size_t free0 = 0, total = 0;
    ATTN_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    std::string last_error;
    size_t free_at_failure = 0;
    // Does forward() run at sequence length n? Q, K, V, O zeroed, then the forward.
    const auto fits = [&](int n) {
      trim_pool();
      try {
        const Problem p = Problem::make(1, H, n, n, d);
        const size_t e = size_t(p.q_elements());
        DeviceBuffer<float> q(e), k(e), v(e), o(e);
        for (float* x : {q.get(), k.get(), v.get()})
          ATTN_CUDA_CHECK(cudaMemset(x, 0, e * sizeof(float)));
        size_t f = 0, t = 0;
        ATTN_CUDA_CHECK(cudaMemGetInfo(&f, &t));
        const Status s = ours::forward(p, q.get(), k.get(), v.get(), o.get(), stream_);
        ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (!s) {
          last_error = s.message();
          free_at_failure = f;
        }
        return s.is_ok();
      } catch (const std::exception& e) {
        last_error = e.what();
        return false;
      }
    };
    int lo = 0, hi = 0;  // forward runs at lo, fails at hi
    for (int n = 1024; n <= (1 << 22); n *= 2) {
      if (fits(n)) lo = n;
      else { hi = n; break; }
    }
    if (hi == 0) hi = lo * 2;  // never failed (not expected on any GPU today)
    while (hi - lo > 256) {
      const int mid = (lo + hi) / 2 / 256 * 256;
      if (mid <= lo) break;
      if (fits(mid)) lo = mid; else hi = mid;
    }
    fits(hi);  // the failing size's own message
    const Problem ok_p = Problem::make(1, H, lo, lo, d), bad_p = Problem::make(1, H, hi, hi, d);
    json::Object js;
    js.add("batch", 1).add("heads", H).add("head_dim", d).add("largest_seq", lo)
        .add("scores_bytes", m05::scores_bytes(ok_p))
        .add("qkvo_bytes", attention_buffer_bytes(ok_p)).add("first_failing_seq", hi)
        .add("failing_scores_bytes", m05::scores_bytes(bad_p))
        .add("failing_qkvo_bytes", attention_buffer_bytes(bad_p))
        .add("free_bytes_at_start", free0)
        .add("free_bytes_before_failing_forward", free_at_failure).add("total_bytes", total)
        .add("error", last_error);
    probe_json_.push_back(js);
    std::printf("oom_probe  B=1 H=%d d=%d: forward runs up to N=%d (scores %.2f GiB + Q,K,V,O "
                "%.2f GiB); N=%d fails (scores %.2f GiB); free at start %.2f of %.2f GiB\n"
                "           error: %s\n",
                H, d, lo, m05::scores_bytes(ok_p) / double(1 << 30),
                attention_buffer_bytes(ok_p) / double(1 << 30), hi,
                m05::scores_bytes(bad_p) / double(1 << 30), free0 / double(1 << 30),
                total / double(1 << 30), last_error.c_str());
  }
  trim_pool();
}

// ---- JSON ------------------------------------------------------------------------------------------

void Bench::write_json(const DeviceInfo& dev) const {
  if (o_.json_path.empty()) return;
  int cublas_version = 0, runtime = 0, driver = 0;
  cublasGetVersion(cublas_, &cublas_version);
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE");
  json::Object software;
  software.add("cuda_runtime", runtime).add("cuda_driver", driver).add("cublas", cublas_version)
      .add("cublas_math_mode", "CUBLAS_DEFAULT_MATH");
  if (tf32) software.add("NVIDIA_TF32_OVERRIDE", tf32);
  else software.add_null("NVIDIA_TF32_OVERRIDE");
  json::Object method;
  method.add("timing", "CUDA events per run, median").add("runs_before_timed", 2)
      .add("max_iterations", o_.iters).add("budget_ms_per_row", o_.budget_ms)
      .add("check", "relative L2 difference from ours_strided (forward: from "
                    "ours_forward_strided) on 2^20 sampled output entries");
  std::vector<json::Object> rows;
  for (const Row& r : rows_) {
    json::Object row;
    row.add("section", r.section).add("op", r.op).add("strategy", r.strategy)
        .add("status", r.status).add("batch", r.batch).add("heads", r.heads).add("seq", r.seq)
        .add("head_dim", r.head_dim).add("M", r.M).add("N", r.N).add("K", r.K)
        .add("b_transposed", r.b_transposed).add("median_ms", r.t.median_ms)
        .add("min_ms", r.t.min_ms).add("iterations", r.t.iterations).add("flops", r.flops)
        .add("bytes", r.bytes).add("tflops", r.tflops()).add("gbs", r.gbs())
        .add("check", r.check).add("note", r.note);
    rows.push_back(row);
  }
  json::Document doc("attn-gemm-bench/1");
  doc.field("created", "\"" + json::utc_now() + "\"")
      .field("quick", o_.quick ? "true" : "false")
      .field("device", json::device(dev))
      .field("software", software)
      .field("method", method)
      .list("rows", rows)
      .list("oom_probe", probe_json_);
  if (Status s = doc.write(o_.json_path); !s) throw std::runtime_error(s.message());
  std::cout << "wrote " << o_.json_path << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_05: module 05's batched GEMMs (strided, pointer arrays, cuBLAS), the "
               "unfused forward, launch overhead and the score-memory limit",
               "bench_05"};
  app.add_option("--json", o.json_path, "write the results as JSON (schema attn-gemm-bench/1)");
  app.add_flag("--quick", o.quick, "a short sweep (a few shapes) to check that it runs");
  app.add_option("--iters", o.iters, "at most this many timed runs per row")
      ->check(CLI::Range(3, 1000));
  app.add_option("--budget-ms", o.budget_ms, "timed runs per row stop near this many ms")
      ->check(CLI::Range(1.0, 1e6));
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::cerr << "bench_05: " << no_device_reason() << ": the benchmark needs a GPU\n";
    return 1;
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    const DeviceInfo dev = query_device();
    std::cout << "device: " << dev.summary() << ", SM clock " << dev.sm_clock_khz / 1000
              << " MHz, peak fp32 " << dev.peak_fp32_tflops << " TFLOP/s, "
              << dev.peak_bandwidth_gbs << " GB/s (spec-sheet arithmetic)\n"
              << "cuBLAS in CUBLAS_DEFAULT_MATH (fp32, no TF32)\n\n"
              << "section            op       shape                      strategy"
                 "                        ms  TFLOP/s      GB/s\n";
    Bench bench(o);
    bench.attention_section();
    bench.small_section();
    bench.oom_probe();
    bench.write_json(dev);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("bench_05 finished in %.0f s\n", seconds);
  } catch (const std::exception& e) {
    std::cerr << "bench_05: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
