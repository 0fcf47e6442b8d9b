// Timing GPU work with CUDA events. Launches are asynchronous, so a host clock around a
// launch measures only the launch; events recorded on the stream bracket the GPU work itself.
// We warm up first (module load, first-touch, clocks ramping) and report the median of many
// iterations, which ignores the odd slow outlier that a mean would absorb.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

namespace attn {

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int iterations = 0;
};

// Median of the per-iteration times in `samples_ms` (which it sorts).
Timing summarize_times(std::vector<double> samples_ms);

// Runs `launch(stream)` `warmup` times untimed, then `iters` times, each between two events.
// Throws CudaError if a launch or the synchronization fails.
Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, int warmup, int iters,
                      cudaStream_t stream = nullptr);

}  // namespace attn
