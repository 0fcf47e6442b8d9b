// Small checks the CPU tests of the harness share (header-only, doctest).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/status.h"

namespace attn::testing {

// Fails unless `s` is an error of one line that contains `expected`.
inline void expect_error(const Status& s, const std::string& expected) {
  INFO("message: " << s.message());
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find(expected) != std::string::npos);
  CHECK(s.message().find('\n') == std::string::npos);
}

inline double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace attn::testing
