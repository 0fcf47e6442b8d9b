// Comparing a kernel's output with the double-precision reference.
//
// The pass criterion is the relative L2 error ||out - ref|| / ||ref|| (robust to a few
// near-zero reference entries, unlike a per-element relative error), and NaN/Inf never
// pass. Beside it we collect what a learner needs to find the bug: the max absolute
// error, how many outputs are NaN, how many were never written (still hold the poison
// pattern), and the first wrong element as (b, h, i, d).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/poison.h"
#include "common/problem.h"

namespace attn {

// Whether x holds the bit pattern DeviceBuffer::poison() writes (kPoisonBits, common/poison.h).
bool is_poison(float x);
float poison_value();  // the float whose bits are kPoisonBits

// Default tolerance for fp32 kernels (relative L2 error).
constexpr double kFp32Tolerance = 1e-4;

// Default tolerances for 16-bit kernels (module 07 on: f16/bf16 tensors, fp32 accumulation).
// The reference runs on the same 16-bit inputs (random_inputs rounds Q, K, V), so input
// rounding is not counted; what remains is the kernel's own rounding: it rounds P to 16 bits
// before P V (the tensor cores take 16-bit operands) and rounds O on the store. Unit roundoff
// is 2^-11 = 4.9e-4 in f16 and 2^-8 = 3.9e-3 in bf16 (relative, per rounding). A correct
// FlashAttention-2-style kernel measured about 2.9e-4 (f16) and 2.3-2.4e-3 (bf16) relative L2
// error on random inputs (H100), so these leave a 4-7x margin, while a real bug (a wrong
// mask, a missing rescale, a wrong tile) gives 1e-1 or more.
constexpr double kFp16Tolerance = 2e-3;
constexpr double kBf16Tolerance = 1e-2;

// kFp32Tolerance, kFp16Tolerance or kBf16Tolerance.
double default_tolerance(DType t);

// Pass this (or any negative tolerance; it is the default of compare_output and check_kernel)
// to get default_tolerance(p.dtype) for the problem being compared.
constexpr double kDtypeTolerance = -1.0;

struct Index4 {
  int b = -1, h = -1, i = -1, d = -1;
  std::string str() const;  // "(b=0, h=3, i=17, d=5)"
};

struct Comparison {
  double max_abs_error = 0.0;
  double rel_l2_error = 0.0;
  double tolerance = kFp32Tolerance;  // the one used (never kDtypeTolerance)
  int64_t elements = 0;
  int64_t nan_count = 0;       // NaN or Inf outputs, including unwritten ones
  int64_t unwritten = 0;       // outputs that still hold the poison pattern
  int64_t bad_elements = 0;    // non-finite or far off (see `is_bad` in compare.cpp)
  Index4 first_bad;            // first bad element in (b, h, i, d) order
  float first_bad_got = 0.0f;
  double first_bad_want = 0.0;
  // Query rows (flattened over b, h) that hold at least one bad element, first and last.
  int first_bad_query = -1, last_bad_query = -1;  // query index i within its head
  int64_t bad_rows = 0, rows = 0;

  bool passed() const { return nan_count == 0 && rel_l2_error < tolerance; }
  // "PASS  max abs err 1.2e-07  rel err 3.4e-08" or the FAIL equivalent with counts.
  std::string summary() const;
};

// An element is "far off" (counted in bad_elements, located by first_bad) when it is not
// finite or |got - want| > bad_element_factor(tolerance) * (|want| + RMS of want): 100x the
// tolerance, at most 0.1 (see compare.cpp).
double bad_element_factor(double tolerance);

// `tolerance` kDtypeTolerance means default_tolerance(p.dtype).
Comparison compare_output(const Problem& p, const std::vector<float>& got,
                          const std::vector<double>& want, double tolerance = kDtypeTolerance);

}  // namespace attn
