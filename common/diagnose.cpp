#include "common/diagnose.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "common/reference.h"

namespace attn {

namespace {

enum class RowState { ok, unwritten, nan, wrong };

RowState row_state(const Problem& p, const CheckResult& r, int b, int h, int i) {
  const int64_t row = Problem::offset(p.o, b, h, i);
  const double far = bad_element_factor(r.comparison.tolerance);
  bool any_unwritten = false, any_nan = false, any_wrong = false;
  for (int d = 0; d < p.head_dim; ++d) {
    const float g = r.output[row + d];
    const double w = r.reference[row + d];
    if (is_poison(g)) any_unwritten = true;
    else if (!std::isfinite(g)) any_nan = true;
    else if (std::fabs(g - w) > far * (std::fabs(w) + 1.0)) any_wrong = true;
  }
  if (any_unwritten) return RowState::unwritten;
  if (any_nan) return RowState::nan;
  return any_wrong ? RowState::wrong : RowState::ok;
}

}  // namespace

bool matches(const Problem& p, const CheckResult& r, const std::vector<double>& model) {
  return compare_output(p, r.output, model, r.comparison.tolerance).passed();
}

std::vector<std::string> diagnose(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> hints;
  if (!r.status) {
    hints.push_back("the kernel did not run: " + r.status.message());
    const std::string& m = r.status.message();
    if (m.find("cudaErrorInvalidValue") != std::string::npos ||
        m.find("cudaErrorInvalidConfiguration") != std::string::npos)
      hints.push_back("a launch was refused: check the grid and block sizes (gridDim.x up to "
                      "2^31-1, gridDim.y and .z up to 65535, at most 1024 threads per block; "
                      "batch*heads here is " + std::to_string(int64_t(p.batch) * p.heads) + ")");
    return hints;
  }
  if (r.guard_writes > 0)
    hints.push_back(std::to_string(r.guard_writes) +
                    " values were written PAST THE END of O: a thread whose query is beyond "
                    "the last one must not write (bounds check: if (i < seq_q))" +
                    (r.guard_writes < p.head_dim
                         ? "; fewer values than one row holds, so maybe columns >= head_dim "
                           "were stored (a tile padded past head_dim)"
                         : ""));
  const Comparison& c = r.comparison;
  if (c.passed()) return hints;

  // Where are the unwritten / NaN rows? The lowest (b, h) pair and query index of each kind.
  int64_t unwritten_rows = 0, nan_rows = 0;
  int first_unwritten_i = p.seq_q, first_unwritten_bh = -1, first_nan_i = -1;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const RowState s = row_state(p, r, b, h, i);
        if (s == RowState::unwritten) {
          ++unwritten_rows;
          first_unwritten_i = std::min(first_unwritten_i, i);
          if (first_unwritten_bh < 0) first_unwritten_bh = b * p.heads + h;
        } else if (s == RowState::nan) {
          ++nan_rows;
          if (first_nan_i < 0) first_nan_i = i;
        }
      }
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  if (unwritten_rows == rows) {
    hints.push_back(r.backend == Backend::gpu
                        ? "no output was written at all: was the kernel launched, with a valid "
                          "configuration? (check cudaGetLastError() after the launch)"
                        : "no output was written at all: does forward() store into o?");
  } else if (unwritten_rows > 0 && first_unwritten_i > 0) {
    hints.push_back("outputs for queries >= " + std::to_string(first_unwritten_i) +
                    " were never written: the grid (or a loop over queries) covers too few "
                    "queries; round the block count up: (seq_q + block - 1) / block");
  } else if (unwritten_rows > 0) {
    const int b = first_unwritten_bh / p.heads, h = first_unwritten_bh % p.heads;
    hints.push_back("(batch " + std::to_string(b) + ", head " + std::to_string(h) +
                    ") and later were never written: does the grid cover all batch*heads = " +
                    std::to_string(int64_t(p.batch) * p.heads) +
                    " pairs? grid.y and grid.z stop at 65535, grid.x goes to 2^31-1");
  }
  if (nan_rows > 0) {
    const bool masked = p.first_masked_key(first_nan_i) == 0;
    hints.push_back(
        "query " + std::to_string(first_nan_i) + " gives NaN/Inf: " +
        (masked ? "it sees no key under the causal mask, so its softmax sums to 0; such a row "
                  "must output 0, not 0/0"
                : "exp overflowed or divided 0/0; subtract the row max before exp (stable "
                  "softmax)"));
  }
  if (unwritten_rows == 0 && nan_rows == 0) {
    // Finite but wrong: try the classic bugs as alternative references.
    if (p.scale == 0.0f && p.head_dim > 1) {
      Problem unscaled = p;
      unscaled.scale = 1.0f;
      if (matches(p, r, reference_attention(unscaled, in.q, in.k, in.v)))
        hints.push_back("the output matches attention WITHOUT the 1/sqrt(head_dim) scale: "
                        "multiply the scores by p.softmax_scale()");
    }
    if (p.causal) {
      Problem unmasked = p;
      unmasked.causal = false;
      if (matches(p, r, reference_attention(unmasked, in.q, in.k, in.v)))
        hints.push_back("the output matches attention WITHOUT the causal mask: query i may see "
                        "only keys j <= i + seq_k - seq_q");
    }
    if (c.bad_elements == 0) {
      // Over the tolerance in relative L2, yet no element is far off: a small error spread
      // over every output, not a wrong index, a missing tile or a lost row.
      char largest[32];
      std::snprintf(largest, sizeof largest, "%.2e", c.max_abs_error);
      hints.push_back("no single element is far off its reference: the error is small and "
                      "spread over all " + std::to_string(c.elements) +
                      " outputs (largest absolute error " + largest +
                      "), a precision problem (an operand rounded to too few bits, an "
                      "accumulation in a narrow type), not a wrong index or a missing tile");
      return hints;
    }
    hints.push_back("first wrong element " + c.first_bad.str() + ": got " +
                    std::to_string(c.first_bad_got) + ", expected " +
                    std::to_string(c.first_bad_want) + "; wrong rows: " +
                    std::to_string(c.bad_rows) + " of " + std::to_string(c.rows) +
                    (c.bad_rows > 0 ? " (queries " + std::to_string(c.first_bad_query) + ".." +
                                          std::to_string(c.last_bad_query) + ")"
                                    : ""));
  }
  return hints;
}

}  // namespace attn
