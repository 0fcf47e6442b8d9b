// Module 12, given: the launches. Module 07's kernel with its production configurations,
// module 07's solution as the warp's tensor-core step, and Hooks<ModifierSteps, T, score>
// (modifier_hooks.cuh) as its Mods; defined once for the exercise and the solution:
//   ATTN_M12_DEFINE_ENTRY_POINTS(ModifierSteps)
// inside namespace attn::m12::ATTN_IMPL defines both forward()s there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/modifiers.h"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "modules/12_modifiers/modifier_hooks.cuh"

// Module 07's solution of the warp step, in a namespace of its own (m07::modifier_warp), as
// module 10's prefill does: module 07's own exercise defines a different WarpMma.
#pragma push_macro("ATTN_IMPL")
#undef ATTN_IMPL
#define ATTN_IMPL modifier_warp
#include "solutions/07_tensor_cores/warp_mma.cuh"
#pragma pop_macro("ATTN_IMPL")

namespace attn::m12 {

// Fills g_rope for (base, head_dim, row step) when they differ from the last launch's. The
// frequencies come from Steps::rope_frequency in double; hi + lo holds each to ~2^-48.
template <class Steps>
Status set_rope_table(double base, int head_dim, int row_step, cudaStream_t stream) {
  static double last_base = 0.0;
  static int last_head_dim = 0, last_row_step = 0;
  if (base == last_base && head_dim == last_head_dim && row_step == last_row_step)
    return Status::ok();
  float4 table[kMaxRopeFrequencies] = {};
  for (int m = 0; m < head_dim / 2; ++m) {
    const double theta = Steps::rope_frequency(m, head_dim, base);
    const double turns = theta / (2.0 * M_PI);
    table[m].x = float(turns);
    table[m].y = float(turns - double(table[m].x));
    table[m].z = float(std::cos(row_step * theta));
    table[m].w = float(std::sin(row_step * theta));
  }
  ATTN_CUDA_RETURN(cudaMemcpyToSymbolAsync(g_rope, table, sizeof(table), 0,
                                           cudaMemcpyHostToDevice, stream));
  last_base = base;
  last_head_dim = head_dim;
  last_row_step = row_step;
  return Status::ok();
}

template <class Steps, class T, class C, ScoreMod kScore, bool kRope, bool kDocuments>
Status launch_modified(const Problem& p, const Args& args, const void* q, const void* k,
                       const void* v, void* o, cudaStream_t stream) {
  using Warp = m07::modifier_warp::WarpMma;
  using Mods = Hooks<Steps, T, kScore, kRope, kDocuments>;
  constexpr auto kernel = m07::flash_tc_kernel<Warp, T, C, false, true, m07::DenseBatch, Mods>;
  constexpr int kSmem = C::kSmemBytes + Mods::template kExtraSmemBytes<C>;
  static const cudaError_t opt_in =  // above 48 KB of shared memory a kernel must opt in
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  ATTN_CUDA_RETURN(opt_in);
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 12: more than 2^31 - 1 blocks");
  // The score hook hands the softmax natural-log logits; without one, raw q.k as module 07.
  const float scale_log2 =
      float(kScore == ScoreMod::none ? p.softmax_scale() * m07::kLog2e : m07::kLog2e);
  kernel<<<unsigned(blocks), C::kThreads, kSmem, stream>>>(
      p, scale_log2, int(query_blocks), static_cast<const uint16_t*>(q),
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), static_cast<uint16_t*>(o),
      {}, args);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// One kernel per (score modifier, RoPE or not, documents or not): runtime switches to
// compile-time choices.
template <class Steps, class T, class C, ScoreMod kScore>
Status launch_for_mask(const Problem& p, const ModifierSpec& m, const Args& a, const void* q,
                       const void* k, const void* v, void* o, cudaStream_t stream) {
  const bool rope = m.rope != RopeStyle::none;
  if (rope && m.documents)
    return launch_modified<Steps, T, C, kScore, true, true>(p, a, q, k, v, o, stream);
  if (rope) return launch_modified<Steps, T, C, kScore, true, false>(p, a, q, k, v, o, stream);
  if (m.documents)
    return launch_modified<Steps, T, C, kScore, false, true>(p, a, q, k, v, o, stream);
  return launch_modified<Steps, T, C, kScore, false, false>(p, a, q, k, v, o, stream);
}

template <class Steps, class T, class C>
Status launch_for_score(const Problem& p, const ModifierSpec& m, const Args& a, const void* q,
                        const void* k, const void* v, void* o, cudaStream_t stream) {
  switch (m.score) {
    case ScoreMod::none:
      return launch_for_mask<Steps, T, C, ScoreMod::none>(p, m, a, q, k, v, o, stream);
    case ScoreMod::alibi:
      return launch_for_mask<Steps, T, C, ScoreMod::alibi>(p, m, a, q, k, v, o, stream);
    case ScoreMod::bias:
      return launch_for_mask<Steps, T, C, ScoreMod::bias>(p, m, a, q, k, v, o, stream);
    case ScoreMod::softcap:
      return launch_for_mask<Steps, T, C, ScoreMod::softcap>(p, m, a, q, k, v, o, stream);
    case ScoreMod::relative:
      return launch_for_mask<Steps, T, C, ScoreMod::relative>(p, m, a, q, k, v, o, stream);
  }
  return Status::error("module 12: unknown score modifier");
}

template <class Steps>
Status forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
               const void* k, const void* v, void* o, cudaStream_t stream) {
  if (Status s = supports(p, m); !s) return s;
  if (Status s = require_sm80("module 12"); !s) return s;  // common/device.h
  if (!(rows_aligned16(q, p.q, 2) && rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
        rows_aligned16(o, p.o, 2)))
    return Status::error("module 12 moves rows in 16-byte pieces: every row of Q, K, V and O "
                         "must start on a 16-byte boundary (strides a multiple of 8 elements)");
  if (int64_t(p.seq_q) * p.batch * p.heads == 0) return Status::ok();
  Args a;
  a.rules = MaskRules{p.causal ? 1 : 0, m.prefix, m.window};
  a.seg_q = t.seg_q;
  a.seg_k = t.seg_k;
  a.scale = p.softmax_scale();
  a.softcap = m.softcap;
  a.bias = static_cast<const uint16_t*>(t.bias);
  a.bias_batch_stride = t.bias_batch_stride;
  a.bias_head_stride = t.bias_head_stride;
  a.bias_vec = p.seq_k % 8 == 0 && reinterpret_cast<uintptr_t>(t.bias) % 16 == 0 &&
               t.bias_batch_stride % 8 == 0 && t.bias_head_stride % 8 == 0;
  a.rel_bias = t.rel_bias;
  a.rope = m.rope;
  a.inv_softcap = m.softcap > 0 ? 1.0f / m.softcap : 0.0f;
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) {
    using C = std::conditional_t<decltype(d)::value == 64, m07::Config64, m07::Config128>;
    if (m.rope != RopeStyle::none) {  // the rows a thread rotates are kThreads / (D / 8) apart
      const int row_step = C::kThreads / (C::D / 8);
      if (Status s = set_rope_table<Steps>(m.rope_base, p.head_dim, row_step, stream); !s) return s;
    }
    if (p.dtype == DType::bf16)
      return launch_for_score<Steps, __nv_bfloat16, C>(p, m, a, q, k, v, o, stream);
    return launch_for_score<Steps, __half, C>(p, m, a, q, k, v, o, stream);
  });
}

