// Registers module 09 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/09_hopper/hopper.h"

// bf16 by default; --dtype f32 runs forward_3xtf32 (fp32 accuracy on the tensor cores).
ATTN_REGISTER_MODULE_16BIT_AND_F32(
    9, "hopper", "fp16/bf16 on Hopper: wgmma, TMA, warp specialization (FA3); fp32 as 3xTF32",
    attn::m09::supports, attn::m09::ATTN_IMPL::forward_3xtf32, attn::m09::ATTN_IMPL::forward)
