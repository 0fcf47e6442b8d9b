// Registers module 12 with the CLI and benchmark (compiled once per implementation).
#include "common/modifiers.h"
#include "common/registry.h"
#include "modules/12_modifiers/modifier_attention.h"

namespace {
const attn::ModifierEntry modifier_entry{
    static_cast<attn::Status (*)(const attn::Problem&, const attn::ModifierSpec&)>(
        attn::m12::supports),
    static_cast<attn::Status (*)(const attn::Problem&, const attn::ModifierSpec&,
                                 const attn::ModifierTensors&, const void*, const void*,
                                 const void*, void*, cudaStream_t)>(
        attn::m12::ATTN_IMPL::forward)};
}  // namespace

ATTN_REGISTER_MODULE_MODIFIERS(
    12, "modifiers", "score modifiers, masks with tile skipping, fused RoPE (modules 07, 09)",
    static_cast<attn::Status (*)(const attn::Problem&)>(attn::m12::supports),
    static_cast<attn::Status (*)(const attn::Problem&, const void*, const void*, const void*,
                                 void*, cudaStream_t)>(attn::m12::ATTN_IMPL::forward),
    modifier_entry)
