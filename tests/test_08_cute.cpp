// Grader for module 08 (GPU): module 07's FlashAttention-2 forward written with CuTe, f16 and
// bf16. Built twice: grade_08 (exercise), check_08 (solution). Without a GPU it exits 77
// (skipped).
//
// The checks, their shapes and the tolerance are module 07's (tests/tensor_core_cases.h): the
// double-precision CPU attention on the same 16-bit inputs, relative L2 error within
// default_tolerance(dtype) (2e-3 for f16, 1e-2 for bf16). The host grader
// (tests/test_08_cute_host.cpp, which `./course grade 08` runs first) checks the recipe's
// functions one at a time on the CPU; this one checks the attention they make together, and
// explains a wrong output in the recipe's terms: O all 0 (P or V never reached the MMA), the
// plain average of V (the scores never did), or exactly the output the given kernel computes
// with the learner's tiled_mma, accumulator_as_a and transposed (read from the probes).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/runner.h"
#include "modules/08_cute/cute_attention.h"
#include "tests/support.h"
#include "tests/tensor_core_cases.h"

using namespace attn;

namespace {

namespace recipe = m08::ATTN_IMPL;
using recipe::Coord;

const char* kRecipe =
    "modules/08_cute/README.md, sections 2-4 (the recipe: layouts, copies, the MMA)";
const char* kLayouts = "modules/08_cute/README.md, section 2 (layouts: head_layout, shared_tile)";
const char* kTiles =
    "modules/08_cute/README.md, sections 2 and 3 (shared_tile and global_copy: padded head "
    "dims, partial tiles)";
const char* kCopies =
    "modules/08_cute/README.md, section 3 (copies: global_copy, shared_to_a/b/b_transposed, "
    "transposed)";
const char* kMma = "modules/08_cute/README.md, section 4 (the MMA: tiled_mma, accumulator_as_a)";

// ---- The recipe's tables, read from the probes ---------------------------------------------
// Three recipe functions decide which numbers the given kernel combines: tiled_mma which
// rows each warp owns (the kernel skips the key tiles and applies the masks by warp, for the
// rows 32w..32w+31), accumulator_as_a which S register each element of P's A fragment is,
// and transposed which element of the V tile each element of V^T is. The probes give each as
// a table over the kernel's tiles (128 queries x 64 keys, 64 keys x D).

constexpr int kQueries = 128, kKeys = 64, kThreads = 128;

std::string at(Coord c) { return "(" + std::to_string(c.row) + ", " + std::to_string(c.col) + ")"; }

struct RecipeTables {
  // Every table is a permutation within a thread's registers or a tile, so the kernel's
  // output can be recomputed from them (recipe_model); false when one is not.
  bool usable = true;
  std::vector<int> warp_of_row = std::vector<int>(kQueries, -1);  // tiled_mma
  std::vector<int> p_source;     // [row * 64 + k]: the S element (row * 64 + key) used as P(row, k)
  std::vector<int> v_source[2];  // D = 64, 128: [key * D + col]: the V tile element used there
  // What differs from the right table, one sentence each (empty when it is right).
  std::string wrong_rows, wrong_p, wrong_v[2];
};

RecipeTables read_tables() {
  RecipeTables t;
  auto inside = [](Coord c, int rows, int cols) {
    return c.row >= 0 && c.row < rows && c.col >= 0 && c.col < cols;
  };
  // A table that is not a permutation: no model, and one sentence for the hint.
  auto broken = [&t](std::string& wrong, const char* what) {
    t.usable = false;
    if (wrong.empty()) wrong = what;
  };

  std::vector<int> owner(kQueries * kKeys, -1);  // the thread that holds each S element
  const char* s_broken = "tiled_mma does not give each (row, key) of the 128 x 64 S tile to "
                         "exactly one thread (README section 4)";
  for (int th = 0; th < kThreads; ++th)
    for (Coord c : recipe::probe_s_coords(th)) {
      if (!inside(c, kQueries, kKeys) || owner[c.row * kKeys + c.col] >= 0) {
        broken(t.wrong_rows, s_broken);
        continue;
      }
      owner[c.row * kKeys + c.col] = th;
      int& w = t.warp_of_row[size_t(c.row)];
      if (w >= 0 && w != th / 32) t.usable = false;  // a row split over warps
      w = th / 32;
    }
  if (std::count(owner.begin(), owner.end(), -1) > 0) broken(t.wrong_rows, s_broken);
  for (int row = 0; row < kQueries && t.wrong_rows.empty(); ++row)
    if (t.warp_of_row[size_t(row)] != row / 32)
      t.wrong_rows = "tiled_mma gives row " + std::to_string(row) + " to warp " +
                     std::to_string(t.warp_of_row[size_t(row)]) +
                     ", but the kernel skips key tiles and masks keys by warp, for the rows "
                     "32w..32w+31 of warp w (README section 4)";

  t.p_source.assign(kQueries * kKeys, -1);
  const char* p_broken = "accumulator_as_a does not view each S register of a thread once, in "
                         "the shape of the MMA's A fragment (README section 4)";
  for (int th = 0; th < kThreads; ++th) {
    const std::vector<Coord> a = recipe::probe_a_coords(th), p = recipe::probe_p_coords(th);
    if (a.size() != p.size()) broken(t.wrong_p, p_broken);
    for (size_t i = 0; i < std::min(a.size(), p.size()); ++i) {
      if (!inside(a[i], kQueries, kKeys) || !inside(p[i], kQueries, kKeys) ||
          owner[p[i].row * kKeys + p[i].col] != th ||
          t.p_source[size_t(a[i].row * kKeys + a[i].col)] >= 0) {
        broken(t.wrong_p, p_broken);
        continue;
      }
      t.p_source[size_t(a[i].row * kKeys + a[i].col)] = p[i].row * kKeys + p[i].col;
      if (t.wrong_p.empty() && (p[i].row != a[i].row || p[i].col != a[i].col))
        t.wrong_p = "accumulator_as_a hands the MMA S" + at(p[i]) + " of thread " +
                    std::to_string(th) + " as P" + at(a[i]) +
                    ": P's A fragment must be S's registers in the order the MMA expects "
                    "(README section 4)";
    }
  }
  if (std::count(t.p_source.begin(), t.p_source.end(), -1) > 0) broken(t.wrong_p, p_broken);

  for (int di = 0; di < 2; ++di) {
    const int d = di == 0 ? 64 : 128;
    std::vector<int> element(kKeys * d, -1);  // the (key * d + col) stored at each offset
    for (int key = 0; key < kKeys; ++key)
      for (int col = 0; col < d; ++col) {
        const int o = recipe::probe_shared_offset(kKeys, d, key, col);
        if (o < 0 || o >= kKeys * d || element[size_t(o)] >= 0)
          broken(t.wrong_v[di], "shared_tile puts two elements of the K/V tile at one offset, "
                                "or one outside it (README section 2)");
        else element[size_t(o)] = key * d + col;
      }
    t.v_source[di].assign(kKeys * d, 0);
    for (int key = 0; key < kKeys; ++key)
      for (int col = 0; col < d; ++col) {
        const int o = recipe::probe_transposed_offset(d, col, key);
        const int source = o >= 0 && o < kKeys * d ? element[size_t(o)] : -1;
        if (source < 0) {
          broken(t.wrong_v[di], "transposed reads V^T outside the V tile (README section 3)");
          continue;
        }
        t.v_source[di][size_t(key * d + col)] = source;
        if (t.wrong_v[di].empty() && source != key * d + col)
          t.wrong_v[di] = "transposed reads V^T" + at({col, key}) + " from V's " +
                          at({source / d, source % d}) + " instead of " + at({key, col}) +
                          " (head dims padded to " + std::to_string(d) + "; README section 3)";
      }
  }
  return t;
}

const RecipeTables& tables() {
  static const RecipeTables t = read_tables();
  return t;
}

// The given kernel's arithmetic with the recipe's tables (module 07's online softmax per
// 128-query block and 64-key tile, in base 2), in double precision: O as the kernel computes
// it when these three tables are all that is wrong. With the right tables it is the attention.
std::vector<double> recipe_model(const Problem& p, const Inputs& in, const RecipeTables& t) {
  const int dh = p.head_dim, d = dh <= 64 ? 64 : 128;
  const std::vector<int>& v_source = t.v_source[d == 128];
  const double scale_log2 = p.softmax_scale() * 1.4426950408889634;  // log2(e)
  const double inf = INFINITY;
  auto visible_end = [&](int row) {  // the first key `row` does not see
    return p.causal ? std::max(0, std::min(p.seq_k, row + p.seq_k - p.seq_q + 1)) : p.seq_k;
  };
  std::vector<double> out(size_t(p.o_elements()), 0.0);
  std::vector<double> s(kQueries * kKeys), m(kQueries), l(kQueries), acc(size_t(kQueries) * dh);
  std::vector<double> vt(size_t(kKeys) * dh);  // the V tile as the MMA sees it
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int q0 = 0; q0 < p.seq_q; q0 += kQueries) {
        const float* q = in.q.data() + Problem::offset(p.q, b, h, 0);
        const float* k = in.k.data() + Problem::offset(p.k, b, p.kv_head(h), 0);
        const float* v = in.v.data() + Problem::offset(p.v, b, p.kv_head(h), 0);
        const int tiles = (visible_end(std::min(q0 + kQueries, p.seq_q) - 1) + kKeys - 1) / kKeys;
        int warp_end[kThreads / 32], warp_full[kThreads / 32];
        for (int w = 0; w < kThreads / 32; ++w) {
          const int first = q0 + 32 * w;
          warp_end[w] = first < p.seq_q ? visible_end(std::min(first + 32, p.seq_q) - 1) : 0;
          warp_full[w] = visible_end(first);
        }
        std::fill(m.begin(), m.end(), -inf);
        std::fill(l.begin(), l.end(), 0.0);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int key0 = 0; key0 < tiles * kKeys; key0 += kKeys) {
          auto active = [&](int r) { return key0 < warp_end[t.warp_of_row[size_t(r)]]; };
          for (int r = 0; r < kQueries; ++r) {  // S, the row max, P = exp2(S - max)
            if (!active(r)) continue;
            const int w = t.warp_of_row[size_t(r)], row = q0 + r;
            const bool masked = key0 + kKeys > warp_full[w] || key0 + kKeys > p.seq_k;
            double* sr = &s[size_t(r) * kKeys];
            double row_max = -inf;
            for (int j = 0; j < kKeys; ++j) {
              const int key = key0 + j;
              double x = 0.0;  // Q rows past seq_q and K rows past seq_k are zeros
              if (row < p.seq_q && key < p.seq_k)
                for (int c = 0; c < dh; ++c)
                  x += double(q[row * p.q.seq + c]) * double(k[key * p.k.seq + c]);
              if (masked && key >= visible_end(row)) x = -inf;
              sr[j] = x;
              row_max = std::max(row_max, x);
            }
            const double m_new = std::max(m[size_t(r)], row_max * scale_log2);
            const double m_ref = m_new == -inf ? 0.0 : m_new;
            const double alpha = std::exp2(m[size_t(r)] - m_ref);
            m[size_t(r)] = m_new;
            l[size_t(r)] *= alpha;
            for (int c = 0; c < dh; ++c) acc[size_t(r) * dh + c] *= alpha;
            for (int j = 0; j < kKeys; ++j) {
              sr[j] = std::exp2(sr[j] * scale_log2 - m_ref);
              l[size_t(r)] += sr[j];
            }
          }
          for (int j = 0; j < kKeys; ++j)  // V^T's elements, as transposed reads them
            for (int c = 0; c < dh; ++c) {
              const int source = v_source[size_t(j * d + c)];
              const int key = key0 + source / d, col = source % d;
              vt[size_t(j) * dh + c] =
                  key < p.seq_k && col < dh ? double(v[key * p.v.seq + col]) : 0.0;
            }
          for (int r = 0; r < kQueries; ++r) {  // O += P V, P as accumulator_as_a hands it over
            if (!active(r)) continue;
            for (int j = 0; j < kKeys; ++j) {
              const double pj = s[size_t(t.p_source[size_t(r * kKeys + j)])];
              for (int c = 0; c < dh; ++c) acc[size_t(r) * dh + c] += pj * vt[size_t(j) * dh + c];
            }
          }
        }
        for (int r = 0; r < kQueries && q0 + r < p.seq_q; ++r) {
          const double inv = l[size_t(r)] > 0.0 ? 1.0 / l[size_t(r)] : 0.0;
          double* o = out.data() + Problem::offset(p.o, b, h, q0 + r);
          for (int c = 0; c < dh; ++c) o[c] = acc[size_t(r) * dh + c] * inv;
        }
      }
  return out;
}

}  // namespace

