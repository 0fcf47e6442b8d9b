// Module 07 solution: forward() over the solution's warp step (warp_mma.cuh, where the
// four functions of the exercise are filled in) and the production configurations of
// modules/07_tensor_cores/tensor_core_kernel.cuh.
#include "modules/07_tensor_cores/tensor_cores.h"
#include "solutions/07_tensor_cores/warp_mma.cuh"

namespace attn::m07::ATTN_IMPL {

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<WarpMma>(p, q, k, v, o, stream);
}

}  // namespace attn::m07::ATTN_IMPL
