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

#include "common/problem.h"

namespace attn {

// The bit pattern DeviceBuffer::poison() writes (a NaN no arithmetic produces).
constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;
bool is_poison(float x);
float poison_value();  // the float whose bits are kPoisonBits

// Default tolerance for fp32 kernels (relative L2 error).
constexpr double kFp32Tolerance = 1e-4;

struct Index4 {
  int b = -1, h = -1, i = -1, d = -1;
  std::string str() const;  // "(b=0, h=3, i=17, d=5)"
};

struct Comparison {
  double max_abs_error = 0.0;
  double rel_l2_error = 0.0;
  double tolerance = kFp32Tolerance;
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

Comparison compare_output(const Problem& p, const std::vector<float>& got,
                          const std::vector<double>& want, double tolerance = kFp32Tolerance);

}  // namespace attn