namespace attn::tensor_core_cases {

const Kernel& kernel() { return testing::kernel_under_test(8, testing::impl_under_test()); }

const Lessons kLessons = {kRecipe, kMma, kMma, kTiles, kLayouts, kCopies};

// ---- Models of the classic bugs of this module --------------------------------------------

// Finite but wrong outputs: which recipe function reproduces them?
std::vector<std::string> hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> out = testing::operand_hints(
      p, in, r,
      "every output is 0: O += P V never accumulated anything. Look at P's and V's operands: "
      "accumulator_as_a (README section 4), transposed and shared_to_b_transposed (section 3)",
      "the output is the plain average of V: every score was 0, so S = Q K^T never reached the "
      "softmax. Look at Q's and K's operands: shared_to_a and shared_to_b (README section 3), "
      "and the tiled_mma that consumes them (section 4)");
  if (!out.empty()) return out;
  const RecipeTables& t = tables();
  std::string wrong;
  for (const std::string* w : {&t.wrong_rows, &t.wrong_p, &t.wrong_v[p.head_dim > 64]})
    if (!w->empty()) wrong += (wrong.empty() ? "" : "; ") + *w;
  if (wrong.empty()) return out;
  if (t.usable && testing::models_affordable(p) && matches(p, r, recipe_model(p, in, t)))
    out.push_back("the output is exactly what the given kernel computes when only this is "
                  "wrong: " + wrong);
  else
    out.push_back("the recipe fails on the CPU already: " + wrong + ". The host checks "
                  "(grade_08_host, which ./course grade 08 runs first) say where; fix them "
                  "first");
  return out;
}

}  // namespace attn::tensor_core_cases
