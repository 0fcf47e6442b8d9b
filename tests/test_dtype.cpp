// Tests of the 16-bit element types in the shared harness (CPU only; one case also runs the
// upload/download path when a GPU is present): the f16/bf16 conversions of common/half.h,
// checked bit for bit against CUDA's own host conversions, DType parsing and naming, the
// dtype in Problem (describe, bytes, alignment), random inputs rounded to the type, the
// per-type tolerances, and how modules that do not take a type refuse it.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/device.h"
#include "common/half.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/registry.h"
#include "common/runner.h"

using namespace attn;

namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// CUDA's host conversions (cuda_fp16.h / cuda_bf16.h): the yardstick for ours.
uint16_t cuda_to_bits16(float x, DType t) {
  if (t == DType::f16) return __half_raw(__float2half_rn(x)).x;
  return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
}

float cuda_from_bits16(uint16_t bits, DType t) {
  if (t == DType::f16) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}

bool is_nan_bits16(uint16_t bits, DType t) {
  return t == DType::f16 ? (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu) != 0
                         : (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0;
}

const DType kSixteenBit[] = {DType::f16, DType::bf16};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Conversions

TEST_CASE("half: every non-NaN f16 and bf16 pattern converts to float and back unchanged") {
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    int mismatches = 0, nans = 0;
    uint32_t first_bad = 0x10000;
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
      const uint16_t bits = uint16_t(b);
      const float x = from_bits16(bits, t);
      if (is_nan_bits16(bits, t)) {
        ++nans;
        // A NaN stays a NaN both ways (the payload is not kept: to_bits16 gives one NaN).
        if (!std::isnan(x) || !is_nan_bits16(to_bits16(x, t), t)) ++mismatches;
        continue;
      }
      if (to_bits16(x, t) != bits && mismatches++ == 0) first_bad = b;
    }
    INFO("first pattern that does not round-trip: " << first_bad);
    CHECK(mismatches == 0);
    CHECK(nans == 2 * (t == DType::f16 ? 1023 : 127));  // both signs, every nonzero mantissa
  }
}

