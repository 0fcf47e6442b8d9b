// The poison patterns: what an output holds before the kernel runs. Every byte 0xFF, as
// DeviceBuffer::poison() writes, so that an element still holding it was never written.
//   float:  0xFFFFFFFF, a NaN that no arithmetic produces;
//   16-bit: 0xFFFF, a NaN in both f16 and bf16 that no conversion of a computed value
//           produces (CUDA's NaN converts to 0x7FFF / 0x7E00 / 0x7FFF, and to_bits16 in
//           common/half.h gives 0x7E00 / 0x7FC0). from_bits16 turns it into the float
//           pattern, so is_poison() (common/compare.h) works on downloaded 16-bit outputs.
#pragma once

#include <cstdint>

namespace attn {

constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;
constexpr uint16_t kPoisonBits16 = 0xFFFFu;

}  // namespace attn
