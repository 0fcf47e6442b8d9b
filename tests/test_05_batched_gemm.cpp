// Grader for module 05 (GPU): attention unfused, as two batched GEMMs and a row softmax.
// Built twice: grade_05 (exercise), check_05 (solution). Without a GPU it exits 77 (skipped).
//
// Four layers, each checked on its own so that a failure points at one piece:
//  1. the batched GEMM, both dispatch strategies, against a double-precision CPU GEMM: odd
//     M, N, K (1, 17, 65, ~1000: every tail of the 128 x 64 x 16 tiles), B transposed or not,
//     alpha, padded rows, heads interleaved as in BSHD, bases that are only 4-byte aligned,
//     grouped B heads, batch * heads > 65535 (the grid limits), and for the pointer arrays
//     heads in separate allocations made in a shuffled order;
//  2. cuBLAS on the same inputs (cublasSgemmStridedBatched and cublasSgemmBatched, math mode
//     CUBLAS_PEDANTIC_MATH: plain fp32, no TF32): cuBLAS against the CPU GEMM (the yardstick
//     is right) and ours against cuBLAS (relative error < 1e-4);
//  3. the row softmax against a double softmax: tails, large logits, a scale, causal masks
//     with seq_q > seq_k (rows that see no key must be exactly 0);
//  4. attention (forward and forward_pointer_array) against the reference through
//     testing::check_against_reference: odd sizes, seq_q != seq_k, head dims 1 to 256,
//     BSHD, causal, grouped K/V heads; and a clear error when the scores do not fit.
// Every GPU output is poisoned before the launch (so unwritten elements are found), the
// padding between rows and a guard after the buffer must stay poisoned, and a failure names
// the seed, the shape, what is wrong and the lesson section.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <cstdint>
#include <thread>
#include <tuple>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/random.h"
#include "common/reference.h"
#include "modules/05_batched_gemm/batched_gemm.h"
#include "tests/support.h"

using namespace attn;
namespace impl = attn::m05::ATTN_IMPL;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(5, testing::impl_under_test()); }

const char* kUnfused = "modules/05_batched_gemm/README.md, section 1 (attention as three kernels)";
const char* kDispatch =
    "modules/05_batched_gemm/README.md, section 2 (strided and pointer-array dispatch, the grid)";
const char* kGemm = "modules/05_batched_gemm/README.md, section 3 (the tiled GEMM, step by step)";
const char* kSoftmax = "modules/05_batched_gemm/README.md, section 4 (the row softmax)";
const char* kMemory = "modules/05_batched_gemm/README.md, section 5 (the scores in memory)";

constexpr int64_t kGuard = 1024;  // poisoned elements after every output buffer

std::string seed_text(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay: ATTN_SEED=" +
         std::to_string(testing::base_seed()) + ")";
}

// Runs f(i) for i in [0, n) on all cores (the CPU references of the larger shapes).
template <class F>
void parallel_for(int64_t n, F f) {
  const int64_t workers =
      std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += workers) f(i);
    });
  for (std::thread& t : threads) t.join();
}

// Waits for the GPU and turns any error (launch or fault) into a Status.
Status sync_status() {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return Status::error(std::string("launch failed: ") + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ")");
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return Status::error(std::string("the kernel faulted: ") + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ")");
  return Status::ok();
}

// =============================================================================================
// 1. The batched GEMM
// =============================================================================================

// One operand's memory: `heads` matrices of rows x cols per batch, row-major.
struct Matrix {
  int rows = 0, cols = 0, heads = 1, batch = 1;
  int64_t ld = 0, head_stride = 0, batch_stride = 0;
  int64_t offset = 0;  // elements before the first matrix (1: rows only 4-byte aligned)
  int64_t elements() const { return offset + batch_stride * batch; }
  int64_t at(int b, int h, int r, int c) const {
    return offset + b * batch_stride + h * head_stride + int64_t(r) * ld + c;
  }
};

// pad: unused elements after every row. interleaved: the heads of one row index side by side
// (as heads in BSHD), else each head's matrix is contiguous (as in BHSD).
Matrix make_matrix(int rows, int cols, int heads, int batch, int pad, bool interleaved,
                   int offset) {
  Matrix m;
  m.rows = rows, m.cols = cols, m.heads = heads, m.batch = batch, m.offset = offset;
  const int64_t width = int64_t(cols) + pad;
  if (interleaved) {
    m.ld = heads * width;
    m.head_stride = width;
    m.batch_stride = rows * m.ld;
  } else {
    m.ld = width;
    m.head_stride = rows * width;
    m.batch_stride = heads * m.head_stride;
  }
  return m;
}

struct GemmCase {
  int M = 1, N = 1, K = 1, batch = 1, heads = 1;
  bool b_transposed = false;
  float alpha = 1.0f;
  int pad = 0;               // row stride = cols + pad (odd strides: 4-byte loads only)
  bool interleaved = false;  // heads interleaved per row (strided only)
  int offset = 0;            // bases only 4-byte aligned
  int head_group = 1;        // heads per B head (strided: b_head_group)

  int b_heads() const { return (heads + head_group - 1) / head_group; }
  Matrix a() const { return make_matrix(M, K, heads, batch, pad, interleaved, offset); }
  Matrix b() const {
    return b_transposed ? make_matrix(N, K, b_heads(), batch, pad, interleaved, offset)
                        : make_matrix(K, N, b_heads(), batch, pad, interleaved, offset);
  }
  Matrix c() const { return make_matrix(M, N, heads, batch, pad, interleaved, offset); }
  double work() const { return double(batch) * heads * M * double(N) * K; }
  std::string describe() const {
    std::ostringstream s;
    s << "M=" << M << " N=" << N << " K=" << K << " batch=" << batch << " heads=" << heads
      << (b_transposed ? " B^T (B stored N x K)" : " B (stored K x N)") << " alpha=" << alpha;
    if (pad) s << " row padding " << pad;
    if (interleaved) s << " heads interleaved";
    if (offset) s << " bases 4-byte aligned";
    if (head_group > 1) s << " " << head_group << " heads per B head";
    return s.str();
  }
};

struct GemmInputs {
  std::vector<float> a, b;
  uint64_t seed = 0;
};

GemmInputs gemm_inputs(const GemmCase& g, uint64_t seed) {
  GemmInputs in;
  in.seed = seed;
  in.a.resize(size_t(g.a().elements()));
  in.b.resize(size_t(g.b().elements()));
  fill_uniform(in.a, seed * 2 + 0);
  fill_uniform(in.b, seed * 2 + 1);
  return in;
}

// B(k, n) of head (b, h), whichever way B is stored.
float b_value(const GemmCase& g, const Matrix& mb, const std::vector<float>& B, int b, int h, int k,
              int n) {
  const int bh = h / g.head_group;
  return g.b_transposed ? B[size_t(mb.at(b, bh, n, k))] : B[size_t(mb.at(b, bh, k, n))];
}

// C in double, in C's layout (entries outside the matrices stay 0). `k_end` < K models a
// kernel that drops the last partial k tile.
std::vector<double> reference_gemm(const GemmCase& g, const GemmInputs& in, double alpha,
                                   int k_end = -1) {
  if (k_end < 0) k_end = g.K;
  const Matrix ma = g.a(), mb = g.b(), mc = g.c();
  std::vector<double> c(size_t(mc.elements()), 0.0);
  parallel_for(int64_t(g.batch) * g.heads * g.M, [&](int64_t row) {
    const int m = int(row % g.M), h = int(row / g.M % g.heads), b = int(row / g.M / g.heads);
    for (int n = 0; n < g.N; ++n) {
      double sum = 0.0;
      for (int k = 0; k < k_end; ++k)
        sum += double(in.a[size_t(ma.at(b, h, m, k))]) * b_value(g, mb, in.b, b, h, k, n);
      c[size_t(mc.at(b, h, m, n))] = alpha * sum;
    }
  });
  return c;
}

