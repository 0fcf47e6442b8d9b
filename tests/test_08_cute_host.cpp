// Module 08's host grader (CPU, no GPU needed): the recipe's layouts, one recipe function at a
// time. Built twice: grade_08_host (exercise), check_08_host (solution); `./course grade 08`
// runs it before the GPU grader (tests/test_08_cute.cpp).
//
// Each check evaluates one of the recipe's layouts through the probes of cute_attention.h,
// which build it exactly as the kernel does (128 threads = 4 warps, bf16, 128-query and 64-key
// tiles), and tests the property the kernel relies on: offsets a head's row stride gives,
// shared tiles every byte of which is used once and that ldmatrix reads without bank
// conflicts, a coalesced global copy, warps that own whole rows, and P's registers in the
// order the MMA expects. A failure names the recipe function, the thread or coordinate, what
// was expected and what the layout gave, and the README section to read.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "modules/08_cute/cute_attention.h"

namespace {

namespace recipe = attn::m08::ATTN_IMPL;
using recipe::Coord;

const char* kLayouts = "modules/08_cute/README.md, section 2 (layouts: head_layout, shared_tile)";
const char* kCopies =
    "modules/08_cute/README.md, section 3 (copies: global_copy, shared_to_a/b/b_transposed, "
    "transposed)";
const char* kMma = "modules/08_cute/README.md, section 4 (the MMA: tiled_mma, accumulator_as_a)";

std::string str(Coord c) {
  return "(" + std::to_string(c.row) + ", " + std::to_string(c.col) + ")";
}

// The violations of one property: how many, the first few in words.
class Findings {
 public:
  template <class... Parts>
  void add(const Parts&... parts) {
    if (count_++ >= kShown) return;
    std::ostringstream line;
    (line << ... << parts);
    shown_.push_back(line.str());
  }
  bool empty() const { return count_ == 0; }

  // Fails the current test case when there is a violation: the property, the examples, the
  // hint (which recipe function, what it must do) and the section to read.
  void expect_none(const std::string& property, const std::string& hint, const char* read) const {
    std::ostringstream m;
    m << property << ": " << count_ << " violation" << (count_ == 1 ? "" : "s") << ", e.g.\n";
    for (const std::string& s : shown_) m << "    " << s << "\n";
    m << "  hint: " << hint << "\n  read: " << read;
    const int64_t violations = count_;
    CHECK_MESSAGE(violations == 0, m.str());
  }

 private:
  static constexpr int kShown = 6;
  int64_t count_ = 0;
  std::vector<std::string> shown_;
};

std::string thread_value(int thread, size_t value) {
  return "thread " + std::to_string(thread) + ", value " + std::to_string(value);
}

// The values of every thread of the block, in the order of its registers.
using PerThread = std::vector<std::vector<Coord>>;

// Each (row, col) of a rows x cols tile must be some thread's value exactly once.
Findings each_once(const PerThread& values, int rows, int cols) {
  Findings f;
  std::vector<std::string> seen(size_t(rows) * cols);  // who gave each coordinate first
  for (size_t t = 0; t < values.size(); ++t)
    for (size_t i = 0; i < values[t].size(); ++i) {
      const Coord c = values[t][i];
      const std::string where = thread_value(int(t), i);
      if (c.row < 0 || c.row >= rows || c.col < 0 || c.col >= cols) {
        f.add(where, " gives ", str(c), ", outside the ", rows, " x ", cols, " tile");
        continue;
      }
      std::string& first = seen[size_t(c.row) * cols + c.col];
      if (!first.empty()) f.add(where, " and ", first, " both give ", str(c));
      else first = where;
    }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (seen[size_t(r) * cols + c].empty()) f.add(str({r, c}), " is never given");
  return f;
}

constexpr int kThreads = 128;  // the probes' block: 4 warps
constexpr int kKeys = 64;      // K/V tile rows
constexpr int kQueries = 128;  // the S tile: 128 queries x 64 keys

}  // namespace

