// Module 12, given: the launches. Module 07's kernel with its production configurations,
// module 07's solution as the warp's tensor-core step, and Hooks<ModifierSteps, T, score>
// (modifier_hooks.cuh) as its Mods; on Hopper, module 09's kernel with module 09's solution
// steps and HopperHooks (hopper_hooks.cuh). Defined once for the exercise and the solution:
//   ATTN_M12_DEFINE_ENTRY_POINTS(ModifierSteps)
// inside namespace attn::m12::ATTN_IMPL defines both forward()s there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/shared_memory.cuh"
#include "common/modifiers.h"
#include "common/problem.h"
#include "common/status.h"
#include "modules/07_tensor_cores/tensor_core_kernel.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "modules/12_modifiers/hopper_hooks.cuh"
#include "modules/12_modifiers/modifier_hooks.cuh"

// Module 07's solution of the warp step, in a namespace of its own (m07::modifier_warp), as
// module 10's prefill does: module 07's own exercise defines a different WarpMma.
#pragma push_macro("ATTN_IMPL")
#undef ATTN_IMPL
#define ATTN_IMPL modifier_warp
#include "solutions/07_tensor_cores/warp_mma.cuh"
#pragma pop_macro("ATTN_IMPL")
// And module 09's solution steps (m09::modifier_wgmma), for the Hopper kernel.
#pragma push_macro("ATTN_IMPL")
#undef ATTN_IMPL
#define ATTN_IMPL modifier_wgmma
#include "solutions/09_hopper/hopper_steps.cuh"
#pragma pop_macro("ATTN_IMPL")