struct GemmComparison {
  double rel_error = 0.0, max_abs_error = 0.0;
  int64_t elements = 0, nonfinite = 0, unwritten = 0, bad = 0;
  int64_t outside_writes = 0;  // padding between rows, gaps, or the guard after the buffer
  int first_bad[4] = {-1, -1, -1, -1};  // b, h, m, n
  float first_got = 0.0f;
  double first_want = 0.0;
  int min_bad_m = INT_MAX, min_bad_n = INT_MAX, max_bad_m = -1, max_bad_n = -1;
  int64_t heads_all_unwritten = 0;
  int first_unwritten_head = -1;  // flattened b * heads + h
  bool passed() const { return nonfinite == 0 && outside_writes == 0 && rel_error < kFp32Tolerance; }
  std::string summary() const {
    char line[256];
    std::snprintf(line, sizeof line, "%s  rel err %.3e (tolerance %.0e)  max abs err %.3e",
                  passed() ? "PASS" : "FAIL", rel_error, kFp32Tolerance, max_abs_error);
    std::string s = line;
    if (nonfinite) s += "  NaN/Inf: " + std::to_string(nonfinite);
    if (unwritten) s += " (never written: " + std::to_string(unwritten) + ")";
    if (bad)
      s += "\n  first wrong element (b=" + std::to_string(first_bad[0]) +
           ", h=" + std::to_string(first_bad[1]) + ", m=" + std::to_string(first_bad[2]) +
           ", n=" + std::to_string(first_bad[3]) + "): got " + std::to_string(first_got) +
           ", want " + std::to_string(first_want) + "; wrong rows m in [" +
           std::to_string(min_bad_m) + ", " + std::to_string(max_bad_m) + "], columns n in [" +
           std::to_string(min_bad_n) + ", " + std::to_string(max_bad_n) + "]";
    if (outside_writes)
      s += "\n  " + std::to_string(outside_writes) + " elements outside C's M x N matrices "
           "(row padding or past the end) were written";
    return s;
  }
};

// `got` has C's layout plus kGuard elements (or exactly C's layout when `guarded` is false).
GemmComparison compare_gemm(const GemmCase& g, const std::vector<float>& got,
                            const std::vector<double>& want) {
  const Matrix mc = g.c();
  GemmComparison r;
  std::vector<char> inside(got.size(), 0);
  double ref_sq = 0.0;
  for (int b = 0; b < g.batch; ++b)
    for (int h = 0; h < g.heads; ++h)
      for (int m = 0; m < g.M; ++m)
        for (int n = 0; n < g.N; ++n) {
          const size_t e = size_t(mc.at(b, h, m, n));
          inside[e] = 1;
          ref_sq += want[e] * want[e];
        }
  r.elements = int64_t(g.batch) * g.heads * g.M * g.N;
  const double rms = std::sqrt(ref_sq / double(r.elements));
  double err_sq = 0.0;
  for (int b = 0; b < g.batch; ++b)
    for (int h = 0; h < g.heads; ++h) {
      int64_t head_unwritten = 0;
      for (int m = 0; m < g.M; ++m)
        for (int n = 0; n < g.N; ++n) {
          const size_t e = size_t(mc.at(b, h, m, n));
          const float x = got[e];
          bool is_bad;
          if (!std::isfinite(x)) {
            ++r.nonfinite;
            if (is_poison(x)) ++r.unwritten, ++head_unwritten;
            is_bad = true;
          } else {
            const double err = std::fabs(double(x) - want[e]);
            err_sq += err * err;
            r.max_abs_error = std::max(r.max_abs_error, err);
            is_bad = err > 100.0 * kFp32Tolerance * (std::fabs(want[e]) + rms);
          }
          if (!is_bad) continue;
          if (r.bad++ == 0) {
            r.first_bad[0] = b, r.first_bad[1] = h, r.first_bad[2] = m, r.first_bad[3] = n;
            r.first_got = x;
            r.first_want = want[e];
          }
          r.min_bad_m = std::min(r.min_bad_m, m), r.max_bad_m = std::max(r.max_bad_m, m);
          r.min_bad_n = std::min(r.min_bad_n, n), r.max_bad_n = std::max(r.max_bad_n, n);
        }
      if (head_unwritten == int64_t(g.M) * g.N) {
        if (r.heads_all_unwritten++ == 0) r.first_unwritten_head = b * g.heads + h;
      }
    }
  r.rel_error = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  for (size_t e = 0; e < got.size(); ++e) r.outside_writes += !inside[e] && !is_poison(got[e]);
  return r;
}

// What a failed GEMM check means, in the learner's terms.
std::vector<std::string> gemm_hints(const GemmCase& g, const GemmInputs& in,
                                    const GemmComparison& r, const std::vector<float>& got) {
  std::vector<std::string> hints;
  const int64_t heads = int64_t(g.batch) * g.heads;
  if (r.unwritten == r.elements) {
    hints.push_back("C was not written at all: the epilogue (TODO 4) stores nothing, or the "
                    "kernel did not run");
    return hints;
  }
  if (r.heads_all_unwritten > 0)
    hints.push_back(std::to_string(r.heads_all_unwritten) + " of " + std::to_string(heads) +
                    " (batch, head) matrices were never written, the first is number " +
                    std::to_string(r.first_unwritten_head) +
                    " (b * heads + h): the grid does not reach every head (batch * heads = " +
                    std::to_string(heads) + "; grid.y and grid.z stop at 65535)");
  else if (r.unwritten > 0)
    hints.push_back("some elements were never written (rows m in [" + std::to_string(r.min_bad_m) +
                    ", " + std::to_string(r.max_bad_m) + "], columns n in [" +
                    std::to_string(r.min_bad_n) + ", " + std::to_string(r.max_bad_n) +
                    "]): the tiles do not cover C (a tile is " + std::to_string(m05::kTileM) +
                    " x " + std::to_string(m05::kTileN) + "; round the tile count up), or the "
                    "epilogue skips part of the micro-tile");
  if (r.outside_writes > 0)
    hints.push_back("elements outside the M x N matrices were written: a store past the last "
                    "row or column (bounds: m < M, and store_chunk's count N - n), or a row "
                    "stride other than ldc");
  if (r.nonfinite > r.unwritten)
    hints.push_back(std::to_string(r.nonfinite - r.unwritten) +
                    " elements are NaN/Inf: values read from outside A or B (the tails of the "
                    "last tiles must be zeros, not whatever is in memory there)");
  if (r.nonfinite > 0 || r.bad == 0) return hints;

  // Finite but wrong: replay classic mistakes when the CPU can afford it.
  const size_t before = hints.size();
  if (g.work() <= 3e8) {
    const auto matches = [&](const std::vector<double>& model) {
      return compare_gemm(g, got, model).passed();
    };
    if (g.alpha != 1.0f && matches(reference_gemm(g, in, 1.0)))
      hints.push_back("C matches A · B without alpha: multiply by alpha when storing C");
    if (g.K % m05::kTileK != 0 && matches(reference_gemm(g, in, g.alpha, g.K / m05::kTileK * m05::kTileK)))
      hints.push_back("C matches the product without the last " +
                      std::to_string(g.K % m05::kTileK) + " values of k: the last k tile is "
                      "partial (K = " + std::to_string(g.K) + "); load it with zeros past K, "
                      "do not skip it");
    if (g.K > m05::kTileK) {
      const int last = (g.K - 1) / m05::kTileK * m05::kTileK;
      GemmInputs only_last = in;  // A with every k before the last tile zeroed
      const Matrix ma = g.a();
      for (int b = 0; b < g.batch; ++b)
        for (int h = 0; h < g.heads; ++h)
          for (int m = 0; m < g.M; ++m)
            for (int k = 0; k < last; ++k) only_last.a[size_t(ma.at(b, h, m, k))] = 0.0f;
      if (matches(reference_gemm(g, only_last, g.alpha)))
        hints.push_back("C matches the last k tile alone: the accumulators are reset inside "
                        "the k loop; set acc to 0 once, before it");
    }
  }
  if (hints.size() > before) return hints;  // a model matched: that is the explanation
  if (g.M > m05::kTileM && r.min_bad_m >= g.M / m05::kTileM * m05::kTileM)
    hints.push_back("only rows of the last, partial row tile are wrong (m >= " +
                    std::to_string(g.M / m05::kTileM * m05::kTileM) + "): rows past M must be "
                    "loaded as zeros and not stored");
  if (g.N > m05::kTileN && r.min_bad_n >= g.N / m05::kTileN * m05::kTileN)
    hints.push_back("only columns of the last, partial column tile are wrong (n >= " +
                    std::to_string(g.N / m05::kTileN * m05::kTileN) + "): columns past N must "
                    "be loaded as zeros and not stored");
  if (g.pad % 4 != 0 || g.offset % 4 != 0)
    hints.push_back("this case has rows that are only 4-byte aligned: a 16-byte load or store "
                    "there reads the wrong floats (or faults); vec4 must be false for them");
  return hints;
}

