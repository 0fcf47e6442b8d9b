// Timing work shorter than a launch takes on the host (tens of microseconds), for the
// benchmarks: `launch(stream)` `per_graph` times captured into one CUDA graph, which is then
// timed like time_on_stream's launches (common/timing.h); the times are per launch (a graph's
// time / per_graph). Launched one by one, such work can wait on the host between the two
// events and be timed with the launch's latency. `launch` must be capturable: kernels and
// async calls, no allocation or synchronization (a first call, untimed, may do its set-up).
// GPU builds only (the CPU emulation has no graphs).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/timing.h"

namespace attn {

inline Timing time_replayed(const std::function<void(cudaStream_t)>& launch, int per_graph,
                            int warmup, int iters) {
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
