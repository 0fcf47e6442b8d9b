// libdecode_capi_10.so: module 10's decode (the solution's steps, the split plan of decode())
// behind a C entry point, for scripts/compare_torch_decode.py --ours. Loaded with ctypes into
// the process that times PyTorch's backends, it runs on the same K/V tensors: a memory-bound
// kernel's time moves by several per cent with where the driver placed its buffers, so ours and
// cuDNN's are compared on the same placement.
#include <cstdio>
#include <exception>
#include <vector>

#include "common/paged.h"
#include "solutions/10_decoding/decode_steps.cuh"

namespace {

attn::PagedProblem make_problem(int batch, int heads, int kv_heads, int head_dim, int seq_k,
                                int page_size, int bf16) {
  return attn::PagedProblem::make(heads, kv_heads, head_dim, 1, std::vector<int>(batch, seq_k),
                                  page_size, false, bf16 ? attn::DType::bf16 : attn::DType::f16);
}

int fail(char* error, int error_bytes, const char* what) {
  if (error && error_bytes > 0) std::snprintf(error, size_t(error_bytes), "%s", what);
  return -1;
}

}  // namespace

extern "C" {

// The pool holds batch x ceil(seq_k / page_size) pages of [page_size, kv_heads, head_dim];
// block_table is [batch, ceil(seq_k / page_size)] int32 on the device, seqlens [batch] int32 on
// the device (every entry seq_k). Returns 0, or -1 with one line in `error`.
int attn_decode(const void* q, const void* k_cache, const void* v_cache, const int32_t* block_table,
                const int32_t* seqlens, void* o, void* workspace, size_t workspace_bytes,
                int batch, int heads, int kv_heads, int head_dim, int seq_k, int page_size,
                int bf16, void* stream, char* error, int error_bytes) {
  try {
    const attn::PagedProblem p =
        make_problem(batch, heads, kv_heads, head_dim, seq_k, page_size, bf16);
    attn::PagedDevicePtrs t;
    t.q = q, t.k_cache = k_cache, t.v_cache = v_cache, t.block_table = block_table;
    t.seqlens_k = seqlens, t.o = o, t.workspace = workspace, t.workspace_bytes = workspace_bytes;
    const attn::Status s =
        attn::m10::decode<attn::m10::capi::DecodeSteps>(p, t, static_cast<cudaStream_t>(stream));
    return s ? 0 : fail(error, error_bytes, s.message().c_str());
  } catch (const std::exception& e) {
    return fail(error, error_bytes, e.what());
  }
}

// Bytes of workspace attn_decode needs for this shape on the current GPU (0: none).
size_t attn_decode_workspace_bytes(int batch, int heads, int kv_heads, int head_dim, int seq_k,
                                   int page_size, int bf16) {
  try {
    return attn::m10::decode_workspace_bytes(
        make_problem(batch, heads, kv_heads, head_dim, seq_k, page_size, bf16));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // extern "C"
