#include "common/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace attn {

bool is_poison(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == kPoisonBits;
}

float poison_value() {
  float x;
  std::memcpy(&x, &kPoisonBits, sizeof x);
  return x;
}

double default_tolerance(DType t) {
  switch (t) {
    case DType::f16: return kFp16Tolerance;
    case DType::bf16: return kBf16Tolerance;
    case DType::f32: break;
  }
  return kFp32Tolerance;
}

double bad_element_factor(double tolerance) {
  // 100x the tolerance: loose enough that rounding never trips it, tight enough to point at
  // the rows a bug touched. For fp32 (1e-4) that is 1e-2. Capped at 0.1 so a 16-bit check
  // still locates a bug: bf16's 1e-2 would give 1.0, "off by the element's own size plus the
  // RMS", which a wrong mask (an average over the wrong keys) does not always reach. 10% is
  // still far above the rounding of a correct kernel (bf16 keeps 8 significant bits: 0.4%).
  return std::min(100.0 * tolerance, 0.1);
}

std::string Index4::str() const {
  std::ostringstream s;
  s << "(b=" << b << ", h=" << h << ", i=" << i << ", d=" << d << ")";
  return s.str();
}

std::string Comparison::summary() const {
  char line[256];
  std::snprintf(line, sizeof line, "%s  max abs err %.3e  rel err %.3e (tolerance %.0e)",
                passed() ? "PASS" : "FAIL", max_abs_error, rel_l2_error, tolerance);
  std::string s = line;
  if (nan_count > 0) s += "  NaN/Inf: " + std::to_string(nan_count);
  if (unwritten > 0) s += " (never written: " + std::to_string(unwritten) + ")";
  return s;
}

Comparison compare_output(const Problem& p, const std::vector<float>& got,
                          const std::vector<double>& want, double tolerance) {
  Comparison c;
  c.tolerance = tolerance < 0.0 ? default_tolerance(p.dtype) : tolerance;
  // Pass 1: the reference's RMS, the scale for "far off" below.
  double ref_sq = 0.0;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int64_t row = Problem::offset(p.o, b, h, i);
        for (int d = 0; d < p.head_dim; ++d) ref_sq += want[row + d] * want[row + d];
      }
  c.elements = int64_t(p.batch) * p.heads * p.seq_q * p.head_dim;
  c.rows = int64_t(p.batch) * p.heads * p.seq_q;
  const double rms = std::sqrt(ref_sq / double(c.elements));
  // An element is "bad" when it is not finite or off by more than bad_element_factor relative
  // to its own size plus the tensor's RMS (the RMS keeps near-zero entries from counting).
  const double far = bad_element_factor(c.tolerance);

  double err_sq = 0.0;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int64_t row = Problem::offset(p.o, b, h, i);
        bool row_bad = false;
        for (int d = 0; d < p.head_dim; ++d) {
          const float g = got[row + d];
          const double w = want[row + d];
          bool bad;
          if (!std::isfinite(g)) {
            ++c.nan_count;
            if (is_poison(g)) ++c.unwritten;
            bad = true;
          } else {
            const double err = std::fabs(double(g) - w);
            err_sq += err * err;
            c.max_abs_error = std::max(c.max_abs_error, err);
            bad = err > far * (std::fabs(w) + rms);
          }
          if (bad) {
            if (c.bad_elements++ == 0) {
              c.first_bad = {b, h, i, d};
              c.first_bad_got = g;
              c.first_bad_want = w;
            }
            row_bad = true;
          }
        }
        if (row_bad) {
          ++c.bad_rows;
          if (c.first_bad_query < 0 || i < c.first_bad_query) c.first_bad_query = i;
          c.last_bad_query = std::max(c.last_bad_query, i);
        }
      }
  if (c.nan_count > 0) {
    c.rel_l2_error = INFINITY;
    c.max_abs_error = INFINITY;
  } else {
    c.rel_l2_error = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  }
  return c;
}

}  // namespace attn
