// Registers module 10 with the CLI and benchmark (compiled once per implementation).
#include "common/registry.h"
#include "modules/10_decoding/decoding.h"

namespace {
const attn::InferenceEntry decoding_entry{
    static_cast<attn::Status (*)(const attn::PagedProblem&)>(attn::m10::supports),
    static_cast<attn::Status (*)(const attn::VarlenProblem&)>(attn::m10::supports),
    attn::m10::decode_workspace_bytes,
    attn::m10::ATTN_IMPL::decode,
    attn::m10::ATTN_IMPL::prefill,
    attn::m10::ATTN_IMPL::append_kv};
}  // namespace

ATTN_REGISTER_MODULE_INFERENCE(10, "decoding",
                               "inference: split-KV decoding over a paged cache, packed prefill",
                               attn::m10::supports_dense, decoding_entry)
