// 16-bit floating point on the host: converting between float and the bit patterns of
// IEEE half (f16) and bfloat16 (bf16), the element types of modules 07 and later.
//
// Host code keeps every tensor as std::vector<float>. For a 16-bit problem those floats hold
// exactly representable 16-bit values (random_inputs rounds them), so the double-precision
// reference sees the very numbers the kernel reads, and "correct" means "correct for these
// low-precision inputs". Uploading converts each float to its 16-bit pattern (exact, since it
// is representable); downloading converts O's patterns back to float (always exact: every
// f16 and bf16 value is a float).
//
// Rounding is to nearest, ties to even (what __float2half_rn / __float2bfloat16_rn and the
// tensor cores' conversions do): a float halfway between two 16-bit values goes to the one
// whose last mantissa bit is 0, so rounding errors do not drift one way on average.
//
// The formats, as bit fields (sign | exponent | mantissa):
//   f32:  1 | 8 (bias 127) | 23
//   f16:  1 | 5 (bias  15) | 10   max 65504; below 2^-14 subnormal down to 2^-24
//   bf16: 1 | 8 (bias 127) |  7   the top 16 bits of a float: same range, 8 bits of precision
//
// Written with plain bit manipulation (no CUDA header needed, any host compiler);
// tests/test_dtype.cpp checks it against CUDA's own host conversions for every 16-bit pattern.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/poison.h"
#include "common/problem.h"

namespace attn {

namespace half_detail {

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Adds 1 to `kept` when the dropped low bits `rest` (out of `width` bits) are more than half,
// or exactly half and `kept` is odd: round to nearest, ties to even.
inline uint32_t round_nearest_even(uint32_t kept, uint32_t rest, int width) {
  const uint32_t half = 1u << (width - 1);
  return kept + (rest > half || (rest == half && (kept & 1u)));
}

inline uint16_t float_to_f16(float x) {
  const uint32_t f = float_bits(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t mag = f & 0x7FFFFFFFu;  // |x| as bits: ordered like the values
  if (mag > 0x7F800000u) return 0x7E00u;  // NaN: the canonical quiet NaN (never the poison)
  // 65520 = 0x477FF000 is halfway between the largest half, 65504, and 2^16; the tie goes to
  // the even neighbour 2^16, which is past the range: Inf. So |x| >= 65520 (and Inf) -> Inf.
  if (mag >= 0x477FF000u) return uint16_t(sign | 0x7C00u);
  if (mag >= 0x38800000u) {
    // Normal half (|x| >= 2^-14): rebias the exponent (127 -> 15: subtract 112 << 23), keep
    // the top 10 mantissa bits and round on the 13 dropped ones. A mantissa that rounds up
    // past 0x3FF carries into the exponent, which is the right answer (1.111..1 -> 10.0).
    const uint32_t kept = (mag - 0x38000000u) >> 13;
    return uint16_t(sign | round_nearest_even(kept, mag & 0x1FFFu, 13));
  }
  // Subnormal half: the value is m * 2^-24 with m in 0..1023. |x| = M * 2^(E - 150) for the
  // float's 24-bit mantissa M (with its implicit 1) and biased exponent E, so
  // m = M * 2^(E - 126): shift M right by 126 - E and round. Below 2^-25 (E < 102) even the
  // rounding gives 0 (exactly 2^-25 is a tie between 0 and 2^-24 and goes to the even 0).
  const int exponent = int(mag >> 23);
  if (exponent < 102) return uint16_t(sign);
  const uint32_t mantissa = (mag & 0x7FFFFFu) | 0x800000u;
  const int shift = 126 - exponent;  // 14..24
  const uint32_t kept = mantissa >> shift;
  // A result of 0x400 (rounded up from 0x3FF) is the smallest normal half: also right.
  return uint16_t(sign | round_nearest_even(kept, mantissa & ((1u << shift) - 1u), shift));
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)  // Inf (mantissa 0) or NaN (the mantissa bits kept as the payload)
    return bits_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = float(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_bf16(float x) {
  const uint32_t f = float_bits(x);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;  // NaN: canonical quiet NaN
  // bf16 is the top half of the float: round on the low 16 bits. Adding 0x7FFF (+1 when the
  // kept part is odd) carries into the kept bits exactly when the dropped part is above half,
  // or half with an odd kept part. A carry out of the mantissa bumps the exponent, and
  // past the largest finite value it lands on Inf (0x7F80), as rounding should.
  const uint32_t rounded = f + 0x7FFFu + ((f >> 16) & 1u);
  return uint16_t(rounded >> 16);
}

inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

}  // namespace half_detail

// The 16-bit pattern of x rounded to t (f16 or bf16; for f32 this is not meaningful and
// returns the bf16 pattern). Overflow gives +-Inf in f16 (|x| >= 65520); NaN gives a quiet
// NaN (0x7E00 in f16, 0x7FC0 in bf16), never kPoisonBits16.
inline uint16_t to_bits16(float x, DType t) {
  return t == DType::f16 ? half_detail::float_to_f16(x) : half_detail::float_to_bf16(x);
}

// The float value of a 16-bit pattern (exact). kPoisonBits16 gives the float poison
// (poison_value(), which is_poison() recognizes); other NaN patterns give a NaN.
inline float from_bits16(uint16_t bits, DType t) {
  if (bits == kPoisonBits16) return half_detail::bits_float(kPoisonBits);
  return t == DType::f16 ? half_detail::f16_to_float(bits) : half_detail::bf16_to_float(bits);
}

// x rounded to the nearest value of type t, as a float; identity for f32.
inline float round_to_dtype(float x, DType t) {
  return t == DType::f32 ? x : from_bits16(to_bits16(x, t), t);
}

inline void round_to_dtype(std::vector<float>& values, DType t) {
  if (t == DType::f32) return;
  for (float& x : values) x = round_to_dtype(x, t);
}

// Whole tensors: what the runner uploads (the patterns of `values` rounded to t) and
// downloads (floats of the patterns, kPoisonBits16 -> the float poison).
inline std::vector<uint16_t> to_bits16(const std::vector<float>& values, DType t) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = to_bits16(values[i], t);
  return bits;
}

inline std::vector<float> from_bits16(const std::vector<uint16_t>& bits, DType t) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = from_bits16(bits[i], t);
  return values;
}

}  // namespace attn
