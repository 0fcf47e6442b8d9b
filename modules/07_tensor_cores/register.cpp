// Registers module 07 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/07_tensor_cores/tensor_cores.h"

// bf16 by default; --dtype f32 runs forward_3xtf32 (fp32 accuracy on the tensor cores).
ATTN_REGISTER_MODULE_16BIT_AND_F32(
    7, "tensor_cores",
    "fp16/bf16 on the tensor cores: mma.sync, ldmatrix, cp.async (FA2); fp32 as 3xTF32",
    attn::m07::supports, attn::m07::ATTN_IMPL::forward_3xtf32, attn::m07::ATTN_IMPL::forward)