TEST_CASE("half: from_bits16 gives CUDA's value for every pattern") {
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    int mismatches = 0;
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
      const uint16_t bits = uint16_t(b);
      const float ours = from_bits16(bits, t), cuda = cuda_from_bits16(bits, t);
      const bool same = std::isnan(cuda) ? std::isnan(ours) : bits_of(ours) == bits_of(cuda);
      if (!same) {
        if (mismatches++ == 0) MESSAGE("pattern " << b << ": ours " << ours << ", CUDA " << cuda);
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("half: to_bits16 rounds as CUDA's __float2half_rn / __float2bfloat16_rn") {
  // Where rounding can go wrong: every 16-bit value, the exact midpoint to the next one (a tie),
  // and the floats just beside both; plus a million floats with random bits (every exponent,
  // float subnormals, Inf). NaN inputs are checked in their own case.
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    std::vector<float> probes;
    for (uint32_t b = 0; b < 0xFFFF; ++b) {
      const uint16_t bits = uint16_t(b);
      if (is_nan_bits16(bits, t) || is_nan_bits16(uint16_t(b + 1), t)) continue;
      const float x = from_bits16(bits, t);
      if (std::isinf(x)) continue;
      probes.push_back(x);
      probes.push_back(std::nextafter(x, INFINITY));
      probes.push_back(std::nextafter(x, -INFINITY));
      const float next = from_bits16(uint16_t(b + 1), t);  // b + 1: the next value outwards
      if (std::isinf(next)) {
        // The largest finite value: the tie with the next power of two decides overflow.
        const float tie = t == DType::f16 ? 65520.0f : float_of(0x7F7F8000u);
        for (float y : {tie, -tie}) {
          probes.push_back(y);
          probes.push_back(std::nextafter(y, INFINITY));
          probes.push_back(std::nextafter(y, -INFINITY));
        }
        continue;
      }
      if ((bits_of(x) >> 31) != (bits_of(next) >> 31)) continue;  // 0x7FFF -> 0x8000: no pair
      const float tie = float((double(x) + double(next)) / 2);  // exact: one more bit than t has
      probes.push_back(tie);
      probes.push_back(std::nextafter(tie, INFINITY));
      probes.push_back(std::nextafter(tie, -INFINITY));
    }
    Rng rng(2024);
    for (int i = 0; i < 1000000; ++i) {
      const float x = float_of(uint32_t(rng.next_u64()));
      if (!std::isnan(x)) probes.push_back(x);
    }
    for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f})
      probes.push_back(x);
    int mismatches = 0;
    for (float x : probes) {
      const uint16_t ours = to_bits16(x, t), cuda = cuda_to_bits16(x, t);
      if (ours != cuda && mismatches++ < 3)
        MESSAGE("x = " << x << " (bits " << bits_of(x) << "): ours " << ours << ", CUDA " << cuda);
    }
    CHECK(probes.size() > 1100000);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("half: ties round to the even neighbour") {
  // f16 keeps 10 mantissa bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  CHECK(to_bits16(1.0f + 0x1p-11f, DType::f16) == 0x3C00u);        // to 1 (even)
  CHECK(to_bits16(1.0f + 3 * 0x1p-11f, DType::f16) == 0x3C02u);    // to 1 + 2^-9 (even)
  CHECK(to_bits16(-(1.0f + 0x1p-11f), DType::f16) == 0xBC00u);
  CHECK(to_bits16(std::nextafter(1.0f + 0x1p-11f, 2.0f), DType::f16) == 0x3C01u);  // above: up
  // bf16 keeps 7: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  CHECK(to_bits16(1.0f + 0x1p-8f, DType::bf16) == 0x3F80u);
  CHECK(to_bits16(1.0f + 3 * 0x1p-8f, DType::bf16) == 0x3F82u);
  CHECK(to_bits16(-(1.0f + 0x1p-8f), DType::bf16) == 0xBF80u);
  CHECK(to_bits16(std::nextafter(1.0f + 0x1p-8f, 0.0f), DType::bf16) == 0x3F80u);  // below: down
  // A mantissa that rounds up past all ones carries into the exponent.
  CHECK(to_bits16(2.0f - 0x1p-12f, DType::f16) == 0x4000u);  // 1.11111111111 -> 2
  CHECK(to_bits16(2.0f - 0x1p-9f, DType::bf16) == 0x4000u);
  CHECK(round_to_dtype(1.0f / 3.0f, DType::f16) == 0x1.554p-2f);
  CHECK(round_to_dtype(1.0f / 3.0f, DType::bf16) == 0x1.56p-2f);
}

TEST_CASE("half: f16 overflows to Inf from 65520 on; bf16 only past float's range") {
  CHECK(to_bits16(65504.0f, DType::f16) == 0x7BFFu);  // the largest half
  CHECK(to_bits16(65519.996f, DType::f16) == 0x7BFFu);
  CHECK(to_bits16(65520.0f, DType::f16) == 0x7C00u);  // the tie goes to 2^16: Inf
  CHECK(to_bits16(1e6f, DType::f16) == 0x7C00u);
  CHECK(to_bits16(-1e6f, DType::f16) == 0xFC00u);
  CHECK(to_bits16(INFINITY, DType::f16) == 0x7C00u);
  CHECK(std::isinf(round_to_dtype(70000.0f, DType::f16)));
  CHECK(round_to_dtype(70000.0f, DType::bf16) == 70144.0f);  // bf16 has float's range
  CHECK(to_bits16(FLT_MAX, DType::bf16) == 0x7F80u);           // above the last tie: Inf
  CHECK(to_bits16(float_of(0x7F7F7FFFu), DType::bf16) == 0x7F7Fu);  // below it: the largest
  CHECK(to_bits16(-INFINITY, DType::bf16) == 0xFF80u);
}

TEST_CASE("half: subnormals, zeros and underflow") {
  // f16 subnormals are m * 2^-24, m = 1..1023; the smallest normal is 2^-14.
  CHECK(from_bits16(0x0001u, DType::f16) == 0x1p-24f);
  CHECK(from_bits16(0x03FFu, DType::f16) == 1023 * 0x1p-24f);
  CHECK(from_bits16(0x8001u, DType::f16) == -0x1p-24f);
  CHECK(to_bits16(0x1p-24f, DType::f16) == 0x0001u);
  CHECK(to_bits16(0x1p-25f, DType::f16) == 0x0000u);  // tie between 0 and 2^-24: to 0 (even)
  CHECK(to_bits16(std::nextafter(0x1p-25f, 1.0f), DType::f16) == 0x0001u);
  CHECK(to_bits16(3 * 0x1p-25f, DType::f16) == 0x0002u);  // tie between 1 and 2: to 2 (even)
  CHECK(to_bits16(-3 * 0x1p-25f, DType::f16) == 0x8002u);
  CHECK(to_bits16(0x1p-14f, DType::f16) == 0x0400u);
  CHECK(to_bits16(0x1p-14f - 0x1p-25f, DType::f16) == 0x0400u);  // 1023.5 * 2^-24: to 1024
  CHECK(to_bits16(1e-10f, DType::f16) == 0x0000u);
  CHECK(to_bits16(-1e-10f, DType::f16) == 0x8000u);  // the sign survives underflow
  CHECK(to_bits16(-0.0f, DType::f16) == 0x8000u);
  CHECK(std::signbit(from_bits16(0x8000u, DType::f16)));
  // bf16 subnormals are float's with 7 mantissa bits: m * 2^-133.
  CHECK(from_bits16(0x0001u, DType::bf16) == 0x1p-133f);
  CHECK(to_bits16(0x1p-133f, DType::bf16) == 0x0001u);
  CHECK(to_bits16(0x1p-134f, DType::bf16) == 0x0000u);  // tie: to 0 (even)
  CHECK(to_bits16(3 * 0x1p-134f, DType::bf16) == 0x0002u);
  CHECK(to_bits16(-0.0f, DType::bf16) == 0x8000u);
}

TEST_CASE("half: NaN stays NaN, never the poison; the poison reads back as the float poison") {
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    for (float nan : {NAN, -NAN, poison_value(), float_of(0x7F800001u), float_of(0xFFC00001u)}) {
      const uint16_t bits = to_bits16(nan, t);
      CHECK(is_nan_bits16(bits, t));
      CHECK(bits != kPoisonBits16);
      CHECK(std::isnan(round_to_dtype(nan, t)));
      CHECK_FALSE(is_poison(round_to_dtype(nan, t)));
    }
    CHECK(is_nan_bits16(kPoisonBits16, t));  // the poison is a NaN in both formats
    CHECK(is_poison(from_bits16(kPoisonBits16, t)));
    int poisons = 0;
    for (uint32_t b = 0; b <= 0xFFFF; ++b) poisons += is_poison(from_bits16(uint16_t(b), t));
    CHECK(poisons == 1);  // only 0xFFFF: a NaN the kernel computed is not "unwritten"
  }
  // The vector forms, as the runner downloads an output.
  const std::vector<float> back = from_bits16(std::vector<uint16_t>{0x3C00u, 0xFFFFu, 0x7E00u},
                                              DType::f16);
  CHECK(back[0] == 1.0f);
  CHECK(is_poison(back[1]));
  CHECK(std::isnan(back[2]));
  CHECK_FALSE(is_poison(back[2]));
  CHECK(to_bits16(std::vector<float>{1.0f, -2.0f}, DType::bf16) ==
        std::vector<uint16_t>{0x3F80u, 0xC000u});
}

