// Registers module 00 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/00_reference/reference.h"

ATTN_REGISTER_MODULE(0, "reference", "attention on the CPU: stable softmax, online softmax",
                     attn::Backend::cpu, attn::m00::supports, attn::m00::ATTN_IMPL::forward)