bool report_gemm(const char* api, const GemmCase& g, const GemmInputs& in, const Status& status,
                 const std::vector<float>& got, const std::vector<double>& want,
                 const char* lesson) {
  std::ostringstream report;
  report << api << " on " << g.describe() << ", " << seed_text(in.seed) << "\n";
  bool passed = status.is_ok();
  if (!status) {
    report << "  did not run: " << status.message() << "\n";
    if (status.message().find("cudaErrorInvalidConfiguration") != std::string::npos)
      report << "  hint: the launch was refused: grid.y and grid.z stop at 65535 (here batch = "
             << g.batch << ", heads = " << g.heads << "); fold what does not fit into grid.x\n";
  } else {
    const GemmComparison r = compare_gemm(g, got, want);
    passed = r.passed();
    report << "  " << r.summary() << "\n";
    if (!passed)
      for (const std::string& h : gemm_hints(g, in, r, got)) report << "  hint: " << h << "\n";
  }
  if (!passed) report << "  read: " << lesson << "\n";
  CHECK_MESSAGE(passed, report.str());
  return passed;
}

m05::BatchedGemmStridedArgs strided_args(const GemmCase& g, const float* a, const float* b,
                                         float* c) {
  const Matrix ma = g.a(), mb = g.b(), mc = g.c();
  m05::BatchedGemmStridedArgs args;
  args.A = a + ma.offset;
  args.B = b + mb.offset;
  args.C = c + mc.offset;
  args.M = g.M, args.N = g.N, args.K = g.K;
  args.batch = g.batch, args.num_heads = g.heads;
  args.a_batch_stride = ma.batch_stride, args.a_head_stride = ma.head_stride;
  args.a_row_stride = ma.ld;
  args.b_batch_stride = mb.batch_stride, args.b_head_stride = mb.head_stride;
  args.b_row_stride = mb.ld;
  args.c_batch_stride = mc.batch_stride, args.c_head_stride = mc.head_stride;
  args.c_row_stride = mc.ld;
  args.b_head_group = g.head_group;
  args.b_transposed = g.b_transposed;
  args.alpha = g.alpha;
  return args;
}