TEST_CASE("half: round_to_dtype is the identity for f32 and idempotent for 16 bits") {
  std::vector<float> values(1000);
  fill_uniform(values, 5, -100.0f, 100.0f);
  std::vector<float> same = values;
  round_to_dtype(same, DType::f32);
  CHECK(same == values);
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    std::vector<float> once = values;
    round_to_dtype(once, t);
    CHECK(once != values);  // uniform floats are (almost all) not 16-bit values
    std::vector<float> twice = once;
    round_to_dtype(twice, t);
    CHECK(twice == once);
    const double unit = t == DType::f16 ? 0x1p-11 : 0x1p-8;  // relative rounding, at most
    for (size_t i = 0; i < values.size(); ++i)
      CHECK(std::fabs(double(once[i]) - values[i]) <= unit * std::fabs(values[i]));
  }
}

// ---------------------------------------------------------------------------------------------
// DType and Problem

TEST_CASE("dtype: names, sizes and the spellings parse_dtype accepts") {
  CHECK(std::string(dtype_name(DType::f32)) == "f32");
  CHECK(std::string(dtype_name(DType::f16)) == "f16");
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(dtype_bytes(DType::f32) == 4);
  CHECK(dtype_bytes(DType::f16) == 2);
  CHECK(dtype_bytes(DType::bf16) == 2);
  const std::pair<const char*, DType> good[] = {
      {"f32", DType::f32},      {"fp32", DType::f32},      {"float32", DType::f32},
      {"f16", DType::f16},      {"fp16", DType::f16},      {"half", DType::f16},
      {"float16", DType::f16},  {"bf16", DType::bf16},     {"bfloat16", DType::bf16},
      {"BF16", DType::bf16},    {"Float16", DType::f16}};
  for (const auto& [text, want] : good) {
    INFO(text);
    DType got = want == DType::f32 ? DType::bf16 : DType::f32;  // anything but the answer
    CHECK(parse_dtype(text, &got));
    CHECK(got == want);
  }
  for (const char* text : {"", "f64", "float", "bf", "int8", " bf16", "bf16 ", "fp8", "tf32"}) {
    INFO(text);
    DType got = DType::f16;
    CHECK_FALSE(parse_dtype(text, &got));
    CHECK(got == DType::f16);  // untouched on failure
  }
}

