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

Timing time_replayed(const std::function<void(cudaStream_t)>& launch, int per_graph, int warmup,
                     int iters) {
  if (per_graph < 1) throw std::invalid_argument("per_graph must be >= 1");
  // A stream of its own: the legacy default stream cannot be captured.
  cudaStream_t stream = nullptr;
  ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const auto release = [&] {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
        capturing != cudaStreamCaptureStatusNone) {  // a launch threw inside the capture
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  };
  try {
    launch(stream);  // set-up outside the capture (tables, first-use allocations)
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    ATTN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; ++i) launch(stream);
    ATTN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ATTN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    Timing t = time_on_stream(
        [&](cudaStream_t s) { ATTN_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, warmup, iters, stream);
    t.median_ms /= per_graph;
    t.min_ms /= per_graph;
    t.max_ms /= per_graph;
    release();
    return t;
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace attn
