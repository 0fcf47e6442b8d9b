// Grader for module 04 (GPU): the causal mask on the FlashAttention forward of module 03.
// Built twice: grade_04 (exercise), check_04 (solution). Without a GPU it exits 77 (skipped).
//
// Causal problems with seq_q == seq_k, seq_q < seq_k and seq_q > seq_k (rows that see no key
// must be exactly 0), every head-dim instance, and the non-causal path for regressions. When
// a causal check fails with finite outputs, the grader recomputes the output with the
// classic mask mistakes (top-left alignment, off by one) and names the one that matches.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/compare.h"
#include "modules/04_causal/causal.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(4, testing::impl_under_test()); }

const char* kMask = "modules/04_causal/README.md, section 1 (the mask, bottom-right aligned)";
const char* kTiles = "modules/04_causal/README.md, section 2 (full, diagonal and skipped tiles)";
const char* kOrder = "modules/04_causal/README.md, section 3 (heaviest query blocks first)";
const char* kModule03 = "modules/03_online_softmax/README.md (the non-causal kernel)";

// Attention in double where query i sees keys [0, visible(i)): the reference with another
// mask. Fully masked rows are 0, as in the reference.
template <class Visible>
std::vector<double> masked_reference(const Problem& p, const Inputs& in, Visible visible) {
  std::vector<double> out(size_t(p.o_elements()), 0.0);
  const double scale = p.softmax_scale();
  std::vector<double> s(static_cast<size_t>(p.seq_k));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int n = std::clamp(visible(i), 0, p.seq_k);
        double* o = out.data() + Problem::offset(p.o, b, h, i);
        if (n == 0) continue;
        const float* q = in.q.data() + Problem::offset(p.q, b, h, i);
        double row_max = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; ++j) {
          const float* k = in.k.data() + Problem::offset(p.k, b, p.kv_head(h), j);
          double dot = 0.0;
          for (int c = 0; c < p.head_dim; ++c) dot += double(q[c]) * k[c];
          s[size_t(j)] = scale * dot;
          row_max = std::max(row_max, s[size_t(j)]);
        }
        for (int j = 0; j < n; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - row_max));
        for (int j = 0; j < n; ++j) {
          const float* v = in.v.data() + Problem::offset(p.v, b, p.kv_head(h), j);
          for (int c = 0; c < p.head_dim; ++c) o[c] += s[size_t(j)] / sum * v[c];
        }
      }
  return out;
}

using testing::matches;  // tests/support.h

// Finite but wrong outputs of a causal problem: which mask was applied instead?
std::vector<std::string> mask_hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> hints;
  if (!p.causal || !testing::models_affordable(p)) return hints;
  // No mask at all is diagnose()'s hint; the models below would only echo it.
  if (matches(p, r, masked_reference(p, in, [&](int) { return p.seq_k; }))) return hints;
  const int shift = p.seq_k - p.seq_q;
  if (shift != 0 && matches(p, r, masked_reference(p, in, [](int i) { return i + 1; })))
    hints.push_back("the output matches a causal mask aligned TOP-LEFT (query i sees keys "
                    "j <= i): with seq_q != seq_k the mask is aligned bottom-right, query i "
                    "sees keys j <= i + seq_k - seq_q");
  if (matches(p, r, masked_reference(p, in, [&](int i) { return i + shift; })))
    hints.push_back("the output matches a mask that hides the diagonal: query i must see key "
                    "j = i + seq_k - seq_q too (j <= i + shift, not j < i + shift)");
  if (matches(p, r, masked_reference(p, in, [&](int i) { return i + shift + 2; })))
    hints.push_back("the output matches a mask that lets each query see one key too many "
                    "(j <= i + shift + 1): an off-by-one in the first masked key");
  return hints;
}

testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  o.extra_hints = mask_hints;
  return o;
}

Problem causal(int batch, int heads, int seq_q, int seq_k, int head_dim,
               Layout layout = Layout::BHSD) {
  return Problem::make(batch, heads, seq_q, seq_k, head_dim, /*causal=*/true, layout);
}

}  // namespace

TEST_CASE("causal, one small head") {
  testing::check_against_reference(kernel(), causal(1, 1, 8, 8, 16), lesson(kMask));
}

TEST_CASE("causal, seq_q == seq_k: 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000") {
  for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
    testing::check_against_reference(kernel(), causal(1, 2, n, n, 64), lesson(kTiles));
}

TEST_CASE("causal, a long sequence: 4097") {
  testing::check_against_reference(kernel(), causal(1, 1, 4097, 4097, 64), lesson(kTiles));
}

TEST_CASE("causal, seq_q < seq_k: the mask is aligned bottom-right") {
  // Query i sits at position i + seq_k - seq_q: the last query sees every key.
  for (auto [sq, sk] : {std::pair{17, 1000}, {1, 4097}, {100, 129}, {65, 300}})
    testing::check_against_reference(kernel(), causal(1, 2, sq, sk, 64), lesson(kMask));
}

TEST_CASE("causal, seq_q > seq_k: the first seq_q - seq_k rows see no key and are 0") {
  // A row that sees no key has l = 0: its output must be written, and be 0, not 0/0.
  for (auto [sq, sk] : {std::pair{1000, 17}, {65, 2}, {4097, 1}, {300, 100}})
    testing::check_against_reference(kernel(), causal(1, 2, sq, sk, 64), lesson(kMask));
}