TEST_CASE("problem: dtype defaults to f32 and shows in describe() only when 16-bit") {
  Problem p = Problem::make(2, 8, 1024, 1024, 64, true);
  CHECK(p.dtype == DType::f32);
  CHECK(p.describe() == "B=2 H=8 Sq=1024 Sk=1024 D=64 causal");
  p.dtype = DType::bf16;
  CHECK(p.describe() == "B=2 H=8 Sq=1024 Sk=1024 D=64 causal bf16");
  p.dtype = DType::f16;
  p.causal = false;
  CHECK(p.describe() == "B=2 H=8 Sq=1024 Sk=1024 D=64 f16");
  CHECK(validate(p).is_ok());
}

TEST_CASE("problem: Q/K/V/O bytes use the element size; the unfused scores stay fp32") {
  Problem p = Problem::make(2, 4, 128, 256, 64, false, Layout::BHSD, 2);
  const double fused32 = attention_bytes_fused(p), unfused32 = attention_bytes_unfused(p);
  const double buffers32 = attention_buffer_bytes(p);
  CHECK(fused32 == 4.0 * 64 * (2.0 * 2 * 4 * 128 + 2.0 * 2 * 2 * 256));
  for (DType t : kSixteenBit) {
    p.dtype = t;
    CHECK(attention_bytes_fused(p) == 2.0 * 64 * (2.0 * 2 * 4 * 128 + 2.0 * 2 * 2 * 256));
    CHECK(attention_bytes_fused(p) == fused32 / 2);
    CHECK(attention_buffer_bytes(p) == buffers32 / 2);
    // S written, read, P written, read: 4 x Sq x Sk values per head of 4 bytes, any dtype.
    CHECK(attention_bytes_unfused(p) - attention_bytes_fused(p) ==
          unfused32 - fused32);
    CHECK(unfused32 - fused32 == 4.0 * 2 * 4 * 4 * 128 * 256);
    CHECK(attention_flops(p) == 4.0 * 2 * 4 * 128 * 256 * 64);
  }
}

TEST_CASE("problem: rows_aligned16 counts strides in bytes of the element type") {
  alignas(16) static uint16_t buffer[16];
  const Problem p = Problem::make(2, 3, 5, 5, 64);  // strides multiples of 64 elements
  CHECK(rows_aligned16(buffer, p.q, 2));
  CHECK_FALSE(rows_aligned16(buffer + 1, p.q, 2));  // base 2 bytes off
  Strides s = p.q;
  s.seq = 68;  // 136 bytes in halves: not a multiple of 16, though 68 floats would be
  CHECK_FALSE(rows_aligned16(buffer, s, 2));
  CHECK(rows_aligned16(buffer, s, 4));
  s.seq = 72;  // 144 bytes in halves: whole 16-byte pieces
  CHECK(rows_aligned16(buffer, s, 2));
  s.head = 3 * 72 + 4;
  CHECK_FALSE(rows_aligned16(buffer, s, 2));
  s = p.q;
  s.batch = 12;
  CHECK_FALSE(rows_aligned16(buffer, s, 2));
  CHECK(rows_aligned16(buffer, s, 4));
  // The float overload is the 4-byte case.
  alignas(16) static float floats[8];
  Strides odd = p.q;
  odd.seq = 66;
  CHECK(rows_aligned16(floats, p.q) == rows_aligned16(static_cast<const void*>(floats), p.q, 4));
  CHECK(rows_aligned16(floats, odd) == rows_aligned16(static_cast<const void*>(floats), odd, 4));
  CHECK_FALSE(rows_aligned16(floats, odd));
}

