// The planted-bug kernels of tests/emulation/planted.cu (CPU emulation only).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn::planted {

// Module 02's solution as it is, and with one barrier of pass 1 left out.
Status forward_02(const Problem& p, const float* q, const float* k, const float* v, float* o,
                  cudaStream_t stream);
Status forward_02_no_leading_barrier(const Problem& p, const float* q, const float* k,
                                     const float* v, float* o, cudaStream_t stream);
Status forward_02_no_trailing_barrier(const Problem& p, const float* q, const float* k,
                                      const float* v, float* o, cudaStream_t stream);

// Runs the small planted kernel `name` ("early return", "shared race", ...; see planted.cu):
// the emulation's error report ("cudaErrorX: ..."), or "" when it found nothing. `result`,
// if given, receives the output buffer.
std::string run_planted(const std::string& name, std::vector<float>* result = nullptr);

}  // namespace attn::planted
