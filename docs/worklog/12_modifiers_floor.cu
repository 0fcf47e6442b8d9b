// Diagnostic behind docs/results/floor09_h200.txt: the fixed cost of a work tile on module
// 09's kernel. Module 09's plain forward() at seq_q = 16384 with a few key tiles (seq_k = 128 ..
// 1024) against its full time (seq_k = 16384): t(seq_k) / (seq_k / 16384 x t(16384)) is what a
// perfect skip of a narrow band would have to beat. Beside it module 12's windows (causal) on
// the same kernel. B = 1, H = 2048 / d, bf16, BHSD; event-timed medians of 30 runs after 10.
// Built from the repository root against a release build's objects (build/B):
//   nvcc -std=c++17 -O2 -I. -DATTN_IMPL=solution -arch=sm_90 docs/worklog/12_modifiers_floor.cu \
//     B/CMakeFiles/m12_solution.dir/solutions/12_modifiers/solution.cu.o \
//     B/CMakeFiles/m09_solution.dir/solutions/09_hopper/solution.cu.o \
//     B/CMakeFiles/m07_solution.dir/solutions/07_tensor_cores/solution.cu.o \
//     B/libattn_common.a -lcuda -o floor
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>
#include "common/problem.h"
#include "common/modifiers.h"
#include "modules/09_hopper/hopper.h"
#include "modules/12_modifiers/modifier_attention.h"
using namespace attn;
static float median_ms(const std::function<Status()>& f) {
  std::vector<cudaEvent_t> a(40), b(40);
  for (int i = 0; i < 40; ++i) { cudaEventCreate(&a[i]); cudaEventCreate(&b[i]); }
  for (int i = 0; i < 40; ++i) {
    cudaEventRecord(a[i]);
    if (Status s = f(); !s) { std::printf("error %s\n", s.message().c_str()); std::exit(1); }
    cudaEventRecord(b[i]);
  }
  cudaDeviceSynchronize();
  std::vector<float> t;
  for (int i = 10; i < 40; ++i) {
    float ms;
    cudaEventElapsedTime(&ms, a[i], b[i]);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  const int n = 16384;
  void *q, *k, *v, *o;
  const size_t bytes = size_t(n) * 2048 * 2;
  cudaMalloc(&q, bytes); cudaMalloc(&k, bytes); cudaMalloc(&v, bytes); cudaMalloc(&o, bytes);
  cudaMemset(q, 0x3c, bytes); cudaMemset(k, 0x3c, bytes); cudaMemset(v, 0x3c, bytes);
  for (int d : {64, 128}) {
    auto plain = [&](int seq_k, bool causal) {
      Problem p = Problem::make(1, 2048 / d, n, seq_k, d, causal, Layout::BHSD);
      p.dtype = DType::bf16;
      return median_ms([&] { return m09::solution::forward(p, q, k, v, o, nullptr); });
    };
    const float full = plain(n, false), causal = plain(n, true);
    std::printf("d=%d module 09 plain: full %.4f ms, causal %.4f ms (%.3f of full)\n", d, full,
                causal, causal / full);
    for (int seq_k : {128, 256, 384, 512, 640, 1024}) {
      const float t = plain(seq_k, false);
      std::printf("d=%d module 09 plain seq_k=%5d: %.4f ms = %.3f x (seq_k/N x full)\n", d, seq_k,
                  t, t / (double(seq_k) / n * full));
    }
    for (int w : {256, 1024}) {
      Problem p = Problem::make(1, 2048 / d, n, n, d, true, Layout::BHSD);
      p.dtype = DType::bf16;
      ModifierSpec m;
      m.window = w;
      const float t = median_ms([&] {
        return m12::solution::forward_on(m12::Engine::wgmma, p, m, ModifierTensors{}, q, k, v, o,
                                         nullptr);
      });
      // visible pairs of a causal window w over n keys: w (w + 1) / 2 + (n - w) w
      const double visible = (double(w) * (w + 1) / 2 + double(n - w) * w) / (double(n) * n);
      const int tile = 128;  // m12::hopper_tile_keys: windows of up to 1024 keys
      std::printf("d=%d module 12 window %4d: %.4f ms = %.3f x (visible + %d/N) x full\n", d, w, t,
                  t / ((visible + double(tile) / n) * full), tile);
    }
  }
  std::printf("done %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