// ---- 1. head_layout ------------------------------------------------------------------------

TEST_CASE("head_layout: (row, col) -> row * row_stride + col, 64-bit") {
  const std::string hint =
      "head_layout(rows, cols, row_stride) must be row-major with the problem's row stride: "
      "(r, c) -> r * row_stride + c, the shape (rows, cols) and the stride (row_stride, "
      "Int<1>{}), the row stride kept as int64_t (row * row_stride passes 2^31 in large "
      "tensors). The row stride is head_dim for BHSD, heads * head_dim for BSHD, and more "
      "for padded or packed rows";
  struct Case {
    int rows, cols;
    int64_t row_stride;
    const char* what;
  };
  const Case cases[] = {
      {64, 64, 64, "BHSD, head_dim 64"},
      {77, 59, 59, "BHSD, head_dim 59"},
      {100, 64, 8 * 64, "BSHD, 8 heads of 64"},
      {130, 128, 4 * 128, "BSHD, 4 heads of 128"},
      {37, 24, 32, "rows padded to 32 elements"},
      {70, 64, 3 * 4 * 64, "a packed QKV buffer, 4 heads"},
  };
  Findings shapes;  // one line per (rows, cols, row_stride) with a wrong offset: the first
  for (const Case& c : cases) {
    int wrong = 0;
    std::string first;
    for (int r = 0; r < c.rows; ++r)
      for (int col = 0; col < c.cols; ++col) {
        const int64_t want = r * c.row_stride + col;
        const int64_t got = recipe::probe_head_offset(c.rows, c.cols, c.row_stride, r, col);
        if (got != want && wrong++ == 0)
          first = str({r, col}) + " -> " + std::to_string(got) + ", expected " +
                  std::to_string(want);
      }
    if (wrong > 0)
      shapes.add("head_layout(", c.rows, ", ", c.cols, ", ", c.row_stride, ") (", c.what, "): ",
                 wrong, " of ", c.rows * c.cols, " offsets wrong, e.g. ", first);
  }
  shapes.expect_none("head_layout over BHSD, BSHD, padded and packed rows", hint, kLayouts);

  // 100 rows 30'000'000 elements apart: row 90 starts at 2.7e9, past 2^31.
  const int64_t stride = 3'000'000'000LL / 100;
  Findings f;
  for (int r : {1, 50, 71, 72, 90, 99})
    for (int col : {0, 1, 63}) {
      const int64_t want = r * stride + col;
      const int64_t got = recipe::probe_head_offset(100, 64, stride, r, col);
      if (got != want) f.add("(", r, ", ", col, ") -> ", got, ", expected ", want);
    }
  f.expect_none("head_layout(100, 64, 30000000): offsets past 2^31", hint, kLayouts);
}

// ---- 2. shared_tile ------------------------------------------------------------------------

