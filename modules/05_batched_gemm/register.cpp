// Registers module 05 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/05_batched_gemm/batched_gemm.h"

ATTN_REGISTER_MODULE(5, "batched_gemm",
                     "unfused baseline: Q K^T and P V as batched GEMMs, scores in memory",
                     attn::Backend::gpu, attn::m05::supports, attn::m05::ATTN_IMPL::forward)