TEST_CASE("random_inputs: f32 values unchanged; 16-bit values are exactly representable") {
  const Problem p = Problem::make(1, 2, 3, 5, 4);
  const Inputs f32 = random_inputs(p, 42);
  // Bit patterns recorded before 16-bit types existed: fp32 inputs (and every seed printed by
  // an earlier run) must reproduce exactly.
  CHECK(bits_of(f32.q[0]) == 0x3ED07446u);
  CHECK(bits_of(f32.q[3]) == 0xBEEE9B4Cu);
  CHECK(bits_of(f32.q.back()) == 0xBEB839EFu);
  CHECK(bits_of(f32.k[1]) == 0x3D8A32F6u);
  CHECK(bits_of(f32.k.back()) == 0xBE6418B0u);
  CHECK(bits_of(f32.v[2]) == 0x3CD25564u);
  CHECK(bits_of(f32.v.back()) == 0x3E9A80B5u);
  // And the same values as the generator gives directly (the streams seed*3 + 0, 1, 2).
  std::vector<float> q(f32.q.size()), k(f32.k.size()), v(f32.v.size());
  fill_uniform(q, 42 * 3 + 0);
  fill_uniform(k, 42 * 3 + 1);
  fill_uniform(v, 42 * 3 + 2);
  CHECK(f32.q == q);
  CHECK(f32.k == k);
  CHECK(f32.v == v);

  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    Problem p16 = Problem::make(2, 3, 17, 33, 16);
    p16.dtype = t;
    const Inputs in = random_inputs(p16, 7, 2.0f);
    Problem p32 = p16;
    p32.dtype = DType::f32;
    const Inputs wide = random_inputs(p32, 7, 2.0f);
    int changed = 0;
    for (auto [got, from] : {std::pair{&in.q, &wide.q}, {&in.k, &wide.k}, {&in.v, &wide.v}}) {
      REQUIRE(got->size() == from->size());
      for (size_t i = 0; i < got->size(); ++i) {
        // The 16-bit value nearest the fp32 draw, and representable: it survives a round trip.
        CHECK(bits_of((*got)[i]) == bits_of(round_to_dtype((*from)[i], t)));
        CHECK(from_bits16(to_bits16((*got)[i], t), t) == (*got)[i]);
        changed += (*got)[i] != (*from)[i];
      }
    }
    CHECK(changed > 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Tolerances

TEST_CASE("compare: the default tolerance depends on the dtype") {
  CHECK(default_tolerance(DType::f32) == kFp32Tolerance);
  CHECK(kFp32Tolerance == 1e-4);
  CHECK(default_tolerance(DType::f16) == 2e-3);
  CHECK(default_tolerance(DType::bf16) == 1e-2);
  Problem p = Problem::make(1, 2, 6, 6, 8);
  const Inputs in = random_inputs(p, 3);
  const std::vector<double> want = reference_attention(p, in.q, in.k, in.v);
  const std::vector<float> got(want.begin(), want.end());
  CHECK(compare_output(p, got, want).tolerance == kFp32Tolerance);
  CHECK(compare_output(p, got, want, 0.5).tolerance == 0.5);  // an explicit one wins
  p.dtype = DType::bf16;
  CHECK(compare_output(p, got, want).tolerance == kBf16Tolerance);
  CHECK(compare_output(p, got, want, kDtypeTolerance).tolerance == kBf16Tolerance);
  p.dtype = DType::f16;
  CHECK(compare_output(p, got, want).tolerance == kFp16Tolerance);
  CHECK(bad_element_factor(kFp32Tolerance) == doctest::Approx(1e-2));  // as before 16-bit
  CHECK(bad_element_factor(kBf16Tolerance) == doctest::Approx(0.1));
}

TEST_CASE("compare: bf16 output rounding passes bf16 with no bad elements; a wrong row does not") {
  Problem p = Problem::make(1, 2, 64, 64, 32);
  p.dtype = DType::bf16;
  const Inputs in = random_inputs(p, 11);
  const std::vector<double> want = reference_attention(p, in.q, in.k, in.v);
  std::vector<float> got(want.begin(), want.end());
  round_to_dtype(got, DType::bf16);  // what storing O as bf16 does to a perfect result
  const Comparison ok = compare_output(p, got, want);
  CHECK(ok.passed());
  CHECK(ok.rel_l2_error > 1e-4);  // would fail the fp32 tolerance
  CHECK(ok.bad_elements == 0);
  Problem as_f32 = p;
  as_f32.dtype = DType::f32;
  CHECK_FALSE(compare_output(as_f32, got, want).passed());

  // One query row 50% too large (a missing rescale on one row, say): fails and is located,
  // though each element is off by less than its own size.
  std::vector<float> wrong = got;
  const int64_t row = Problem::offset(p.o, 0, 1, 17);
  for (int d = 0; d < p.head_dim; ++d) wrong[size_t(row + d)] *= 1.5f;
  const Comparison bad = compare_output(p, wrong, want);
  CHECK_FALSE(bad.passed());
  CHECK(bad.bad_rows == 1);
  CHECK(bad.first_bad.h == 1);
  CHECK(bad.first_bad.i == 17);
}

// ---------------------------------------------------------------------------------------------
// Kernels and dtypes

namespace {

int fake_calls = 0;

Status supports_anything(const Problem&) { return Status::ok(); }

Status fake_forward(const Problem&, const float*, const float*, const float*, float*,
                    cudaStream_t) {
  ++fake_calls;
  return Status::ok();
}

Status fake_forward16(const Problem&, const void*, const void*, const void*, void*,
                      cudaStream_t) {
  ++fake_calls;
  return Status::ok();
}

// Copies V into O on the device (a dense problem with seq_q == seq_k and one K/V head per
// head, so the two have the same layout): the upload, poison and download paths, no kernel.
Status copy_v_forward16(const Problem& p, const void*, const void*, const void* v, void* o,
                        cudaStream_t stream) {
  ATTN_CUDA_RETURN(cudaMemcpyAsync(o, v, size_t(p.o_elements()) * 2, cudaMemcpyDeviceToDevice,
                                   stream));
  return Status::ok();
}

// The same, one element too many: a write into the guard after O.
Status overrun_forward16(const Problem& p, const void*, const void*, const void* v, void* o,
                         cudaStream_t stream) {
  // O = V (the shapes here are equal), then one element more, past the end of O: the copy
  // reads only inside V, so the one write past O is the only fault.
  ATTN_CUDA_RETURN(cudaMemcpyAsync(o, v, size_t(p.o_elements()) * 2, cudaMemcpyDeviceToDevice,
                                   stream));
  ATTN_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint16_t*>(o) + p.o_elements(), v, 2,
                                   cudaMemcpyDeviceToDevice, stream));
  return Status::ok();
}

Kernel make_kernel(int module, Backend backend, ForwardFn forward, Forward16Fn forward16) {
  Kernel k;
  k.module = module;
  k.name = "fake";
  k.backend = backend;
  k.supports = supports_anything;
  k.forward = forward;
  k.forward16 = forward16;
  return k;
}

}  // namespace