namespace attn::m12 {

// RoPE's tables, each built once per key (device, base, head_dim, and a fourth number) into a
// device buffer of its own that lives as long as the program (a handful of keys in practice,
// 1 KiB each), so a launch never rewrites a table that a kernel on another stream may still
// read. The frequencies come from Steps::rope_frequency in double (one map per Steps: the
// exercise's and the solution's may differ); hi + lo holds each to ~2^-48.
template <class Steps, class V>
Status rope_table_once(double base, int head_dim, int fourth, int entries,
                       void (*fill)(V*, double, int, int), const V** table_out) {
  static std::mutex lock;
  static std::map<std::tuple<int, double, int, int>, V*> tables;
  int device = 0;
  ATTN_CUDA_RETURN(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> guard(lock);
  V*& table = tables[{device, base, head_dim, fourth}];
  if (!table) {
    std::vector<V> host(size_t(entries), V{});
    fill(host.data(), base, head_dim, fourth);
    V* buffer = nullptr;
    ATTN_CUDA_RETURN(cudaMalloc(&buffer, sizeof(V) * host.size()));
    if (cudaError_t e = cudaMemcpy(buffer, host.data(), sizeof(V) * host.size(),
                                   cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      cudaFree(buffer);
      ATTN_CUDA_RETURN(e);
    }
    table = buffer;
  }
  *table_out = table;
  return Status::ok();
}

// Frequency theta in turns per position, as hi + lo.
inline float2 turns_hi_lo(double theta) {
  const double turns = theta / (2.0 * M_PI);
  const float hi = float(turns);
  return {hi, float(turns - double(hi))};
}

// The table of the kernels (modifier_hooks.cuh), one entry per frequency m: (hi, lo, and the
// cos, sin of row_step x theta_m, the turn from one of a thread's rows to its next).
template <class Steps>
Status rope_table(double base, int head_dim, int row_step, const float4** table_out) {
  return rope_table_once<Steps, float4>(
      base, head_dim, row_step, kMaxRopeFrequencies,
      [](float4* t, double base, int head_dim, int row_step) {
        for (int m = 0; m < head_dim / 2; ++m) {
          const double theta = Steps::rope_frequency(m, head_dim, base);
          const float2 turns = turns_hi_lo(theta);
          t[m] = {turns.x, turns.y, float(std::cos(row_step * theta)),
                  float(std::sin(row_step * theta))};
        }
      },
      table_out);
}

// The K pass's table, one entry per feature in the order its lanes read them: entry
// e * (head_dim / 8) + c is feature 8c + e's frequency (its pair's, Steps::rope_pair), so the
// lanes of a warp, one 16-byte chunk c each, read neighbouring entries (one 128-byte line)
// instead of entries 8 apart (a line each).
template <class Steps>
Status rope_feature_table(RopeStyle style, double base, int head_dim, const float2** table_out) {
  return rope_table_once<Steps, float2>(
      base, head_dim, int(style), kMaxRopeFrequencies * 2,
      [](float2* t, double base, int head_dim, int style) {
        const int chunks = head_dim / 8;
        for (int f = 0; f < head_dim; ++f) {
          const int m = Steps::rope_pair(RopeStyle(style), f, head_dim).m;
          t[(f % 8) * chunks + f / 8] = turns_hi_lo(Steps::rope_frequency(m, head_dim, base));
        }
      },
      table_out);
}

template <class Steps, class T, class C, ScoreMod kScore, RopeWhere kRope, bool kDocuments>
Status launch_modified(const Problem& p, const Args& args, const void* q, const void* k,
                       const void* v, void* o, cudaStream_t stream) {
  using Warp = m07::modifier_warp::WarpMma;
  using Mods = Hooks<Steps, T, kScore, kRope, kDocuments>;
  constexpr auto kernel = m07::flash_tc_kernel<Warp, T, C, false, true, m07::DenseBatch, Mods>;
  constexpr int kSmem = C::kSmemBytes + Mods::template kExtraSmemBytes<C>;
  // Above 48 KB of shared memory a kernel must opt in.
  const cudaError_t opt_in = device::allow_shared_memory(kSmem, kernel);
  ATTN_CUDA_RETURN(opt_in);
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 12: more than 2^31 - 1 blocks");
  // The score hook hands the softmax the logit over the softmax scale (Hooks::score): the
  // scale stays folded into the exponent's FFMA, as in module 07; soft-capping hands tanh,
  // and the cap takes the scale's place.
  const float scale_log2 = float(
      (kScore == ScoreMod::softcap ? double(args.softcap) : p.softmax_scale()) * m07::kLog2e);
  kernel<<<unsigned(blocks), C::kThreads, kSmem, stream>>>(
      p, scale_log2, int(query_blocks), static_cast<const uint16_t*>(q),
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), static_cast<uint16_t*>(o),
      {}, args);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// One kernel per (score modifier, RoPE or not, documents or not): runtime switches to
// compile-time choices.
template <class Steps, RopeWhere kRope, class T, class C, ScoreMod kScore>
Status launch_for_mask(const Problem& p, const ModifierSpec& m, const Args& a, const void* q,
                       const void* k, const void* v, void* o, cudaStream_t stream) {
  constexpr RopeWhere kNone = RopeWhere::none;
  const bool rope = m.rope != RopeStyle::none;
  if (rope && m.documents)
    return launch_modified<Steps, T, C, kScore, kRope, true>(p, a, q, k, v, o, stream);
  if (rope) return launch_modified<Steps, T, C, kScore, kRope, false>(p, a, q, k, v, o, stream);
  if (m.documents)
    return launch_modified<Steps, T, C, kScore, kNone, true>(p, a, q, k, v, o, stream);
  return launch_modified<Steps, T, C, kScore, kNone, false>(p, a, q, k, v, o, stream);
}

template <class Steps, RopeWhere kRope, class T, class C>
Status launch_for_score(const Problem& p, const ModifierSpec& m, const Args& a, const void* q,
                        const void* k, const void* v, void* o, cudaStream_t stream) {
  switch (m.score) {
    case ScoreMod::none:
      return launch_for_mask<Steps, kRope, T, C, ScoreMod::none>(p, m, a, q, k, v, o, stream);
    case ScoreMod::alibi:
      return launch_for_mask<Steps, kRope, T, C, ScoreMod::alibi>(p, m, a, q, k, v, o, stream);
    case ScoreMod::bias:
      return launch_for_mask<Steps, kRope, T, C, ScoreMod::bias>(p, m, a, q, k, v, o, stream);
    case ScoreMod::softcap:
      return launch_for_mask<Steps, kRope, T, C, ScoreMod::softcap>(p, m, a, q, k, v, o, stream);
    case ScoreMod::relative:
      return launch_for_mask<Steps, kRope, T, C, ScoreMod::relative>(p, m, a, q, k, v, o, stream);
  }
  return Status::error("module 12: unknown score modifier");
}

// RoPE on the keys, once per call: K [batch, kv_heads, seq_k, head_dim] (any strides) ->
// out, dense BHSD, each element turned at its key's position and rounded to 16 bits, as
// applying RoPE beforehand does. A memory-bound pass, K read once and written once, so the
// arithmetic per byte must stay small enough to hide under the copy:
//   - a thread takes a key's chunk c whose first feature leads its pair (Steps::rope_pair),
//     with the partner chunk (the half-split convention: c + head_dim / 16) or within the
//     same chunk (interleaved): one angle, one __sincosf, turns two features;
//   - the lead chunks are the first `leads` of a row in both conventions, so threadIdx.x is
//     c and every lane has work (with a lane per chunk, the half-split convention would leave
//     half of each warp idle);
//   - the angles' table is in the lanes' order (rope_feature_table), the style a template;
//   - the grid's y is the (batch, kv_head) pair (from bh0: one launch per 65535 of them), so no
//     thread divides a 64-bit index.
// On an H200 this runs at 3.4 to 3.6 (half) and 3.8 to 3.9 (interleaved) TB/s, counting K
// read and written, where a copy of K runs at 4.0 (bench_12). Slower there: one thread per
// chunk computing its own eight features (each angle twice), several keys per thread, angles
// turned from key to key (docs/results/rope_kpass_variants_h200.txt).
template <class Steps, class T, RopeStyle kStyle>
__global__ void rotate_keys_kernel(Problem p, int bh0, const float2* __restrict__ table,
                                   const uint16_t* __restrict__ k, uint16_t* __restrict__ out) {
  const int c = int(threadIdx.x), j = int(blockIdx.x * blockDim.y + threadIdx.y);
  if (j >= p.seq_k) return;
  const int head_dim = p.head_dim, chunks = head_dim / 8;
  const RopePair lead = Steps::rope_pair(kStyle, 8 * c, head_dim);
  if (!lead.first) return;  // (only with a rope_pair whose lead chunks are not a prefix)
  const int pc = lead.partner / 8;
  const int bh = bh0 + int(blockIdx.y), b = bh / p.kv_heads, h = bh % p.kv_heads;
  const uint16_t* src = k + Problem::offset(p.k, b, h, j);
  uint16_t* dst = out + (int64_t(bh) * p.seq_k + j) * head_dim;
  // (Interleaved: the partners are in the chunk itself.)
  constexpr bool kPartnerChunk = kStyle == RopeStyle::half;
  uint4 own = *reinterpret_cast<const uint4*>(src + 8 * c);
  uint4 other = kPartnerChunk ? *reinterpret_cast<const uint4*>(src + 8 * pc) : own;
  turn_packed_chunk<Steps, T>(
      kStyle, head_dim, c, pc,
      [&](int e, float& cs, float& sn) { rope_cos_sin(j, __ldg(table + e * chunks + c), cs, sn); },
      own, other);
  *reinterpret_cast<uint4*>(dst + 8 * c) = own;
  if (kPartnerChunk && pc != c) *reinterpret_cast<uint4*>(dst + 8 * pc) = other;
}

// Calls f(T{}, std::integral_constant<RopeStyle, S>{}) with the element type T of `dtype`
// (__half or __nv_bfloat16) and the convention S of `style`: the passes turn rows with the
// convention a template, so that rope_pair folds to constants.
template <class F>
decltype(auto) dispatch_rope_style(DType dtype, RopeStyle style, F&& f) {
  using None = std::integral_constant<RopeStyle, RopeStyle::none>;
  using Half = std::integral_constant<RopeStyle, RopeStyle::half>;
  using Interleaved = std::integral_constant<RopeStyle, RopeStyle::interleaved>;
  auto with_type = [&](auto style_tag) {
    return dtype == DType::bf16 ? f(__nv_bfloat16{}, style_tag) : f(__half{}, style_tag);
  };
  if (style == RopeStyle::half) return with_type(Half{});
  if (style == RopeStyle::interleaved) return with_type(Interleaved{});
  return with_type(None{});
}

// The chunks of a row that lead their pairs (Steps::rope_pair): a prefix of the row in both
// conventions (interleaved: every chunk; half-split: the first head_dim / 16).
template <class Steps>
Status rope_leads(RopeStyle style, int head_dim, int* leads_out) {
  const int chunks = head_dim / 8;  // 1 .. 16 (supports())
  int leads = 0;
  while (leads < chunks && Steps::rope_pair(style, 8 * leads, head_dim).first) ++leads;
  if (leads == 0)
    return Status::error("module 12: rope_pair must mark feature 0 the first of its pair");
  *leads_out = leads;
  return Status::ok();
}

// Launches rotate_keys_kernel: K -> k_rot, dense BHSD (kv_elements of p), turned by RoPE.
template <class Steps>
Status rotate_keys(const Problem& p, RopeStyle style, double rope_base, const void* k,
                   void* k_rot, cudaStream_t stream) {
  if (style == RopeStyle::none) return Status::error("module 12: rotate_keys needs a convention");
  int leads = 0;
  if (Status s = rope_leads<Steps>(style, p.head_dim, &leads); !s) return s;
  const float2* table = nullptr;
  if (Status s = rope_feature_table<Steps>(style, rope_base, p.head_dim, &table); !s) return s;
  const dim3 threads(unsigned(leads), unsigned(256 / leads));  // x: lead chunk, y: key
  const unsigned key_blocks = unsigned((p.seq_k + threads.y - 1) / threads.y);
  const auto* src = static_cast<const uint16_t*>(k);
  auto* dst = static_cast<uint16_t*>(k_rot);
  // One launch per 65535 (batch, kv_head) pairs, the grid's y limit.
  const int heads = p.batch * p.kv_heads;  // < 2^31 (validate())
  if (p.seq_k == 0) return Status::ok();
  for (int64_t first = 0; first < heads; first += 65535) {
    const int bh0 = int(first);
    const dim3 grid(key_blocks, unsigned(std::min(heads - bh0, 65535)));
    dispatch_rope_style(p.dtype, style, [&](auto type_tag, auto style_tag) {
      if constexpr (decltype(style_tag)::value != RopeStyle::none)
        rotate_keys_kernel<Steps, decltype(type_tag), decltype(style_tag)::value>
            <<<grid, threads, 0, stream>>>(p, bh0, table, src, dst);
    });
    ATTN_CUDA_RETURN(cudaGetLastError());
  }
  return Status::ok();
}

// K turned once (rotate_keys) into a stream-ordered scratch buffer, then attend(pk, k_rot):
// the attention reads the turned keys, dense BHSD, through the problem pk.
template <class Steps, class Attend>
Status with_turned_keys(const Problem& p, const ModifierSpec& m, const void* k,
                        cudaStream_t stream, Attend&& attend) {
  Problem pk = p;
  pk.k = Strides{int64_t(p.kv_heads) * p.seq_k * p.head_dim, int64_t(p.seq_k) * p.head_dim,
                 p.head_dim};
  void* k_rot = nullptr;
  ATTN_CUDA_RETURN(cudaMallocAsync(&k_rot, size_t(p.kv_elements()) * 2, stream));
  Status s = rotate_keys<Steps>(p, m.rope, m.rope_base, k, k_rot, stream);
  if (s) s = attend(static_cast<const Problem&>(pk), static_cast<const void*>(k_rot));
  if (cudaError_t e = cudaFreeAsync(k_rot, stream); e != cudaSuccess && s.is_ok())
    s = Status::error(std::string("module 12: ") + cudaGetErrorString(e));
  return s;
}

// Narrow windows: 64 queries per block (one 16-row tile per warp, 168 registers), three
// blocks per SM. A block of a window of W keys computes about W + its rows keys per row and
// pays its fixed costs (Q's copy, the first tile's wait, O's store) over W / 64 tiles: half
// the rows halve the first, and three blocks per SM overlap the second. Wide windows and
// unmasked work run faster on module 07's 128-query blocks (more math per K/V tile read).
constexpr int kNarrowWindow = 1024;
template <int D>
using NarrowConfig = m07::Config<D, 4, 1, 64, 3, true,
                                 D == 64 ? m07::Pipeline::two_stage : m07::Pipeline::fa2, D == 64,
                                 false>;

// Module 09's kernel with the hooks (Hopper): module 09's production configurations (at
// d = 64 three consumer warpgroups, or two for the bias where hopper_consumers says; at
// d = 128 160-key tiles, the widest that fit beside the separate O tile, or 128-key tiles
// where hopper_tile_keys says).
using HopperConfig64 = m09::Production64;
using HopperConfig64Short = m09::Production64ShortCausal;
using HopperConfig128 = m09::Production128Wide;
using HopperConfig128Short = m09::Production128ShortCausal;

// The keys per K/V tile of module 09's kernel with the hooks: 128 at d = 64; at d = 128, 160
// except
//   - where module 09's own launch takes 128-key tiles (up to m09::kShortKeys keys, or
//     m09::kShortCausalKeys with the causal mask): 1024 keys are 6.4 tiles of 160, so the
//     last tile of each row block would be 60% empty;
//   - for the bias and T5, whose staged buffers (hopper_hooks.cuh) need the shared memory;
//   - for windows of up to kNarrowWindow keys: narrower tiles carry less of the band's ragged
//     ends (window 256 took 0.78-0.82 of its time on 160-key tiles).
inline int hopper_tile_keys(const Problem& p, const ModifierSpec& m) {
  if (p.head_dim == 64) return 128;
  const bool short_keys = p.seq_k <= (p.causal ? m09::kShortCausalKeys : m09::kShortKeys);
  const bool staged = m.score == ScoreMod::bias || m.score == ScoreMod::relative;
  const bool narrow = m.window > 0 && m.window <= kNarrowWindow;
  return short_keys || staged || narrow ? 128 : 160;
}

// The consumer warpgroups (64 query rows each) of module 09's kernel with the hooks: two at
// d = 128; at d = 64 three, since the softmax limits d = 64 and a third warpgroup adds to its
// throughput. The bias's copy and reads need more than the 160 registers a thread that three
// leave (ptxas spills), yet three take 0.91 to 0.96 of two's time, except with the causal
// mask up to m09::kShortCausalKeys64 keys (1.06), where module 09's own launch takes two as
// well: a 192-row block carries more rows across the diagonal, which at these lengths is most
// of the work (bench12_bias3_*_h200_r*.json). The others keep three there: with two, the
// causal score modifiers and RoPE took 1.05 to 1.14 of the time, documents without the mask
// 1.10 (with it 0.84; bench12_two64_*_h200_r*.json), windows of up to kNarrowWindow keys 1.06
// to 1.13 (bench12_narrow_*_h200_r*.json).
inline int hopper_consumers(const Problem& p, const ModifierSpec& m) {
  if (p.head_dim != 64) return 2;
  const bool short_causal = p.causal && p.seq_k <= m09::kShortCausalKeys64;
  return m.score == ScoreMod::bias && short_causal ? 2 : 3;
}

// Whether module 09's kernel runs this call: a Hopper GPU and a build with sm_90a code, rows
// TMA can read, head_dim 64 or 128, documents only without a score modifier, RoPE only
// without either (hopper_hooks.cuh). Else the reason, in one line.
inline Status hopper_fits(const Problem& p, const ModifierSpec& m, const void* q, const void* k,
                          const void* v, const void* o) {
  if (m.rope != RopeStyle::none && (m.score != ScoreMod::none || m.documents))
    return Status::error("module 12 runs RoPE with a score modifier or documents on module "
                         "07's kernel only");
  if (m.documents && m.score != ScoreMod::none)
    return Status::error("module 12 runs documents with a score modifier on module 07's kernel "
                         "only");
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status::error("module 12 runs module 09's kernel for head_dim 64 or 128 only (got " +
                         std::to_string(p.head_dim) + ")");
  return m09::check_launch(p, q, k, v, o);
}

template <class Steps, class T, ScoreMod kScore, bool kDocuments = false, bool kRope = false>
Status launch_hopper(const Problem& p, const ModifierSpec& m, const Args& a, const void* q,
                     const void* k, const void* v, void* o, cudaStream_t stream) {
  using Mods = HopperHooks<Steps, T, kScore, kDocuments, kRope>;
  using HopperSteps = m09::modifier_wgmma::HopperSteps;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const typename Mods::Args args{a, p};
  // As launch_modified: soft-capping puts the cap into the exponent.
  const double exponent_scale = kScore == ScoreMod::softcap ? double(a.softcap) : 0.0;
  auto run = [&](auto config) {
    return m09::launch_config<decltype(config), HopperSteps, kBf16, false, Mods>(
        p, q, k, v, o, stream, nullptr, args, exponent_scale);
  };
  if (p.head_dim == 64) {
    if constexpr (kScore == ScoreMod::bias)  // (the only one hopper_consumers gives two)
      if (hopper_consumers(p, m) == 2) return run(HopperConfig64Short{});
    return run(HopperConfig64{});
  }
  if constexpr (Mods::kStaged)
    return run(HopperConfig128Short{});
  else
    return hopper_tile_keys(p, m) == 128 ? run(HopperConfig128Short{}) : run(HopperConfig128{});
}

template <class Steps, class T>
Status launch_hopper_for_score(const Problem& p, const ModifierSpec& m, const Args& a,
                               const void* q, const void* k, const void* v, void* o,
                               cudaStream_t stream) {
  if (m.rope != RopeStyle::none)  // (without a score modifier or documents: hopper_fits)
    return launch_hopper<Steps, T, ScoreMod::none, false, true>(p, m, a, q, k, v, o, stream);
  switch (m.score) {
    case ScoreMod::none:
      return m.documents
                 ? launch_hopper<Steps, T, ScoreMod::none, true>(p, m, a, q, k, v, o, stream)
                 : launch_hopper<Steps, T, ScoreMod::none>(p, m, a, q, k, v, o, stream);
    case ScoreMod::alibi:
      return launch_hopper<Steps, T, ScoreMod::alibi>(p, m, a, q, k, v, o, stream);
    case ScoreMod::bias:
      return launch_hopper<Steps, T, ScoreMod::bias>(p, m, a, q, k, v, o, stream);
    case ScoreMod::softcap:
      return launch_hopper<Steps, T, ScoreMod::softcap>(p, m, a, q, k, v, o, stream);
    case ScoreMod::relative:
      return launch_hopper<Steps, T, ScoreMod::relative>(p, m, a, q, k, v, o, stream);
  }
  return Status::error("module 12: unknown score modifier");
}

// kRope: where RoPE turns the rows (RopeWhere); forward() uses RopeWhere::q, bench_12 also
// measures RopeWhere::q_and_k (module 07's kernel only). kEngine (modifier_attention.h):
// automatic takes module 09's kernel where it runs (hopper_fits), module 07's elsewhere.
template <class Steps, RopeWhere kRope = RopeWhere::q, Engine kEngine = Engine::automatic>
Status forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
               const void* k, const void* v, void* o, cudaStream_t stream) {
  if (Status s = supports(p, m); !s) return s;
  if (Status s = require_sm80("module 12"); !s) return s;  // common/device.h
  // Module 09's kernel: where it runs (automatic) or always (wgmma).
  bool on_hopper = false;
  if constexpr (kEngine != Engine::mma && kRope == RopeWhere::q) {
    const Status fits = hopper_fits(p, m, q, k, v, o);
    if (kEngine == Engine::wgmma && !fits) return fits;
    on_hopper = fits.is_ok();
  } else if constexpr (kEngine == Engine::wgmma) {
    return Status::error("module 12 runs RoPE in the tiles on module 07's kernel only");
  }
  // Without modifiers, elsewhere: module 07's own kernel, which also takes rows that are not
  // 16-byte aligned (Engine::mma keeps the hooks, to measure what they cost).
  if (kEngine == Engine::automatic && !m.any() && !on_hopper)
    return m07::launch<m07::modifier_warp::WarpMma>(p, q, k, v, o, stream);
  if (!(rows_aligned16(q, p.q, 2) && rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
        rows_aligned16(o, p.o, 2)))
    return Status::error("module 12 moves rows in 16-byte pieces: every row of Q, K, V and O "
                         "must start on a 16-byte boundary (strides a multiple of 8 elements)");
  if (int64_t(p.seq_q) * p.batch * p.heads == 0) return Status::ok();
  Args a;
  a.rules = MaskRules{p.causal ? 1 : 0, m.prefix, m.window};
  a.seg_q = t.seg_q;
  a.seg_k = t.seg_k;
  a.inv_scale = float(1.0 / p.softmax_scale());
  a.softcap = m.softcap;
  a.bias = static_cast<const uint16_t*>(t.bias);
  a.bias_batch_stride = t.bias_batch_stride;
  a.bias_head_stride = t.bias_head_stride;
  a.bias_vec = p.seq_k % 8 == 0 && reinterpret_cast<uintptr_t>(t.bias) % 16 == 0 &&
               t.bias_batch_stride % 8 == 0 && t.bias_head_stride % 8 == 0;
  a.rel_bias = t.rel_bias;
  a.rope = m.rope;
  a.inv_softcap = m.softcap > 0 ? float(p.softmax_scale() / m.softcap) : 0.0f;
  if constexpr (kEngine != Engine::mma && kRope == RopeWhere::q) {
    if (on_hopper) {
      auto attend = [&](const Problem& pa, const void* ka) {
        return p.dtype == DType::bf16
                   ? launch_hopper_for_score<Steps, __nv_bfloat16>(pa, m, a, q, ka, v, o, stream)
                   : launch_hopper_for_score<Steps, __half>(pa, m, a, q, ka, v, o, stream);
      };
      if (m.rope == RopeStyle::none) return attend(p, k);
      // K turned by the K pass, Q by each consumer warpgroup in shared memory (turn_q), which
      // takes the convention's lead chunks only (a row's first head_dim / 8 interleaved,
      // head_dim / 16 half).
      int leads = 0;
      if (Status s = rope_leads<Steps>(m.rope, p.head_dim, &leads); !s) return s;
      if (leads == p.head_dim / (m.rope == RopeStyle::interleaved ? 8 : 16)) {
        if (Status s = rope_feature_table<Steps>(m.rope, m.rope_base, p.head_dim,
                                                 &a.rope_features);
            !s)
          return s;
        return with_turned_keys<Steps>(p, m, k, stream, attend);
      }
      if (kEngine == Engine::wgmma)
        return Status::error("module 12 runs RoPE on module 09's kernel only for a rope_pair "
                             "whose pairs are led by the row's first head_dim / 8 (interleaved) "
                             "or head_dim / 16 (half) 16-byte chunks");
    }
  }
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) {
    using C = std::conditional_t<decltype(d)::value == 64, m07::Config64, m07::Config128>;
    const bool bf16 = p.dtype == DType::bf16;
    if (m.rope == RopeStyle::none && m.window > 0 && m.window <= kNarrowWindow) {
      using N = NarrowConfig<decltype(d)::value>;
      constexpr RopeWhere kNone = RopeWhere::none;
      return bf16 ? launch_for_score<Steps, kNone, __nv_bfloat16, N>(p, m, a, q, k, v, o, stream)
                  : launch_for_score<Steps, kNone, __half, N>(p, m, a, q, k, v, o, stream);
    }
    if (m.rope == RopeStyle::none)
      return bf16 ? launch_for_score<Steps, kRope, __nv_bfloat16, C>(p, m, a, q, k, v, o, stream)
                  : launch_for_score<Steps, kRope, __half, C>(p, m, a, q, k, v, o, stream);
    // The rows a thread rotates in the kernel are kThreads / (D / 8) apart.
    const int row_step = C::kThreads / (C::D / 8);
    if (Status s = rope_table<Steps>(m.rope_base, p.head_dim, row_step, &a.rope_table); !s)
      return s;
    if constexpr (kRope == RopeWhere::q_and_k) {
      return bf16 ? launch_for_score<Steps, kRope, __nv_bfloat16, C>(p, m, a, q, k, v, o, stream)
                  : launch_for_score<Steps, kRope, __half, C>(p, m, a, q, k, v, o, stream);
    } else {
      // K turned once, into a scratch buffer the attention reads instead.
      return with_turned_keys<Steps>(p, m, k, stream, [&](const Problem& pk, const void* k_rot) {
        return bf16 ? launch_for_score<Steps, kRope, __nv_bfloat16, C>(pk, m, a, q, k_rot, v, o,
                                                                       stream)
                    : launch_for_score<Steps, kRope, __half, C>(pk, m, a, q, k_rot, v, o, stream);
      });
    }
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
    return forward(p, ModifierSpec{}, ModifierTensors{}, q, k, v, o, stream);                 \
  }                                                                                           \
  Status forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t,           \
                 const void* q, const void* k, const void* v, void* o, cudaStream_t stream) { \
    return ::attn::m12::forward<Steps>(p, m, t, q, k, v, o, stream);                          \
  }                                                                                           \
  Status forward_on(Engine e, const Problem& p, const ModifierSpec& m,                        \
                    const ModifierTensors& t, const void* q, const void* k, const void* v,    \
                    void* o, cudaStream_t stream) {                                           \
    using ::attn::m12::RopeWhere;                                                             \
    if (e == Engine::mma)                                                                     \
      return ::attn::m12::forward<Steps, RopeWhere::q, Engine::mma>(p, m, t, q, k, v, o,      \
                                                                    stream);                 \
    if (e == Engine::wgmma)                                                                   \
      return ::attn::m12::forward<Steps, RopeWhere::q, Engine::wgmma>(p, m, t, q, k, v, o,    \
                                                                      stream);               \
    return forward(p, m, t, q, k, v, o, stream);                                              \
  }                                                                                           \
  Status classify_tiles(const RulesQuestion& r, const std::vector<TileQuestion>& tiles,       \
                        std::vector<int>& classes) {                                          \
    return ::attn::m12::classify_tiles<Steps>(r, tiles, classes);                             \
  }                                                                                           \
  Status qkv_projection(const LayerShape& s, RopeStyle style, double rope_base, const void* x, \
                        const void* w_qkv, void* q, void* k, void* v, cudaStream_t stream) {  \
    return ::attn::m12::qkv_projection<Steps>(s, style, rope_base, x, w_qkv, q, k, v, stream); \
  }

// The layer around attention (the projections and their RoPE epilogue): README, section 4.
#include "modules/12_modifiers/projections.cuh"
