// Registers module 01 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/01_naive/naive.h"

ATTN_REGISTER_MODULE(1, "naive", "one thread per query, three passes over the keys",
                     attn::Backend::gpu, attn::m01::supports, attn::m01::ATTN_IMPL::forward)
