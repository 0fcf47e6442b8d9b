// Registers module 02 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/02_smem_tiling/smem_tiling.h"

ATTN_REGISTER_MODULE(2, "smem_tiling", "K/V tiles in shared memory, three passes",
                     attn::Backend::gpu, attn::m02::supports, attn::m02::ATTN_IMPL::forward)