// Ours, strided: C (poisoned, with a guard) in C's layout.
Status run_strided(const GemmCase& g, const GemmInputs& in, std::vector<float>& c_out) {
  try {
    DeviceBuffer<float> a(in.a), b(in.b), c(size_t(g.c().elements() + kGuard));
    c.poison();
    if (Status s = impl::gemm_strided(strided_args(g, a.get(), b.get(), c.get()), nullptr); !s)
      return s;
    if (Status s = sync_status(); !s) return s;
    c_out = c.to_host();
    return Status::ok();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
}

// Every head of an operand somewhere else: `separate` gives each head its own allocation,
// made in a shuffled order (so the heads' addresses are not in head order); otherwise the
// heads sit in one allocation at shuffled slots. The host layout is the case's (not
// interleaved), each head a contiguous slice of rows * ld elements (+ kGuard for C).
struct ScatteredOperand {
  std::vector<DeviceBuffer<float>> buffers;  // separate: one per distinct head
  DeviceBuffer<float> pool;                  // not separate: all heads
  std::vector<float*> head;                  // device address of distinct head i
  int64_t head_elements = 0;                 // offset + rows * ld (+ kGuard for outputs)
};

ScatteredOperand scatter(const Matrix& m, const std::vector<float>* host, bool separate,
                         bool output, uint64_t seed) {
  ScatteredOperand s;
  const int64_t distinct = int64_t(m.batch) * m.heads;
  const int64_t body = int64_t(m.rows) * m.ld;
  s.head_elements = m.offset + body + (output ? kGuard : 0);
  std::vector<int64_t> order(static_cast<size_t>(distinct));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  for (int64_t i = distinct - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[size_t(rng.next_u64() % uint64_t(i + 1))]);
  s.head.resize(size_t(distinct));
  if (!separate) s.pool = DeviceBuffer<float>(size_t(distinct * s.head_elements));
  if (separate) s.buffers.resize(size_t(distinct));
  for (int64_t slot = 0; slot < distinct; ++slot) {
    const int64_t i = order[size_t(slot)];  // the head that goes into this slot
    float* base;
    if (separate) {
      s.buffers[size_t(i)] = DeviceBuffer<float>(size_t(s.head_elements));
      base = s.buffers[size_t(i)].get();
    } else {
      base = s.pool.get() + slot * s.head_elements;
    }
    s.head[size_t(i)] = base + m.offset;
  }
  if (output) {
    if (separate)
      for (auto& b : s.buffers) b.poison();
    else
      s.pool.poison();
  }
  if (host) {
    // Head i of the case's layout (batch b = i / heads, head h = i % heads) is the slice at
    // m.at(b, h, 0, 0) of rows * ld elements (fewer for the last head of a tensor whose last
    // row has no padding after it).
    const auto head_values = [&](int64_t i) {
      const int64_t at = m.at(int(i / m.heads), int(i % m.heads), 0, 0);
      return std::pair{host->data() + at, std::min<int64_t>(body, int64_t(host->size()) - at)};
    };
    if (separate) {
      for (int64_t i = 0; i < distinct; ++i) {
        const auto [src, n] = head_values(i);
        ATTN_CUDA_CHECK(cudaMemcpy(s.head[size_t(i)], src, size_t(n) * sizeof(float),
                                   cudaMemcpyHostToDevice));
      }
    } else {  // one copy of the whole pool
      std::vector<float> staging(s.pool.size(), 0.0f);
      for (int64_t i = 0; i < distinct; ++i) {
        const auto [src, n] = head_values(i);
        std::copy(src, src + n, staging.begin() + (s.head[size_t(i)] - s.pool.get()));
      }
      s.pool.copy_from(staging);
    }
  }
  return s;
}

// Gathers a scattered C (with each head's padding and guard) into C's layout; elements of a
// head's buffer outside its rows go to the guard region's count via `outside_writes`.
std::vector<float> gather(const Matrix& m, const ScatteredOperand& s, int64_t& outside_writes) {
  std::vector<float> out(size_t(m.elements() + kGuard), poison_value());
  outside_writes = 0;
  const int64_t body = int64_t(m.rows) * m.ld;
  std::vector<float> pool;
  if (s.pool.size()) pool = s.pool.to_host();  // one copy instead of one per head
  std::vector<float> head(size_t(body + kGuard));
  for (int64_t i = 0; i < int64_t(m.batch) * m.heads; ++i) {
    if (s.pool.size()) {
      const int64_t at = s.head[size_t(i)] - s.pool.get();
      std::copy(pool.begin() + at, pool.begin() + at + body + kGuard, head.begin());
    } else {
      ATTN_CUDA_CHECK(cudaMemcpy(head.data(), s.head[size_t(i)], head.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost));
    }
    const int b = int(i / m.heads), h = int(i % m.heads);
    std::copy(head.begin(), head.begin() + body, out.begin() + m.at(b, h, 0, 0));
    for (int64_t e = body; e < body + kGuard; ++e) outside_writes += !is_poison(head[size_t(e)]);
  }
  return out;
}

// Pointer tables: entry b * heads + h of A and C is head (b, h); of B, head (b, h / group).
template <class T>
DeviceBuffer<T> pointer_table(const GemmCase& g, const ScatteredOperand& s, bool is_b) {
  std::vector<T> table(size_t(g.batch) * g.heads);
  const int distinct_heads = is_b ? g.b_heads() : g.heads;
  for (int b = 0; b < g.batch; ++b)
    for (int h = 0; h < g.heads; ++h)
      table[size_t(b) * g.heads + h] =
          s.head[size_t(b) * distinct_heads + (is_b ? h / g.head_group : h)];
  return DeviceBuffer<T>(table);
}

// Ours, pointer arrays over scattered heads; C gathered back into C's layout.
Status run_pointer_array(const GemmCase& g, const GemmInputs& in, bool separate,
                         std::vector<float>& c_out) {
  try {
    const Matrix ma = g.a(), mb = g.b(), mc = g.c();
    ScatteredOperand a = scatter(ma, &in.a, separate, false, in.seed + 11);
    ScatteredOperand b = scatter(mb, &in.b, separate, false, in.seed + 12);
    ScatteredOperand c = scatter(mc, nullptr, separate, true, in.seed + 13);
    DeviceBuffer<const float*> a_table = pointer_table<const float*>(g, a, false);
    DeviceBuffer<const float*> b_table = pointer_table<const float*>(g, b, true);
    DeviceBuffer<float*> c_table = pointer_table<float*>(g, c, false);
    m05::BatchedGemmPtrArgs args;
    args.A = a_table.get(), args.B = b_table.get(), args.C = c_table.get();
    args.M = g.M, args.N = g.N, args.K = g.K;
    args.batch = g.batch, args.num_heads = g.heads;
    args.lda = ma.ld, args.ldb = mb.ld, args.ldc = mc.ld;
    args.b_transposed = g.b_transposed;
    args.alpha = g.alpha;
    if (Status s = impl::gemm_pointer_array(args, nullptr); !s) return s;
    if (Status s = sync_status(); !s) return s;
    int64_t past_end = 0;
    c_out = gather(mc, c, past_end);
    // Writes past a head's last row land in that head's guard: count them once, in the
    // shared guard of the gathered buffer (compare_gemm counts writes outside the rows).
    for (int64_t e = 0; e < std::min<int64_t>(past_end, kGuard); ++e)
      c_out[size_t(mc.elements() + e)] = 0.0f;
    return Status::ok();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
}

bool too_big_for_sanitizer(double work) {
  if (!testing::sanitizer_light() || 2.0 * work <= testing::kSanitizerMaxFlops) return false;
  MESSAGE("not run under ATTN_SANITIZER_LIGHT (too large for a sanitizer)");
  return true;
}

// Strided and pointer-array (separate allocations unless there are too many heads), each
// against the CPU GEMM.
void check_gemm(const GemmCase& g, const char* lesson = kGemm) {
  if (too_big_for_sanitizer(g.work())) return;
  const GemmInputs in = gemm_inputs(g, testing::next_seed());
  const std::vector<double> want = reference_gemm(g, in, g.alpha);
  std::vector<float> got;
  Status s = run_strided(g, in, got);
  report_gemm("gemm_strided", g, in, s, got, want, lesson);
  if (g.interleaved) return;  // pointer arrays point at contiguous heads here
  const bool separate = int64_t(g.batch) * g.heads <= 512;
  s = run_pointer_array(g, in, separate, got);
  report_gemm(separate ? "gemm_pointer_array (every head its own allocation, shuffled)"
                       : "gemm_pointer_array (heads at shuffled places in one allocation)",
              g, in, s, got, want, separate ? lesson : kDispatch);
}

// =============================================================================================
// 2. cuBLAS on the same inputs
// =============================================================================================

struct Cublas {
  cublasHandle_t handle = nullptr;
  Cublas() {
    REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    // Plain fp32 arithmetic, no TF32 tensor cores and no other reduced-precision shortcuts:
    // the comparison must be between two fp32 GEMMs.
    REQUIRE(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
  }
  ~Cublas() { cublasDestroy(handle); }
};

Cublas& cublas() {
  static Cublas c;
  return c;
}

// cuBLAS is column-major. Row-major C = A · B(k, n) is column-major C^T = B^T · A^T: the
// "first" matrix of the call is our B (transposed once more when b_transposed), the second
// our A, and the column-major m x n is our N x M.
cublasOperation_t op_b(const GemmCase& g) { return g.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

double rel_error(const GemmCase& g, const std::vector<float>& got, const std::vector<float>& want) {
  const Matrix mc = g.c();
  double err = 0.0, ref = 0.0;
  for (int b = 0; b < g.batch; ++b)
    for (int h = 0; h < g.heads; ++h)
      for (int m = 0; m < g.M; ++m)
        for (int n = 0; n < g.N; ++n) {
          const size_t e = size_t(mc.at(b, h, m, n));
          const double d = double(got[e]) - want[e];
          err += std::isfinite(got[e]) ? d * d : INFINITY;
          ref += double(want[e]) * want[e];
        }
  return std::sqrt(err / std::max(ref, 1e-300));
}

// cublasSgemmStridedBatched and cublasSgemmBatched on the case's inputs; each checked against
// the CPU GEMM, and ours (strided and pointer-array) against them.
void check_against_cublas(const GemmCase& g) {
  const bool contiguous_heads = !g.interleaved && g.head_group == 1;
  REQUIRE_MESSAGE(contiguous_heads,
                  "cuBLAS's strided batch has one stride per operand: contiguous heads only");
  if (testing::sanitizer_light()) {
    MESSAGE("cuBLAS comparison not run under ATTN_SANITIZER_LIGHT (the sanitizers check ours)");
    return;
  }
  const GemmInputs in = gemm_inputs(g, testing::next_seed());
  const std::vector<double> want = reference_gemm(g, in, g.alpha);
  const Matrix ma = g.a(), mb = g.b(), mc = g.c();
  const int count = g.batch * g.heads;
  const float beta = 0.0f;

  std::vector<float> ours, ours_ptr, theirs, theirs_ptr;
  Status ours_status = run_strided(g, in, ours);
  Status ours_ptr_status = run_pointer_array(g, in, count <= 512, ours_ptr);
  {
    DeviceBuffer<float> a(in.a), b(in.b), c(size_t(mc.elements() + kGuard));
    c.poison();
    const cublasStatus_t st = cublasSgemmStridedBatched(
        cublas().handle, op_b(g), CUBLAS_OP_N, g.N, g.M, g.K, &g.alpha, b.get() + mb.offset,
        int(mb.ld), mb.head_stride, a.get() + ma.offset, int(ma.ld), ma.head_stride, &beta,
        c.get() + mc.offset, int(mc.ld), mc.head_stride, count);
    REQUIRE_MESSAGE(st == CUBLAS_STATUS_SUCCESS,
                    ("cublasSgemmStridedBatched failed: status " + std::to_string(int(st))));
    REQUIRE(sync_status().is_ok());
    theirs = c.to_host();
  }
  {
    ScatteredOperand a = scatter(ma, &in.a, count <= 512, false, in.seed + 21);
    ScatteredOperand b = scatter(mb, &in.b, count <= 512, false, in.seed + 22);
    ScatteredOperand c = scatter(mc, nullptr, count <= 512, true, in.seed + 23);
    DeviceBuffer<const float*> a_table = pointer_table<const float*>(g, a, false);
    DeviceBuffer<const float*> b_table = pointer_table<const float*>(g, b, true);
    DeviceBuffer<float*> c_table = pointer_table<float*>(g, c, false);
    const cublasStatus_t st = cublasSgemmBatched(
        cublas().handle, op_b(g), CUBLAS_OP_N, g.N, g.M, g.K, &g.alpha, b_table.get(),
        int(mb.ld), a_table.get(), int(ma.ld), &beta, c_table.get(), int(mc.ld), count);
    REQUIRE_MESSAGE(st == CUBLAS_STATUS_SUCCESS,
                    ("cublasSgemmBatched failed: status " + std::to_string(int(st))));
    REQUIRE(sync_status().is_ok());
    int64_t past_end = 0;
    theirs_ptr = gather(mc, c, past_end);
  }
  const GemmComparison cublas_strided = compare_gemm(g, theirs, want);
  const GemmComparison cublas_batched = compare_gemm(g, theirs_ptr, want);
  const std::string strided_report =
      "cuBLAS itself (cublasSgemmStridedBatched) against the CPU GEMM on " + g.describe() +
      ": " + cublas_strided.summary();
  const std::string batched_report = "cuBLAS itself (cublasSgemmBatched) against the CPU GEMM on " +
                                     g.describe() + ": " + cublas_batched.summary();
  CHECK_MESSAGE(cublas_strided.passed(), strided_report);
  CHECK_MESSAGE(cublas_batched.passed(), batched_report);

  const auto versus = [&](const char* what, const Status& s, const std::vector<float>& got,
                          const std::vector<float>& ref) {
    const double e = s ? rel_error(g, got, ref) : INFINITY;
    std::ostringstream report;
    report << what << " on " << g.describe() << ", " << seed_text(in.seed)
           << ": relative error " << e << " (tolerance " << kFp32Tolerance << ")";
    if (!s) report << ": did not run: " << s.message();
    report << "\n  read: " << kGemm;
    CHECK_MESSAGE(e < kFp32Tolerance, report.str());
  };
  versus("gemm_strided against cublasSgemmStridedBatched", ours_status, ours, theirs);
  versus("gemm_pointer_array against cublasSgemmBatched", ours_ptr_status, ours_ptr, theirs_ptr);
}

// =============================================================================================
// 3. The row softmax
// =============================================================================================

struct SoftmaxCase {
  int heads = 1, seq_q = 1, seq_k = 1;
  int64_t row_stride = 0;  // 0: seq_k
  float scale = 1.0f;
  bool causal = false;
  float range = 4.0f;  // scores uniform in [-range, range)
  int64_t stride() const { return row_stride ? row_stride : seq_k; }
  int64_t rows() const { return int64_t(heads) * seq_q; }
  std::string describe() const {
    std::ostringstream s;
    s << heads << " heads x seq_q=" << seq_q << " rows of seq_k=" << seq_k << " (row stride "
      << stride() << ") scale=" << scale << (causal ? " causal" : "") << " scores in [-" << range
      << ", " << range << ")";
    return s.str();
  }
};

// Keys [0, visible) seen by row `query`: Problem::first_masked_key's rule.
int visible_keys(const SoftmaxCase& c, int query, bool causal, bool top_left = false) {
  if (!causal) return c.seq_k;
  const int64_t last = top_left ? query : int64_t(query) + c.seq_k - c.seq_q;
  return int(std::clamp<int64_t>(last + 1, 0, c.seq_k));
}

std::vector<double> reference_softmax(const SoftmaxCase& c, const std::vector<float>& s,
                                      double scale, bool causal, bool top_left = false) {
  std::vector<double> p(s.size(), 0.0);
  for (int64_t r = 0; r < c.rows(); ++r) {
    const int visible = visible_keys(c, int(r % c.seq_q), causal, top_left);
    const float* x = s.data() + r * c.stride();
    double* y = p.data() + r * c.stride();
    if (visible == 0) continue;
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < visible; ++j) mx = std::max(mx, scale * x[j]);
    for (int j = 0; j < visible; ++j) sum += (y[j] = std::exp(scale * x[j] - mx));
    for (int j = 0; j < visible; ++j) y[j] /= sum;
  }
  return p;
}

struct SoftmaxComparison {
  double rel_error = 0.0, max_abs_error = 0.0;
  int64_t nonfinite = 0, unwritten = 0, masked_nonzero = 0, outside_writes = 0;
  int64_t empty_rows = 0, empty_rows_nan = 0, unchanged = 0, elements = 0;
  int64_t zero_rows = 0;  // rows that see keys but came out all zeros
  int64_t first_bad_row = -1;
  int first_bad_key = -1;
  bool passed() const {
    return nonfinite == 0 && masked_nonzero == 0 && outside_writes == 0 &&
           rel_error < kFp32Tolerance;
  }
};

SoftmaxComparison compare_softmax(const SoftmaxCase& c, const std::vector<float>& input,
                                  const std::vector<float>& got, const std::vector<double>& want,
                                  bool causal, bool top_left = false) {
  SoftmaxComparison r;
  double err = 0.0, ref = 0.0;
  std::vector<char> inside(got.size(), 0);
  for (int64_t row = 0; row < c.rows(); ++row) {
    const int visible = visible_keys(c, int(row % c.seq_q), causal, top_left);
    if (visible == 0) ++r.empty_rows;
    bool row_nan = false;
    for (int j = 0; j < c.seq_k; ++j) {
      const size_t e = size_t(row * c.stride() + j);
      inside[e] = 1;
      ++r.elements;
      const float x = got[e];
      bool bad = false;
      if (x == input[e]) ++r.unchanged;
      if (!std::isfinite(x)) {
        ++r.nonfinite, row_nan = true, bad = true;
        if (is_poison(x)) ++r.unwritten;
      } else {
        const double d = double(x) - want[e];
        err += d * d;
        r.max_abs_error = std::max(r.max_abs_error, std::fabs(d));
        bad = std::fabs(d) > 1e-3 * (std::fabs(want[e]) + 1.0 / visible_keys(c, 0, false));
        if (j >= visible && x != 0.0f) ++r.masked_nonzero, bad = true;
      }
      ref += want[e] * want[e];
      if (bad && r.first_bad_row < 0) r.first_bad_row = row, r.first_bad_key = j;
    }
    if (visible == 0 && row_nan) ++r.empty_rows_nan;
    if (visible > 0) {
      bool all_zero = true;
      for (int j = 0; j < c.seq_k; ++j) all_zero = all_zero && got[size_t(row * c.stride() + j)] == 0.0f;
      r.zero_rows += all_zero;
    }
  }
  r.rel_error = std::sqrt(err / std::max(ref, 1e-300));
  for (size_t e = 0; e < got.size(); ++e) r.outside_writes += !inside[e] && !is_poison(got[e]);
  return r;
}

// In place on scores with poisoned padding between rows and a poisoned guard after them.
void check_softmax(const SoftmaxCase& c) {
  const uint64_t seed = testing::next_seed();
  const int64_t elements = c.rows() * c.stride();
  std::vector<float> input(size_t(elements + kGuard), poison_value());
  {
    std::vector<float> values(size_t(c.rows()) * c.seq_k);
    fill_uniform(values, seed, -c.range, c.range);
    for (int64_t r = 0; r < c.rows(); ++r)
      std::copy(values.begin() + r * c.seq_k, values.begin() + (r + 1) * c.seq_k,
                input.begin() + r * c.stride());
  }
  std::vector<float> got;
  Status status = Status::ok();
  try {
    DeviceBuffer<float> s(input);
    m05::RowSoftmaxArgs args;
    args.scores = s.get();
    args.rows = c.rows();
    args.seq_q = c.seq_q;
    args.seq_k = c.seq_k;
    args.row_stride = c.stride();
    args.scale = c.scale;
    args.causal = c.causal;
    status = impl::row_softmax(args, nullptr);
    if (status) status = sync_status();
    if (status) got = s.to_host();
  } catch (const CudaError& e) {
    status = Status::error(e.what());
  }
  std::ostringstream report;
  report << "row_softmax on " << c.describe() << ", " << seed_text(seed) << "\n";
  bool passed = status.is_ok();
  if (!status) {
    report << "  did not run: " << status.message() << "\n";
  } else {
    const std::vector<double> want = reference_softmax(c, input, c.scale, c.causal);
    const SoftmaxComparison r = compare_softmax(c, input, got, want, c.causal);
    passed = r.passed();
    char line[200];
    std::snprintf(line, sizeof line, "  %s  rel err %.3e (tolerance %.0e)  max abs err %.3e",
                  passed ? "PASS" : "FAIL", r.rel_error, kFp32Tolerance, r.max_abs_error);
    report << line;
    if (r.nonfinite) report << "  NaN/Inf: " << r.nonfinite;
    report << "\n";
    if (!passed) {
      if (r.first_bad_row >= 0)
        report << "  first wrong value: row " << r.first_bad_row << " (query "
               << r.first_bad_row % c.seq_q << "), key " << r.first_bad_key << "\n";
      int hints = 0;
      const auto hint = [&](const std::string& h) {
        report << "  hint: " << h << "\n";
        ++hints;
      };
      const auto matches = [&](const std::vector<double>& model, bool causal,
                               bool top_left = false) {
        return compare_softmax(c, input, got, model, causal, top_left).passed();
      };
      if (r.unchanged == r.elements) {
        hint("the scores are unchanged: the softmax wrote nothing (TODO 7 stores P over S)");
        report << "  read: " << kSoftmax << "\n";
        CHECK_MESSAGE(passed, report.str());
        return;
      }
      if (r.outside_writes)
        hint(std::to_string(r.outside_writes) + " elements past seq_k in a row (the padding "
             "up to the row stride) or past the last row were written");
      if (r.empty_rows_nan)
        hint(std::to_string(r.empty_rows_nan) + " rows that see no key (causal, seq_q > seq_k: "
             "the first " + std::to_string(r.empty_rows / c.heads) + " queries of each head) "
             "are NaN: 0/0. Such a row is all zeros: guard m = -inf (m_ref = 0) and divide only "
             "when l > 0");
      else if (r.nonfinite > r.unwritten)
        hint("NaN/Inf values: exp overflows without subtracting the row max first, or "
             "-inf - -inf where a lane saw no key (m_ref)");
      if (r.zero_rows)
        hint(std::to_string(r.zero_rows) + " rows that see keys came out all zeros: their sum l "
             "was 0 or NaN (1/l is only taken when l > 0). A lane that saw no key has m = -inf: "
             "-inf - -inf is NaN, in the chunk update and in the merge across lanes; use m_ref");
      if (r.masked_nonzero)
        hint(std::to_string(r.masked_nonzero) + " masked entries (keys past the row's last "
             "visible key) are not 0: P V sums over every key, so masked keys must be written "
             "as 0");
      if (r.nonfinite == 0) {
        if (c.causal && matches(reference_softmax(c, input, c.scale, false), false))
          hint("P matches the softmax WITHOUT the causal mask: compute the row's visible keys "
               "(TODO 5)");
        if (c.causal && c.seq_q != c.seq_k &&
            matches(reference_softmax(c, input, c.scale, true, /*top_left=*/true), true, true))
          hint("P matches the mask aligned TOP-LEFT (query i sees keys <= i): with "
               "seq_q != seq_k it is bottom-right, keys <= i + seq_k - seq_q");
        if (c.scale != 1.0f && matches(reference_softmax(c, input, 1.0, c.causal), c.causal))
          hint("P matches the softmax without the scale: multiply (s - m) by scale · log2(e)");
        if (c.scale == 1.0f && matches(reference_softmax(c, input, std::log(2.0), c.causal),
                                       c.causal))
          hint("P matches exp2 of natural-log scores: multiply by log2(e) before exp2f");
      }
      if (c.seq_k > 4 * 32 && r.nonfinite == 0 && hints == 0)
        hint("rows longer than 128 keys span several chunks per lane: the running (m, l) must "
             "be rescaled when m grows, and the 32 lanes' (m, l) merged with shuffles");
    }
  }
  if (!passed) report << "  read: " << kSoftmax << "\n";
  CHECK_MESSAGE(passed, report.str());
}

// =============================================================================================
// 4. Attention
// =============================================================================================

testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  return o;
}

// forward_pointer_array with every head of Q, K, V and O in its own allocation (allocated in
// a shuffled order), K and V entries pointing at the K/V head of each query head.
void check_pointer_array_forward(const Problem& p) {
  if (testing::sanitizer_light() && attention_flops(p) > testing::kSanitizerMaxFlops) {
    MESSAGE(("not run under ATTN_SANITIZER_LIGHT (too large for a sanitizer): " + p.describe()));
    return;
  }
  REQUIRE(validate(p).is_ok());
  const uint64_t seed = testing::next_seed();
  const Inputs in = random_inputs(p, seed);
  const std::vector<double> want = reference_attention(p, in.q, in.k, in.v);
  std::vector<float> got(size_t(p.o_elements()), poison_value());
  Status status = Status::ok();
  int64_t past_end = 0, padding_writes = 0;
  try {
    // One Matrix per tensor with the problem's own head and row strides: each head's rows
    // are copied into its own allocation keeping the row stride.
    const auto tensor = [&](const Strides& s, int heads, int rows) {
      Matrix m;
      m.rows = rows, m.cols = p.head_dim, m.heads = heads, m.batch = p.batch;
      m.ld = s.seq, m.head_stride = s.head, m.batch_stride = s.batch;
      return m;
    };
    const Matrix mq = tensor(p.q, p.heads, p.seq_q), mk = tensor(p.k, p.kv_heads, p.seq_k),
                 mv = tensor(p.v, p.kv_heads, p.seq_k), mo = tensor(p.o, p.heads, p.seq_q);
    // Heads' slices must be contiguous rows * ld for scatter(); true for BHSD layouts.
    REQUIRE(p.q.head == int64_t(p.seq_q) * p.q.seq);
    ScatteredOperand q = scatter(mq, &in.q, true, false, seed + 1);
    ScatteredOperand k = scatter(mk, &in.k, true, false, seed + 2);
    ScatteredOperand v = scatter(mv, &in.v, true, false, seed + 3);
    ScatteredOperand o = scatter(mo, nullptr, true, true, seed + 4);
    std::vector<const float*> qt, kt, vt;
    std::vector<float*> ot;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h) {
        qt.push_back(q.head[size_t(b) * p.heads + h]);
        kt.push_back(k.head[size_t(b) * p.kv_heads + p.kv_head(h)]);
        vt.push_back(v.head[size_t(b) * p.kv_heads + p.kv_head(h)]);
        ot.push_back(o.head[size_t(b) * p.heads + h]);
      }
    DeviceBuffer<const float*> q_table(qt), k_table(kt), v_table(vt);
    DeviceBuffer<float*> o_table(ot);
    status = impl::forward_pointer_array(p, q_table.get(), k_table.get(), v_table.get(),
                                         o_table.get(), nullptr);
    if (status) status = sync_status();
    if (status) {
      std::vector<float> gathered = gather(mo, o, past_end);
      gathered.resize(size_t(p.o_elements()));
      got = gathered;
      // The padding between O's rows (p.o.seq > head_dim) must keep the poison.
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads; ++h)
          for (int i = 0; i < p.seq_q; ++i) {
            const int64_t row = Problem::offset(p.o, b, h, i);
            for (int64_t e = row + p.head_dim; e < row + p.o.seq && e < p.o_elements(); ++e)
              padding_writes += !is_poison(got[size_t(e)]);
          }
    }
  } catch (const CudaError& e) {
    status = Status::error(e.what());
  }
  std::ostringstream report;
  report << "forward_pointer_array (every head its own allocation) on " << p.describe()
         << ", " << seed_text(seed) << "\n";
  bool passed = status.is_ok();
  if (!status) {
    report << "  did not run: " << status.message() << "\n";
  } else {
    const Comparison c = compare_output(p, got, want);
    passed = c.passed() && past_end == 0 && padding_writes == 0;
    report << "  " << c.summary() << "\n";
    if (past_end) report << "  hint: " << past_end << " values written past a head's last row\n";
    if (padding_writes)
      report << "  hint: " << padding_writes << " values written into the padding between O's "
             << "rows: the row stride of C is ldc (p.o.seq), not N\n";
  }
  if (!passed) report << "  read: " << kDispatch << "\n";
  CHECK_MESSAGE(passed, report.str());
}

}  // namespace

