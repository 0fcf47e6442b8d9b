// Module 07 solution: forward() over the solution's warp step (warp_mma.cuh, where the
// four functions of the exercise are filled in) and the production configurations of
// modules/07_tensor_cores/tensor_core_kernel.cuh; forward_3xtf32() and forward_tf32() over the
// solution's split (tf32_split.cuh, TODO 5) and the configurations of tf32_kernel.cuh.
#include "modules/07_tensor_cores/tensor_cores.h"
#include "modules/07_tensor_cores/tf32_kernel.cuh"
#include "solutions/07_tensor_cores/tf32_split.cuh"
#include "solutions/07_tensor_cores/warp_mma.cuh"

namespace attn::m07::ATTN_IMPL {

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<WarpMma>(p, q, k, v, o, stream);
}

ATTN_M07_FP32_FORWARDS(Tf32Split)

}  // namespace attn::m07::ATTN_IMPL