TEST_CASE("shared_tile: a bijection of whole 16-byte chunks, swizzled against bank conflicts") {
  for (auto [rows, d] : {std::pair{64, 64}, {64, 128}, {128, 64}, {128, 128}}) {
    const std::string name =
        "shared_tile<" + std::to_string(rows) + ", " + std::to_string(d) + ">";
    auto at = [&](int r, int c) { return recipe::probe_shared_offset(rows, d, r, c); };

    // Every element has its own place in the rows * d elements the kernel allocates.
    Findings bijection;
    std::vector<std::string> owner(size_t(rows) * d);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < d; ++c) {
        const int o = at(r, c);
        const std::string here = str({r, c});
        if (o < 0 || o >= rows * d) {
          bijection.add(here, " -> ", o, ", outside [0, ", rows * d, ")");
        } else if (!owner[size_t(o)].empty()) {
          bijection.add(here, " and ", owner[size_t(o)], " both -> ", o);
        } else {
          owner[size_t(o)] = here;
        }
      }
    bijection.expect_none(name + ": every (row, col) at its own offset in [0, rows * d)",
                          "shared_tile<rows, d>() must place each element of the rows x d "
                          "tile at its own offset below rows * d (the kernel allocates just "
                          "that): tile_to_shape of an 8 x 64 atom over (rows, d)",
                          kLayouts);

    // cp.async and ldmatrix move 16-byte chunks: 8 columns starting at a multiple of 8 must be
    // 8 consecutive elements starting at a multiple of 8.
    Findings chunks;
    for (int r = 0; r < rows; ++r)
      for (int c0 = 0; c0 < d; c0 += 8) {
        const int first = at(r, c0);
        if (first % 8 != 0) chunks.add("(", r, ", ", c0, ") -> ", first, ", not a multiple of 8");
        for (int i = 1; i < 8; ++i)
          if (at(r, c0 + i) != first + i) {
            chunks.add("(", r, ", ", c0 + i, ") -> ", at(r, c0 + i), ", expected ", first + i,
                       " (the chunk starts at (", r, ", ", c0, ") -> ", first, ")");
            break;
          }
      }
    chunks.expect_none(name + ": 16-byte chunks stay whole",
                       "the swizzle must move whole 16-byte chunks (8 bf16 elements): keep the "
                       "columns contiguous inside a chunk (stride 1 in the atom, and a "
                       "Swizzle<B, M, S> with M = 3, which leaves the offset's low 3 bits "
                       "alone)",
                       kLayouts);

    // ldmatrix reads one chunk column of 8 consecutive rows at once: those 8 chunks must lie
    // in 8 different 16-byte bank groups ((offset * 2 bytes / 16) % 8), else the reads of the
    // same bank group are served one after another.
    Findings banks;
    for (int c0 = 0; c0 < d; c0 += 8)
      for (int r0 = 0; r0 < rows; r0 += 8) {
        int used = 0;  // bit g: bank group g taken
        for (int i = 0; i < 8; ++i) {
          const int group = ((at(r0 + i, c0) * 2) / 16) % 8;
          if (used & (1 << group)) {
            banks.add("rows ", r0, "-", r0 + 7, " at columns ", c0, "-", c0 + 7, ": row ",
                      r0 + i, " is in bank group ", group, " like an earlier row (offsets ",
                      at(r0, c0), ", ", at(r0 + 1, c0), ", ..., ", at(r0 + 7, c0), ")");
            break;
          }
          used |= 1 << group;
        }
      }
    banks.expect_none(name + ": 8 rows of a chunk column in 8 different bank groups",
                      "a row of 64 bf16 is 128 bytes, all 32 banks: in a plain row-major tile "
                      "the same chunk of 8 consecutive rows sits in the same bank group, and "
                      "every ldmatrix is an 8-way bank conflict. Compose the 8 x 64 row-major "
                      "atom with Swizzle<3, 3, 3> (the chunk index XOR the row index) before "
                      "tile_to_shape",
                      kLayouts);
  }
}

// ---- 3. global_copy ------------------------------------------------------------------------

