// Registers module 11 with the CLI and benchmark (compiled once per implementation).
#include "common/backward.h"
#include "common/registry.h"
#include "modules/11_backward/backward_attention.h"

namespace {
const attn::BackwardEntry backward_entry{attn::m11::ATTN_IMPL::forward_lse,
                                         attn::m11::ATTN_IMPL::backward};
}  // namespace

ATTN_REGISTER_MODULE_BACKWARD(11, "backward",
                              "dQ, dK, dV from the saved log-sum-exp (FlashAttention-2 backward)",
                              attn::m11::supports, attn::m11::ATTN_IMPL::forward,
                              attn::m11::ATTN_IMPL::forward16, backward_entry)