TEST_CASE("causal, a query block that straddles the first row that sees a key") {
  // seq_q - seq_k = 40 rows see nothing; blocks of 32, 64 or 128 queries hold both kinds.
  for (int d : {16, 64, 128})
    testing::check_against_reference(kernel(), causal(2, 2, 140, 100, d), lesson(kMask));
}

TEST_CASE("causal, head dims 16, 59, 64, 80, 96, 128") {
  for (int d : {16, 59, 64, 80, 96, 128}) {
    testing::check_against_reference(kernel(), causal(1, 2, 300, 300, d), lesson(kTiles));
    testing::check_against_reference(kernel(), causal(1, 2, 97, 250, d), lesson(kMask));
    testing::check_against_reference(kernel(), causal(1, 2, 250, 97, d), lesson(kMask));
  }
}

TEST_CASE("causal, several batches and heads: every block finds its (batch, head, queries)") {
  // Heaviest-first order maps blockIdx.x to (query block, head) differently from module 03.
  testing::check_against_reference(kernel(), causal(3, 5, 300, 280, 64), lesson(kOrder));
}

TEST_CASE("causal, large logits") {
  testing::CheckOptions o = lesson(kMask);
  o.range = 30.0f;
  for (auto [sq, sk] : {std::pair{200, 200}, {200, 90}})
    testing::check_against_reference(kernel(), causal(1, 2, sq, sk, 64), o);
}

TEST_CASE("causal, BSHD layout (heads interleaved per token)") {
  for (auto [sq, sk] : {std::pair{65, 33}, {33, 65}})
    testing::check_against_reference(kernel(), causal(2, 4, sq, sk, 64, Layout::BSHD),
                                     lesson(kOrder));
}

TEST_CASE("causal, padded rows: O's row stride is larger than head_dim") {
  Problem p = causal(2, 3, 37, 41, 20);
  p.o = {3 * 37 * 24, 37 * 24, 24};  // 4 unused floats after each output row
  p.q = {3 * 37 * 21, 37 * 21, 21};  // and 1 after each query row
  testing::check_against_reference(kernel(), p, lesson(kMask));
}

TEST_CASE("causal, grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  testing::check_against_reference(kernel(), testing::grid_limit_problem(3, 5, 16, /*causal=*/true), lesson(kOrder));
  testing::check_against_reference(kernel(), testing::grid_limit_problem(5, 3, 16, /*causal=*/true), lesson(kOrder));
}

TEST_CASE("non-causal problems still take module 03's path") {
  testing::CheckOptions o = lesson(kModule03);
  for (auto [sq, sk] : {std::pair{1, 1}, {129, 129}, {17, 1000}, {1000, 17}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64), o);
  for (int d : {1, 59, 96, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 65, 70, d), o);
  testing::check_against_reference(kernel(), Problem::make(2, 4, 65, 33, 64, false, Layout::BSHD),
                                   o);
  if (!testing::skip_grid_limits_under_racecheck())
    testing::check_against_reference(kernel(), testing::grid_limit_problem(3, 5, 16), o);
}

TEST_CASE("supports causal and non-causal up to head_dim 128; refuses wider heads") {
  CHECK(kernel().supports(causal(1, 1, 4, 4, 128)).is_ok());
  CHECK(kernel().supports(Problem::make(1, 1, 4, 4, 128)).is_ok());
  const Status wide = kernel().supports(causal(1, 1, 4, 4, 256));
  CHECK_FALSE(wide.is_ok());
  CHECK(wide.message().find("head_dim") != std::string::npos);
}

// Going further (lesson 04, section 9): `./course grade 04 --extra`. The shapes a change of
// the block order or of the tile classification breaks first; the solution passes them.
TEST_SUITE("extra") {
  TEST_CASE("extra: another block order: many heads and query blocks, causal and not") {
    // Every block must still find its (batch, head, query block) whatever order the grid
    // enumerates them in.
    for (int d : {64, 128})
      for (auto [sq, sk] : {std::pair{1000, 1000}, {1000, 700}, {700, 1000}}) {
        testing::check_against_reference(kernel(), causal(2, 3, sq, sk, d), lesson(kOrder));
        testing::check_against_reference(kernel(), Problem::make(2, 3, sq, sk, d), lesson(kOrder));
      }
  }

  TEST_CASE("extra: the diagonal at every offset against the tiles: seq_k - seq_q = -17 .. 17") {
    // A finer classification of the tiles (e.g. skipping the mask for rows whose whole tile
    // is visible) must keep every offset of the diagonal right.
    for (int shift = -17; shift <= 17; shift += 3)
      for (int d : {32, 128})
        testing::check_against_reference(kernel(), causal(1, 2, 200, 200 + shift, d),
                                         lesson(kTiles));
  }

  TEST_CASE("extra: rows that see no key in every position of a block") {
    for (int d : {16, 64, 96})
      for (int sk : {1, 15, 16, 17, 100})
        testing::check_against_reference(kernel(), causal(1, 2, 257, sk, d), lesson(kMask));
  }
}