TEST_CASE("global_copy: each element once, in 16-byte chunks, D / 8 threads per row") {
  for (int d : {64, 128}) {
    const std::string name = "global_copy<T, 128, " + std::to_string(d) + "> over a 64 x " +
                             std::to_string(d) + " tile";
    const int per_row = d / 8;  // threads that cover one row, a chunk each
    PerThread values(kThreads);
    for (int t = 0; t < kThreads; ++t) values[size_t(t)] = recipe::probe_copy_coords(d, t);

    each_once(values, kKeys, d)
        .expect_none(name + ": every element copied exactly once",
                     "global_copy's thread layout times its value layout must cover the 64 x D "
                     "tile once: 128 threads as (128 / (D / 8), D / 8), 8 values (1, 8) each",
                     kCopies);

    Findings runs;
    for (int t = 0; t < kThreads; ++t) {
      const std::vector<Coord>& v = values[size_t(t)];
      if (v.size() % 8 != 0) {
        runs.add("thread ", t, " copies ", v.size(), " values, not whole chunks of 8");
        continue;
      }
      for (size_t i = 0; i < v.size(); i += 8) {
        if (v[i].col % 8 != 0)
          runs.add(thread_value(t, i), " is ", str(v[i]), ": a chunk must start at a column "
                   "that is a multiple of 8");
        for (size_t j = 1; j < 8; ++j)
          if (v[i + j].row != v[i].row || v[i + j].col != v[i].col + int(j)) {
            runs.add(thread_value(t, i + j), " is ", str(v[i + j]), ", expected ",
                     str({v[i].row, v[i].col + int(j)}), " (its chunk starts at ", str(v[i]), ")");
            break;
          }
      }
    }
    runs.expect_none(name + ": each thread's values in runs of 8 consecutive columns",
                     "each copy of global_copy moves one 16-byte chunk with cp.async: the value "
                     "layout is 8 consecutive columns of one row, Layout<Shape<_1, _8>>",
                     kCopies);

    Findings coalesced;
    for (int t = 0; t < kThreads; ++t) {
      if (values[size_t(t)].empty()) continue;
      const int lead = t - t % per_row;  // the first thread of t's row group
      if (values[size_t(lead)].empty()) continue;
      const Coord first = values[size_t(lead)][0], mine = values[size_t(t)][0];
      const Coord want{first.row, first.col + 8 * (t - lead)};
      if (t == lead ? mine.col != 0 : (mine.row != want.row || mine.col != want.col))
        coalesced.add("thread ", t, " starts at ", str(mine), ", expected ",
                      t == lead ? "column 0 of a row" : str(want), " (threads ", lead, "-",
                      lead + per_row - 1, " should copy one row, chunk after chunk)");
    }
    coalesced.expect_none(
        name + ": D / 8 consecutive threads copy one row, chunk after chunk",
        "consecutive threads must take consecutive chunks of a row, so that a warp's 16-byte "
        "copies read whole rows of global memory (coalesced): the thread layout is "
        "(128 / (D / 8), D / 8) with strides (D / 8, 1), row-major. A thread layout with "
        "CuTe's default column-major strides walks the threads down the rows instead",
        kCopies);
  }
}

// ---- 4. tiled_mma --------------------------------------------------------------------------

TEST_CASE("tiled_mma: S's 128 x 64 accumulators, warp w owns rows 32w..32w+31, quads share rows") {
  PerThread s(kThreads);
  for (int t = 0; t < kThreads; ++t) s[size_t(t)] = recipe::probe_s_coords(t);

  each_once(s, kQueries, kKeys)
      .expect_none("tiled_mma's partition of S (128 queries x 64 keys): every (row, key) once",
                   "tiled_mma<T, 4>() must cover the 128 x 64 tile once over its 128 threads: "
                   "the m16n8k16 atom, 4 warps stacked along the rows (Layout<Shape<_4, _1, "
                   "_1>>), and a tile of 128 x 16 x 16",
                   kMma);

  Findings warps;
  for (int t = 0; t < kThreads; ++t) {
    const int w = t / 32;
    for (size_t i = 0; i < s[size_t(t)].size(); ++i) {
      const int row = s[size_t(t)][i].row;
      if (row / 32 != w) {
        warps.add(thread_value(t, i), " (warp ", w, ") is row ", row, "; warp ", w,
                  " must own rows ", 32 * w, "-", 32 * w + 31);
        break;
      }
    }
  }
  warps.expect_none(
      "tiled_mma: warp w owns the rows 32w..32w+31",
      "the kernel gives warp w the 32 consecutive queries 32w..32w+31 (it skips the key tiles "
      "a warp's last query does not see, and stores rows by warp): with 4 warps stacked, the "
      "m16n8k16 atoms give warp w rows 16w..16w+15 and 64+16w..79+16w unless the tile's M mode "
      "is permuted: the first mode of the Tile must be a layout that sends row i of the atom, "
      "warp w, repeat j (of 2) to row i + 32w + 16j",
      kMma);

  Findings quads;
  for (int t = 0; t < kThreads; ++t) {
    const int lead = t - t % 4;
    const std::vector<Coord>&mine = s[size_t(t)], &first = s[size_t(lead)];
    if (mine.size() != first.size()) {
      quads.add("thread ", t, " holds ", mine.size(), " values, thread ", lead, " ",
                first.size());
      continue;
    }
    for (size_t i = 0; i < mine.size(); ++i)
      if (mine[i].row != first[i].row) {
        quads.add(thread_value(t, i), " is row ", mine[i].row, ", the same value of thread ",
                  lead, " row ", first[i].row, " (a quad's 4 lanes must hold the same rows)");
        break;
      }
  }
  quads.expect_none(
      "tiled_mma: the 4 lanes of a quad hold the same rows, value by value",
      "the softmax reduces a row's max and sum over the 4 lanes of a quad (two shuffles): "
      "value i of threads 4q..4q+3 must lie in one row. That is the m16n8k16 atom's own C "
      "layout; keep the atom (SM80_16x8x16_F32BF16BF16F32_TN / F32F16F16F32_TN) and permute "
      "only whole 16-row atoms",
      kMma);
}

