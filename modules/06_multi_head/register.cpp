// Registers module 06 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/06_multi_head/multi_head.h"

ATTN_REGISTER_MODULE(6, "multi_head",
                     "fused multi-head grid, strided layouts, GQA/MQA, register-tiled fp32",
                     attn::Backend::gpu, attn::m06::supports, attn::m06::ATTN_IMPL::forward)
