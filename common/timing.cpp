#include "common/timing.h"

#include <algorithm>
#include <stdexcept>

#include "common/cuda_check.h"

namespace attn {

Timing summarize_times(std::vector<double> samples_ms) {
  if (samples_ms.empty()) throw std::invalid_argument("no timing samples");
  std::sort(samples_ms.begin(), samples_ms.end());
  const size_t n = samples_ms.size();
  Timing t;
  t.iterations = int(n);
  t.min_ms = samples_ms.front();
  t.max_ms = samples_ms.back();
  t.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  return t;
}

namespace {
struct Event {
  cudaEvent_t e = nullptr;
  Event() { ATTN_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};
}  // namespace

Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, int warmup, int iters,
                      cudaStream_t stream) {
  if (iters < 1) throw std::invalid_argument("iterations must be >= 1");
  for (int i = 0; i < warmup; ++i) launch(stream);
  ATTN_CUDA_CHECK(cudaGetLastError());
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));

  // One pair of events per iteration, all read after the loop: reading an event's time
  // inside the loop would synchronize and leave the GPU idle between iterations.
  std::vector<Event> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    ATTN_CUDA_CHECK(cudaEventRecord(start[i].e, stream));
    launch(stream);
    ATTN_CUDA_CHECK(cudaEventRecord(stop[i].e, stream));
  }
  ATTN_CUDA_CHECK(cudaGetLastError());
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start[i].e, stop[i].e));
    samples.push_back(ms);
  }
  return summarize_times(std::move(samples));
}

}  // namespace attn
