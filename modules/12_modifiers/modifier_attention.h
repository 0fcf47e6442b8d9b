// Module 12: what real models add to attention. Score modifiers (ALiBi, an additive bias,
// tanh soft-capping, T5's relative position buckets), masks (causal, prefix-LM, sliding
// window, packed documents) whose fully masked tiles are skipped, and RoPE applied to the Q
// and K tiles as they arrive in shared memory: all on module 07's kernel (sm_80+, f16/bf16);
// on Hopper, score modifiers and the rule masks on module 09's kernel (Engine below).
// The rules are stated once in common/modifiers.h. The exercise (exercise.cu) and the solution
// (solutions/12_modifiers/solution.cu) implement ModifierSteps (modifier_hooks.cuh); the
// grader is tests/test_12_modifiers.cpp.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/modifiers.h"
#include "common/problem.h"
#include "common/status.h"

namespace attn::m12 {

// What this module handles (given, shared by exercise and solution): module 07's shapes
// (f16/bf16, head_dim <= 128), with rows that move in 16-byte pieces (head_dim % 8 == 0 and
// 16-byte aligned rows: the RoPE pass rotates whole 16-byte chunks of a row).
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Status::error("module 12 runs on the tensor cores and takes f16 or bf16 tensors "
                         "(--dtype bf16 or --dtype f16), not " + std::string(dtype_name(p.dtype)));
  if (p.head_dim % 8 != 0 || p.head_dim > 128)
    return Status::error("module 12 moves rows in 16-byte pieces and keeps a row of O in "
                         "registers: head_dim must be a multiple of 8, at most 128 (got " +
                         std::to_string(p.head_dim) + ")");
  return Status::ok();
}

inline Status supports(const Problem& p, const ModifierSpec& m) {
  if (Status s = supports(p); !s) return s;
  return validate(p, m);
}

// For the grader's check of the tile classification on its own: a tile of positions
// [pos_lo, pos_hi] x keys [key_lo, key_hi] (for documents: segment ids [pos_lo, pos_hi] of the
// rows x [key_lo, key_hi] of the keys), and the rules of MaskRules (modifier_hooks.cuh).
struct TileQuestion {
  int pos_lo, pos_hi, key_lo, key_hi;
};
struct RulesQuestion {
  int causal = 0, prefix = 0, window = 0;
  bool documents = false;  // ask classify_documents instead of classify
};
enum : int { kTileMasked = 0, kTilePartial = 1, kTileFull = 2 };

// The kernel that runs a call: module 07's (mma.sync, every GPU from sm_80), module 09's
// (wgmma, Hopper with a build that has sm_90a code; documents and RoPE only without a score
// modifier, RoPE not with documents), or automatic: module 09's where it runs, module 07's
// elsewhere.
enum class Engine { automatic, mma, wgmma };

// The layer around attention (README, section 4): `tokens` rows of hidden states, whole
// sequences of `seq` tokens (token m sits at position m % seq), heads x head_dim features per
// projection.
struct LayerShape {
  int tokens = 0, seq = 1, hidden = 0, heads = 1, head_dim = 64;
  DType dtype = DType::bf16;
};

namespace ATTN_IMPL {

// The plain problem (no modifier): module 07's kernel, as module 07 runs it.
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);
// With modifiers: t holds the device tensors the modifiers read (common/modifiers.h).
Status forward(const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
               const void* k, const void* v, void* o, cudaStream_t stream);
// The same on the kernel e names (the grader and bench_12 run both on Hopper); wgmma where
// module 09's kernel cannot run this call returns the reason.
Status forward_on(Engine e, const Problem& p, const ModifierSpec& m, const ModifierTensors& t,
                  const void* q, const void* k, const void* v, void* o, cudaStream_t stream);
// ModifierSteps::classify (or classify_documents) run on the GPU for each tile: kTileMasked,
// kTilePartial or kTileFull per tile, in `classes`.
Status classify_tiles(const RulesQuestion& r, const std::vector<TileQuestion>& tiles,
                      std::vector<int>& classes);
// Q, K and V from the hidden states x [tokens, hidden] and w_qkv [3 x heads x head_dim, hidden]
// (rows q, then k, then v; torch.nn.Linear's layout) in one GEMM whose epilogue turns Q and K
// by RoPE (ModifierSteps::rope_pair, rope_frequency) at their token's position; q, k, v are
// [tokens, heads, head_dim]. style none: the plain projection.
Status qkv_projection(const LayerShape& s, RopeStyle style, double rope_base, const void* x,
                      const void* w_qkv, void* q, void* k, void* v, cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m12