// ---- 1 + 2: the batched GEMM -----------------------------------------------------------------

TEST_CASE("GEMM: one 1 x 1 x 1 matrix, B transposed or not") {
  for (bool bt : {false, true}) {
    GemmCase g;
    g.b_transposed = bt;
    check_gemm(g);
  }
}

TEST_CASE("GEMM: sizes around the tiles (M, N, K in 1, 17, 63, 64, 65, 127, 128, 129)") {
  // Every tail: rows past M, columns past N, k past K, in the first and in a later tile.
  for (bool bt : {false, true})
    for (auto [m, n, k] : {std::tuple{17, 17, 17}, {1, 65, 17}, {65, 1, 33}, {63, 64, 15},
                           {128, 64, 16}, {129, 65, 17}, {127, 63, 129}, {200, 130, 1}})
      for (int pad : {0, 3}) {  // pad 3: odd row strides, 4-byte loads
        GemmCase g;
        g.M = m, g.N = n, g.K = k, g.batch = 2, g.heads = 3, g.b_transposed = bt, g.pad = pad;
        check_gemm(g);
      }
}

TEST_CASE("GEMM: ~1000-sized matrices (long K, wide N, tall M)") {
  for (bool bt : {false, true}) {
    for (auto [m, n, k] : {std::tuple{1000, 65, 1000}, {65, 1000, 1000}, {1000, 1000, 64},
                           {1001, 17, 999}}) {
      GemmCase g;
      g.M = m, g.N = n, g.K = k, g.b_transposed = bt, g.alpha = 0.125f;
      check_gemm(g);
    }
  }
}

