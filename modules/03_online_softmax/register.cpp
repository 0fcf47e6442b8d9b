// Registers module 03 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/03_online_softmax/online_softmax.h"

ATTN_REGISTER_MODULE(3, "online_softmax",
                     "FlashAttention forward: one pass, running max and sum, O(N) memory",
                     attn::Backend::gpu, attn::m03::supports, attn::m03::ATTN_IMPL::forward)