TEST_CASE("kernel: accepts() and native_dtype() follow the entry points it has") {
  const Kernel f32_only = make_kernel(3, Backend::gpu, fake_forward, nullptr);
  CHECK(f32_only.accepts(DType::f32));
  CHECK_FALSE(f32_only.accepts(DType::f16));
  CHECK_FALSE(f32_only.accepts(DType::bf16));
  CHECK(f32_only.native_dtype() == DType::f32);
  const Kernel sixteen = make_kernel(7, Backend::gpu, nullptr, fake_forward16);
  CHECK_FALSE(sixteen.accepts(DType::f32));
  CHECK(sixteen.accepts(DType::f16));
  CHECK(sixteen.accepts(DType::bf16));
  CHECK(sixteen.native_dtype() == DType::bf16);
  const Kernel both = make_kernel(9, Backend::gpu, fake_forward, fake_forward16);
  CHECK(both.accepts(DType::f32));
  CHECK(both.accepts(DType::bf16));
  CHECK(both.native_dtype() == DType::f32);
  CHECK(supports_dtype(both, DType::f16).is_ok());
}

TEST_CASE("run_kernel: a module refuses a dtype it does not take, in one line, before running") {
  fake_calls = 0;
  Problem p = Problem::make(1, 2, 8, 8, 16);
  const Inputs in = random_inputs(p, 1);
  std::vector<float> out;

  // An fp32 module (CPU, so this would run here) asked for bf16.
  const Kernel f32_only = make_kernel(3, Backend::cpu, fake_forward, nullptr);
  p.dtype = DType::bf16;
  const Status refused = run_kernel(f32_only, p, in, out);
  CHECK_FALSE(refused.is_ok());
  CHECK(refused.message().find("module 03 computes in f32; --dtype bf16 needs a 16-bit module (") ==
        0);
  CHECK(refused.message().find('\n') == std::string::npos);
  p.dtype = DType::f16;
  CHECK(run_kernel(f32_only, p, in, out).message().find("--dtype f16 needs a 16-bit") !=
        std::string::npos);
  const CheckResult checked = check_kernel(f32_only, p, in);
  CHECK_FALSE(checked.status.is_ok());
  CHECK_FALSE(checked.passed());

  // A 16-bit module asked for f32.
  const Kernel sixteen = make_kernel(7, Backend::gpu, nullptr, fake_forward16);
  p.dtype = DType::f32;
  CHECK(run_kernel(sixteen, p, in, out).message() ==
        "module 07 takes f16 or bf16 tensors (--dtype bf16 or f16), not f32");
  CHECK(fake_calls == 0);  // neither entry point was called

  // The message names the 16-bit modules that are registered.
  register_kernel(make_kernel(97, Backend::gpu, nullptr, fake_forward16));
  p.dtype = DType::bf16;
  CHECK(supports_dtype(f32_only, DType::bf16).message().find("(97 fake)") != std::string::npos);

  // The accepted type runs, with the tolerance of its dtype.
  p.dtype = DType::f32;
  const CheckResult r = check_kernel(f32_only, p, in);
  CHECK(r.status.is_ok());
  CHECK(fake_calls == 1);
  CHECK(r.comparison.tolerance == kFp32Tolerance);
}

