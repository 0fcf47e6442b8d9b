// Registers module 09 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/09_hopper/hopper.h"

ATTN_REGISTER_MODULE_16BIT(9, "hopper",
                           "fp16/bf16 on Hopper: wgmma, TMA, warp specialization (FA3)",
                           attn::m09::supports, attn::m09::ATTN_IMPL::forward)