TEST_CASE("GEMM: alpha (0.37, -2.5) and 1000 x 1000 x 1000") {
  GemmCase g;
  g.M = 70, g.N = 90, g.K = 110, g.heads = 2, g.alpha = 0.37f;
  check_gemm(g);
  g.alpha = -2.5f, g.b_transposed = true;
  check_gemm(g);
  GemmCase big;
  big.M = big.N = big.K = 1000;
  big.b_transposed = true;
  big.alpha = 1.5f;
  check_gemm(big);
}

TEST_CASE("GEMM strided: heads interleaved per row (as BSHD), padded rows, 4-byte aligned bases") {
  for (bool bt : {false, true})
    for (int offset : {0, 1}) {
      GemmCase g;
      g.M = 100, g.N = 70, g.K = 59, g.batch = 2, g.heads = 4, g.b_transposed = bt;
      g.interleaved = true, g.pad = 4, g.offset = offset;
      check_gemm(g, kDispatch);
    }
}

TEST_CASE("GEMM strided: several heads share one B head (b_head_group, as GQA)") {
  for (bool bt : {false, true}) {
    GemmCase g;
    g.M = 33, g.N = 70, g.K = 40, g.batch = 2, g.heads = 8, g.head_group = 4, g.b_transposed = bt;
    check_gemm(g, kDispatch);  // (the pointer-array run points 4 entries at each B head)
  }
}