TEST_CASE("run_kernel on a GPU: 16-bit upload and download, poison and guard") {
  if (cuda_device_count() == 0) {
    MESSAGE("skipped without a GPU: " << no_device_reason());
    return;
  }
  for (DType t : kSixteenBit) {
    INFO(dtype_name(t));
    Problem p = Problem::make(2, 3, 19, 19, 24);
    p.dtype = t;
    const Inputs in = random_inputs(p, 5);
    std::vector<float> out;
    int64_t guard = -1;
    // V's 16-bit values come back bit for bit: the round trip through the device is exact.
    const Kernel copy = make_kernel(7, Backend::gpu, nullptr, copy_v_forward16);
    REQUIRE(run_kernel(copy, p, in, out, &guard).is_ok());
    REQUIRE(out.size() == in.v.size());
    CHECK(out == in.v);
    CHECK(guard == 0);
    // Nothing written: every element reads back as the float poison.
    const Kernel idle = make_kernel(7, Backend::gpu, nullptr, fake_forward16);
    REQUIRE(run_kernel(idle, p, in, out, &guard).is_ok());
    int64_t unwritten = 0;
    for (float x : out) unwritten += is_poison(x);
    CHECK(unwritten == p.o_elements());
    CHECK(guard == 0);
    const CheckResult r = check_kernel(idle, p, in);
    CHECK(r.comparison.unwritten == p.o_elements());
    CHECK(r.comparison.tolerance == default_tolerance(t));
    // One element past the end of O lands in the guard.
    const Kernel overrun = make_kernel(7, Backend::gpu, nullptr, overrun_forward16);
    REQUIRE(run_kernel(overrun, p, in, out, &guard).is_ok());
    CHECK(guard == 1);
  }
}
