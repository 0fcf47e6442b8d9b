// Registers module 07 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/07_tensor_cores/tensor_cores.h"

ATTN_REGISTER_MODULE_16BIT(7, "tensor_cores",
                           "fp16/bf16 on the tensor cores: mma.sync, ldmatrix, cp.async (FA2)",
                           attn::m07::supports, attn::m07::ATTN_IMPL::forward)