TEST_CASE("GEMM pointer arrays: heads that are only 4-byte aligned") {
  // Separate allocations whose heads start 1 float in: every head 4-byte aligned only, so the
  // kernel must decide on 16-byte loads per head, on the GPU.
  for (bool bt : {false, true}) {
    GemmCase g;
    g.M = 70, g.N = 68, g.K = 36, g.heads = 5, g.offset = 1, g.b_transposed = bt;
    check_gemm(g, kDispatch);
  }
}

TEST_CASE("GEMM: grid limits, batch * heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  // 7 x 10000 fits grid.y and grid.z; 70000 heads or 70000 batches do not.
  for (auto [batch, heads] : {std::pair{7, 10000}, {1, 70000}, {70000, 1}})
    for (bool bt : {false, true}) {
      GemmCase g;
      g.M = 3, g.N = 5, g.K = 7, g.batch = batch, g.heads = heads, g.b_transposed = bt;
      check_gemm(g, kDispatch);
    }
  for (auto [m, n] : {std::pair{129, 1}, {1, 65}}) {  // 2 tiles per head, past the limit
    GemmCase g;
    g.M = m, g.N = n, g.K = 2, g.heads = 66000;
    check_gemm(g, kDispatch);
  }
}

TEST_CASE("GEMM against cuBLAS (CUBLAS_PEDANTIC_MATH: fp32, no TF32)") {
  for (bool bt : {false, true}) {
    for (auto [m, n, k, heads] : {std::tuple{17, 65, 33, 6}, {1000, 65, 1000, 1},
                                  {129, 1000, 64, 4}, {1000, 64, 1000, 2}}) {
      GemmCase g;
      g.M = m, g.N = n, g.K = k, g.heads = heads, g.b_transposed = bt, g.alpha = 0.5f;
      check_against_cublas(g);
    }
    GemmCase padded;  // odd row strides: cuBLAS takes any lda
    padded.M = 65, padded.N = 17, padded.K = 1000, padded.batch = 3, padded.heads = 2;
    padded.pad = 1, padded.b_transposed = bt;
    check_against_cublas(padded);
    GemmCase many;  // batch * heads past the grid limit
    many.M = 3, many.N = 5, many.K = 7, many.batch = 2, many.heads = 35000, many.b_transposed = bt;
    check_against_cublas(many);
  }
}

TEST_CASE("GEMM argument checks: clear errors, nothing launched") {
  GemmCase g;
  g.M = 4, g.N = 4, g.K = 4;
  float* fake = reinterpret_cast<float*>(uintptr_t(256));  // never dereferenced
  m05::BatchedGemmStridedArgs args = strided_args(g, fake, fake, fake);
  args.K = 0;
  CHECK(impl::gemm_strided(args, nullptr).message().find("K must be >= 1") != std::string::npos);
  args = strided_args(g, fake, fake, fake);
  args.a_row_stride = 3;
  CHECK(impl::gemm_strided(args, nullptr).message().find("row stride") != std::string::npos);
  args = strided_args(g, fake, fake, fake);
  args.alpha = INFINITY;
  CHECK_FALSE(impl::gemm_strided(args, nullptr).is_ok());
  args = strided_args(g, fake, fake, fake);
  args.b_head_group = 0;
  CHECK_FALSE(impl::gemm_strided(args, nullptr).is_ok());
  m05::BatchedGemmPtrArgs ptr;
  ptr.M = ptr.N = ptr.K = 4, ptr.lda = ptr.ldb = ptr.ldc = 4;
  CHECK(impl::gemm_pointer_array(ptr, nullptr).message().find("non-null") != std::string::npos);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

// ---- 3: the row softmax ------------------------------------------------------------------------

TEST_CASE("softmax: row lengths around the chunks (1, 2, 3, 5, 17, 127, 128, 129, 1000, 4097)") {
  for (int n : {1, 2, 3, 5, 17, 127, 128, 129, 1000, 4097}) {
    SoftmaxCase c;
    c.heads = 3, c.seq_q = 7, c.seq_k = n;
    check_softmax(c);
  }
}

TEST_CASE("softmax: padded and unaligned row strides") {
  for (int64_t stride : {1004, 1001, 1003}) {  // 16-byte aligned rows, then 4-byte aligned
    SoftmaxCase c;
    c.heads = 2, c.seq_q = 5, c.seq_k = 1000, c.row_stride = stride;
    check_softmax(c);
  }
}

TEST_CASE("softmax: large logits (scores up to 1000) and a scale") {
  SoftmaxCase c;
  c.heads = 2, c.seq_q = 9, c.seq_k = 600, c.range = 1000.0f;
  check_softmax(c);
  c.scale = 0.125f, c.range = 8.0f;
  check_softmax(c);
}

TEST_CASE("softmax: causal, seq_q > seq_k (rows that see no key are exactly 0), seq_q < seq_k") {
  for (auto [sq, sk] : {std::pair{100, 17}, {17, 100}, {64, 64}, {300, 1}, {5, 1000}, {1000, 999}}) {
    SoftmaxCase c;
    c.heads = 2, c.seq_q = sq, c.seq_k = sk, c.causal = true, c.scale = 0.5f;
    check_softmax(c);
  }
}

// ---- 4: attention ------------------------------------------------------------------------------

TEST_CASE("attention: one small head") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 8, 8, 16), lesson(kUnfused));
}

