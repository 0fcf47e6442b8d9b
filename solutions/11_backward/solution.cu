// Module 11 solution: the entry points over the solution's steps (backward_steps.cuh) and the
// given kernels and launches of modules/11_backward.
#include "modules/11_backward/backward_attention.h"
#include "modules/11_backward/entry_points.cuh"
#include "solutions/11_backward/backward_steps.cuh"

namespace attn::m11::ATTN_IMPL {

ATTN_M11_DEFINE_ENTRY_POINTS(BackwardSteps)

}  // namespace attn::m11::ATTN_IMPL
