// Module 09 solution: forward() over the solution's steps (hopper_steps.cuh) and the given
// pipeline of modules/09_hopper/hopper_kernel.cuh.
#include "modules/09_hopper/hopper.h"
#include "solutions/09_hopper/hopper_steps.cuh"

namespace attn::m09::ATTN_IMPL {

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<HopperSteps>(p, q, k, v, o, stream);
}

Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream) {
  return tf32::forward_3xtf32<HopperSteps>(p, q, k, v, o, stream);  // checks p itself
}

}  // namespace attn::m09::ATTN_IMPL
