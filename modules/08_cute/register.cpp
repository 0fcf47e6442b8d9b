// Registers module 08 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/08_cute/cute_attention.h"

ATTN_REGISTER_MODULE_16BIT(8, "cute",
                           "the FA2 kernel with CuTe: layouts, tiled copies, TiledMMA",
                           attn::m08::supports, attn::m08::ATTN_IMPL::forward)
