// Module 12 solution: the entry points over the solution's steps (modifier_steps.cuh) and the
// given hooks and launches of modules/12_modifiers.
#include "modules/12_modifiers/entry_points.cuh"
#include "modules/12_modifiers/modifier_attention.h"
#include "solutions/12_modifiers/modifier_steps.cuh"

namespace attn::m12::ATTN_IMPL {

ATTN_M12_DEFINE_ENTRY_POINTS(ModifierSteps)

}  // namespace attn::m12::ATTN_IMPL