TEST_CASE("attention: sequence lengths 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000") {
  for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
    testing::check_against_reference(kernel(), Problem::make(1, 2, n, n, 64), lesson(kUnfused));
}

TEST_CASE("attention: a long sequence, 4097") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 4097, 4097, 64),
                                   lesson(kUnfused));
}

TEST_CASE("attention: seq_q != seq_k") {
  for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64), lesson(kUnfused));
}

TEST_CASE("attention: head dims 1, 16, 32, 59, 64, 80, 96, 128, 256 (the GEMM has no limit)") {
  for (int d : {1, 16, 32, 59, 64, 80, 96, 128, 256})
    testing::check_against_reference(kernel(), Problem::make(2, 2, 65, 70, d), lesson(kGemm));
}

TEST_CASE("attention: several batches and heads, BSHD layout") {
  testing::check_against_reference(kernel(), Problem::make(3, 5, 100, 90, 64), lesson(kDispatch));
  testing::check_against_reference(kernel(),
                                   Problem::make(2, 4, 65, 33, 80, false, Layout::BSHD),
                                   lesson(kDispatch));
}

TEST_CASE("attention: padded rows, K and V rows that are not 16-byte aligned") {
  Problem p = Problem::make(2, 3, 37, 41, 20);
  p.o = {3 * 37 * 24, 37 * 24, 24};  // 4 unused floats after each output row
  p.q = {3 * 37 * 21, 37 * 21, 21};  // and 1 after each query row
  testing::check_against_reference(kernel(), p, lesson(kDispatch));
  Problem u = Problem::make(1, 2, 70, 100, 64);
  u.k = {2 * 100 * 65, 100 * 65, 65};
  u.v = {2 * 100 * 66, 100 * 66, 66};
  testing::check_against_reference(kernel(), u, lesson(kGemm));
}

TEST_CASE("attention: large logits and a custom scale") {
  testing::CheckOptions o = lesson(kSoftmax);
  o.range = 30.0f;
  for (int d : {64, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 128, 300, d), o);
  Problem p = Problem::make(1, 2, 50, 60, 32);
  p.scale = 0.37f;
  testing::check_against_reference(kernel(), p, lesson(kSoftmax));
}

TEST_CASE("attention: causal, seq_q == seq_k, seq_q < seq_k, seq_q > seq_k (zero rows)") {
  for (auto [sq, sk] : {std::pair{1000, 1000}, {17, 1000}, {1000, 17}, {300, 1}, {65, 64}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64, true),
                                     lesson(kSoftmax));
  testing::check_against_reference(kernel(), Problem::make(2, 3, 129, 70, 59, true, Layout::BSHD),
                                   lesson(kSoftmax));
}

TEST_CASE("attention: grouped K/V heads (GQA 8 -> 2, MQA 8 -> 1), BHSD and BSHD") {
  for (int kv : {2, 1})
    for (Layout layout : {Layout::BHSD, Layout::BSHD})
      testing::check_against_reference(
          kernel(), Problem::make(2, 8, 70, 90, 64, kv == 1, layout, kv), lesson(kDispatch));
}

TEST_CASE("attention: grid limits, batch * heads = 70000") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  testing::check_against_reference(kernel(), Problem::make(7, 10000, 3, 5, 16), lesson(kDispatch));
  testing::check_against_reference(kernel(), Problem::make(1, 70000, 3, 5, 16), lesson(kDispatch));
}

TEST_CASE("attention over pointer arrays: every head its own allocation") {
  check_pointer_array_forward(Problem::make(2, 3, 65, 70, 64));
  check_pointer_array_forward(Problem::make(1, 4, 100, 17, 59, /*causal=*/true));
  check_pointer_array_forward(Problem::make(2, 4, 33, 129, 32, false, Layout::BHSD, 2));
  Problem padded = Problem::make(1, 2, 40, 50, 20);
  padded.o = {2 * 40 * 24, 40 * 24, 24};  // padded output rows stay untouched
  check_pointer_array_forward(padded);
}

TEST_CASE("attention: scores that do not fit give a clear error, not a crash") {
  // 64 heads x 2^20 x 2^20 scores = 256 TiB. The scores are allocated before Q, K or V are
  // read, so small stand-in buffers are enough.
  if (testing::sanitizer_light()) {
    // compute-sanitizer reports the failed cudaMallocAsync as an API error.
    MESSAGE("not run under ATTN_SANITIZER_LIGHT: the failing allocation is the point");
    return;
  }
  const Problem p = Problem::make(1, 64, 1 << 20, 1 << 20, 64);
  REQUIRE(validate(p).is_ok());
  DeviceBuffer<float> dummy(64);
  const Status s = impl::forward(p, dummy.get(), dummy.get(), dummy.get(), dummy.get(), nullptr);
  CHECK_FALSE(s.is_ok());
  CHECK_MESSAGE(s.message().find("GiB") != std::string::npos, s.message());
  const std::string report = "the message should say how many GiB the scores need "
                             "(262144.00): " + s.message() + "\n  read: " + kMemory;
  CHECK_MESSAGE(s.message().find("262144") != std::string::npos, report);
  // The failed allocation must not poison later work.
  CHECK(cudaGetLastError() == cudaSuccess);
  testing::check_against_reference(kernel(), Problem::make(1, 2, 33, 33, 16), lesson(kMemory));
}

TEST_CASE("supports(): every problem the course accepts") {
  CHECK(kernel().supports(Problem::make(1, 1, 4, 4, 256, true)).is_ok());
  CHECK(kernel().supports(Problem::make(1, 8, 4, 4, 64, false, Layout::BSHD, 2)).is_ok());
}

// ---- Going further (README, section 9): `./course grade 05 --extra` ------------------------
// Denser sweeps for a learner who changes the given GEMM (double-buffered k loop, another
// micro-tile) or writes a softmax that reads S once. The solution passes them as is.

TEST_SUITE("extra") {
  TEST_CASE("extra: GEMM, every K from 1 to 48 and M, N around the tiles, aligned and not") {
    for (bool bt : {false, true})
      for (int k = 1; k <= 48; ++k)
        for (int pad : {0, 3}) {
          GemmCase g;
          g.M = 129 + k % 3, g.N = 65 + k % 5, g.K = k, g.batch = 1, g.heads = 2;
          g.b_transposed = bt, g.pad = pad;
          check_gemm(g);
        }
  }

  TEST_CASE("extra: GEMM, long K (2000 to 4100) with partial last tiles") {
    for (bool bt : {false, true})
      for (int k : {2000, 2047, 4097}) {
        GemmCase g;
        g.M = 130, g.N = 70, g.K = k, g.b_transposed = bt, g.alpha = 0.125f;
        check_gemm(g);
      }
  }

  TEST_CASE("extra: softmax, every row length from 1 to 300, then 1000 .. 8200, causal and not") {
    for (bool causal : {false, true}) {
      for (int n = 1; n <= 300; ++n) {
        SoftmaxCase c;
        c.heads = 1, c.seq_q = 3, c.seq_k = n, c.causal = causal, c.scale = 0.5f;
        check_softmax(c);
      }
      for (int n : {1000, 1023, 1024, 1025, 2048, 4095, 4096, 4097, 8191, 8192, 8200}) {
        SoftmaxCase c;
        c.heads = 2, c.seq_q = 5, c.seq_k = n, c.causal = causal, c.range = 100.0f;
        check_softmax(c);
      }
    }
  }
}