template <class Steps>
__global__ void classify_kernel(RulesQuestion r, const TileQuestion* tiles, int n, int* classes) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const TileQuestion t = tiles[i];
  const TileClass c =
      r.documents ? Steps::classify_documents(t.pos_lo, t.pos_hi, t.key_lo, t.key_hi)
                  : Steps::classify(MaskRules{r.causal, r.prefix, r.window}, t.pos_lo, t.pos_hi,
                                    t.key_lo, t.key_hi);
  classes[i] = c == TileClass::masked ? kTileMasked : c == TileClass::full ? kTileFull
                                                                           : kTilePartial;
}

template <class Steps>
Status classify_tiles(const RulesQuestion& r, const std::vector<TileQuestion>& tiles,
                      std::vector<int>& classes) {
  if (Status s = require_sm80("module 12"); !s) return s;
  classes.assign(tiles.size(), -1);
  if (tiles.empty()) return Status::ok();
  const int n = int(tiles.size());
  TileQuestion* d_tiles = nullptr;
  int* d_classes = nullptr;
  ATTN_CUDA_RETURN(cudaMalloc(&d_tiles, sizeof(TileQuestion) * n));
  cudaError_t e = cudaMalloc(&d_classes, sizeof(int) * n);
  if (e == cudaSuccess)
    e = cudaMemcpy(d_tiles, tiles.data(), sizeof(TileQuestion) * n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    classify_kernel<Steps><<<(n + 127) / 128, 128>>>(r, d_tiles, n, d_classes);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess)
    e = cudaMemcpy(classes.data(), d_classes, sizeof(int) * n, cudaMemcpyDeviceToHost);
  cudaFree(d_tiles);
  cudaFree(d_classes);
  ATTN_CUDA_RETURN(e);
  return Status::ok();
}

}  // namespace attn::m12

#define ATTN_M12_DEFINE_ENTRY_POINTS(Steps)                                                   \
  Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,      \
                 cudaStream_t stream) {                                                       \
    if (Status s = supports(p); !s) return s;                                                 \
    return ::attn::m07::launch<::attn::m07::modifier_warp::WarpMma>(p, q, k, v, o, stream);   \
  }                                                                                           \
  Status forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t,           \
                 const void* q, const void* k, const void* v, void* o, cudaStream_t stream) { \
    if (!m.any()) return forward(p, q, k, v, o, stream);                                      \
    return ::attn::m12::forward<Steps>(p, m, t, q, k, v, o, stream);                          \
  }                                                                                           \
  Status classify_tiles(const RulesQuestion& r, const std::vector<TileQuestion>& tiles,       \
                        std::vector<int>& classes) {                                          \
    return ::attn::m12::classify_tiles<Steps>(r, tiles, classes);                             \
  }