// ---- 6. transposed -------------------------------------------------------------------------

TEST_CASE("transposed: V^T(column, key) is the shared tile's (key, column)") {
  for (int d : {64, 128}) {
    Findings f;
    for (int col = 0; col < d; ++col)
      for (int key = 0; key < kKeys; ++key) {
        const int want = recipe::probe_shared_offset(kKeys, d, key, col);
        const int got = recipe::probe_transposed_offset(d, col, key);
        if (got != want)
          f.add("V^T(", col, ", ", key, ") -> ", got, ", expected ", want, " (the offset of "
                "V's (", key, ", ", col, ") in shared_tile<64, ", d, ">)");
      }
    f.expect_none("transposed(shared_tile<64, " + std::to_string(d) + ">())",
                  "transposed(tile) must view the (keys, D) tile as (D, keys): (d, key) -> "
                  "tile(key, d). Compose the tile with a row-major (D, keys) layout "
                  "(GenRowMajor: (d, key) -> d * keys + key, which is the tile's own "
                  "column-major index of (key, d)); a column-major one reads the tile "
                  "untransposed",
                  kCopies);
  }
}

// ---- 7. accumulator_as_a -------------------------------------------------------------------

TEST_CASE("accumulator_as_a: P's A fragment is S's registers in the order the MMA expects") {
  Findings f;
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<Coord> a = recipe::probe_a_coords(t), p = recipe::probe_p_coords(t);
    if (a.size() != p.size()) {
      f.add("thread ", t, ": the view has ", p.size(), " values, the MMA's A fragment ",
            a.size());
      continue;
    }
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].row != p[i].row || a[i].col != p[i].col) {
        f.add(thread_value(t, i), " of P is S", str(p[i]), ", the MMA expects (row, key) ",
              str(a[i]));
        break;
      }
  }
  f.expect_none("accumulator_as_a(S's layout) vs tiled_mma's A fragment of a 128 x 64 operand",
                "S's accumulators are ((2, 2), MMA_M, MMA_N); an A fragment ((2, 2, 2), MMA_M, "
                "MMA_N / 2) spans 16 keys, i.e. two n8 accumulator blocks. Split the N mode in "
                "pairs (logical_divide by Shape<_, _, _2>) and make the pair index the value "
                "mode's last part: ((2, 2), pair) = (2, 2, 2). Reshaping the registers in "
                "their storage order mixes the rows and keys of S",
                kMma);
}
