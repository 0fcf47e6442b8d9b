// Registers module 04 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/04_causal/causal.h"

ATTN_REGISTER_MODULE(4, "causal",
                     "causal mask (bottom-right), skipped masked tiles, heaviest blocks first",
                     attn::Backend::gpu, attn::m04::supports, attn::m04::ATTN_IMPL::forward)
