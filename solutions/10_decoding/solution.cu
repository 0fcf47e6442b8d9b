// Module 10 solution: the entry points over the solution's steps (decode_steps.cuh) and the
// given kernels of modules/10_decoding.
#include "modules/10_decoding/decoding.h"
#include "modules/10_decoding/entry_points.cuh"
#include "solutions/10_decoding/decode_steps.cuh"

namespace attn::m10::ATTN_IMPL {

ATTN_M10_DEFINE_ENTRY_POINTS(DecodeSteps)

}  // namespace attn::m10::ATTN_IMPL
