// Grader for module 03 (GPU): FlashAttention forward, the online softmax over K/V tiles.
// Built twice: grade_03 (exercise), check_03 (solution). Without a GPU it exits 77 (skipped).
//
// Beside the shapes that break tiled kernels, it feeds scores that RISE with the key index,
// so that the running max moves at every tile: the classic online-softmax bugs (acc not
// rescaled, alpha computed after the max was updated) are invisible when the first tile
// holds the row max. When a check fails with finite outputs, the grader replays those bugs
// on the CPU, tile by tile, and names the one that matches.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/reference.h"
#include "modules/03_online_softmax/online_softmax.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(3, testing::impl_under_test()); }

const char* kRecurrence =
    "modules/03_online_softmax/README.md, section 1 (the recurrence per tile)";
const char* kExp2 = "modules/03_online_softmax/README.md, section 2 (exp2 and the folded scale)";
const char* kSplit =
    "modules/03_online_softmax/README.md, section 3 (registers and the head-dim split)";
const char* kPitfalls = "modules/03_online_softmax/README.md, section 5 (pitfalls)";

// ---- Models of the classic bugs, replayed tile by tile in double precision ----------------

enum class Bug {
  no_acc_rescale,      // l *= alpha, but acc keeps its old scale
  max_updated_first,   // m = max(m, tile max) before alpha = exp(m - m): alpha is always 1
  no_division,         // o = acc, never divided by l
};

// The module's algorithm with one bug: per tile of kKeysPerTile keys, the tile max, one
// alpha for l and acc, then the tile's keys. Natural-log units (the base cancels).
std::vector<double> buggy_model(const Problem& p, const Inputs& in, Bug bug) {
  std::vector<double> out(size_t(p.o_elements()), 0.0);
  const double scale = p.softmax_scale();
  const int d = p.head_dim;
  std::vector<double> acc(static_cast<size_t>(d)), s(static_cast<size_t>(m03::kKeysPerTile));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const float* q = in.q.data() + Problem::offset(p.q, b, h, i);
        const int visible = p.first_masked_key(i);
        double m = -INFINITY, l = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int start = 0; start < p.seq_k; start += m03::kKeysPerTile) {
          double tile_max = -INFINITY;
          for (int j = 0; j < m03::kKeysPerTile; ++j) {
            const int key = start + j;
            s[j] = -INFINITY;
            if (key < visible) {
              const float* k = in.k.data() + Problem::offset(p.k, b, p.kv_head(h), key);
              double dot = 0.0;
              for (int c = 0; c < d; ++c) dot += double(q[c]) * k[c];
              s[j] = scale * dot;
            }
            tile_max = std::max(tile_max, s[j]);
          }
          const double m_new = std::max(m, tile_max);
          const double m_ref = m_new == -INFINITY ? 0.0 : m_new;
          const double alpha = bug == Bug::max_updated_first ? 1.0 : std::exp(m - m_ref);
          l *= alpha;
          if (bug != Bug::no_acc_rescale)
            for (double& a : acc) a *= alpha;
          for (int j = 0; j < m03::kKeysPerTile; ++j) {
            const double w = std::exp(s[j] - m_ref);
            if (w == 0.0) continue;
            l += w;
            const float* v = in.v.data() + Problem::offset(p.v, b, p.kv_head(h), start + j);
            for (int c = 0; c < d; ++c) acc[size_t(c)] += w * v[c];
          }
          m = m_new;
        }
        double* o = out.data() + Problem::offset(p.o, b, h, i);
        for (int c = 0; c < d; ++c)
          o[c] = bug == Bug::no_division ? acc[size_t(c)] : (l > 0.0 ? acc[size_t(c)] / l : 0.0);
      }
  return out;
}

using testing::matches;  // tests/support.h

// Finite but wrong outputs: which classic bug reproduces them?
std::vector<std::string> online_softmax_hints(const Problem& p, const Inputs& in,
                                              const CheckResult& r) {
  std::vector<std::string> hints;

  // exp and exp2 mixed up: the scale is then off by a factor ln 2 or log2(e).
  Problem as_exp2 = p, as_exp = p;
  as_exp2.scale = p.softmax_scale() * float(std::log(2.0));
  as_exp.scale = p.softmax_scale() * float(1.0 / std::log(2.0));
  if (matches(p, r, reference_attention(as_exp2, in.q, in.k, in.v)))
    hints.push_back("the output matches attention with the scores multiplied by ln 2: exp2f is "
                    "applied to natural-log scores. Fold log2(e) into q's scale (q_scale = "
                    "softmax_scale * log2(e))");
  if (matches(p, r, reference_attention(as_exp, in.q, in.k, in.v)))
    hints.push_back("the output matches attention with the scores multiplied by log2(e): the "
                    "scores are in base-2 units (q carries log2(e)) but were exponentiated with "
                    "expf. Use exp2f for every exponential: p, and alpha too");

  // The tile models cost as much as the reference; skip them for the biggest checks.
  if (!testing::models_affordable(p)) return hints;
  if (matches(p, r, buggy_model(p, in, Bug::no_acc_rescale)))
    hints.push_back("the output matches the online softmax WITHOUT rescaling acc: when the "
                    "running max moves, multiply every acc[c] by alpha (as l), once per tile, "
                    "before the tile's p * v are added");
  if (matches(p, r, buggy_model(p, in, Bug::max_updated_first)))
    hints.push_back("the output matches alpha = 1 at every tile: the running max was updated "
                    "before alpha was computed (2^(m_new - m_new) = 1). Compute m_new and "
                    "alpha = 2^(m - m_new) from the OLD m; assign m = m_new at the end of "
                    "the tile");
  if (matches(p, r, buggy_model(p, in, Bug::no_division)))
    hints.push_back("the output matches acc without the final division: o = acc / l");
  return hints;
}

testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  o.extra_hints = online_softmax_hints;
  return o;
}

using testing::rising_inputs;  // tests/support.h

// Rising scores: 0.05 per key, or 24 over the whole row for seq_k > 480 (0.1 to 0.8 per tile
// of 16 keys). Steep enough that a stale scale is far off after a few tiles, gentle enough
// that the softmax spreads over many keys and the fp32 scores stay accurate.
void check_rising(const Problem& p) {
  const double step = std::min(0.05, 24.0 / p.seq_k);
  const Inputs in = rising_inputs(p, testing::next_seed(), step);
  testing::check_inputs_against_reference(kernel(), p, in, lesson(kPitfalls));
}

}  // namespace

TEST_CASE("one small head") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 8, 8, 16), lesson(kRecurrence));
}

TEST_CASE("sequence lengths around the block and tile sizes: 1, 2, 17, 63, 64, 65, 127, 128, "
          "129, 1000") {
  for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
    testing::check_against_reference(kernel(), Problem::make(1, 2, n, n, 64), lesson(kRecurrence));
}

TEST_CASE("a long sequence: 4097") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 4097, 4097, 64),
                                   lesson(kRecurrence));
}

TEST_CASE("a partial last key tile: seq_k = 16k +- 1") {
  // One key past a tile boundary (a tile holding a single key) and one short of it: the keys
  // past seq_k must be masked, not read.
  for (int sk : {15, 17, 31, 33, 63, 65, 127, 129})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 70, sk, 64),
                                     lesson(kRecurrence));
}

TEST_CASE("seq_q != seq_k") {
  for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64),
                                     lesson(kRecurrence));
}

TEST_CASE("a last query block with one query, over many key tiles") {
  // The last block's threads past seq_q must still load their share of every tile and reach
  // every barrier. (Blocks hold 128 queries at d <= 32, 64 at d = 64, 32 at d = 96 and 128.)
  for (auto [sq, d] : {std::pair{129, 32}, {65, 64}, {33, 128}})
    testing::check_against_reference(kernel(), Problem::make(2, 2, sq, 300, d), lesson(kPitfalls));
}

TEST_CASE("head dims 1, 16, 32, 59, 64, 80, 96, 128") {
  for (int d : {1, 16, 32, 59, 64, 80, 96, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 65, 70, d), lesson(kSplit));
}

TEST_CASE("head dims split over 2 and 4 threads, over many tiles: 48, 80, 96, 128") {
  for (int d : {48, 80, 96, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 300, 1000, d), lesson(kSplit));
}

TEST_CASE("several batches and heads in one launch") {
  testing::check_against_reference(kernel(), Problem::make(3, 5, 100, 90, 64), lesson(kRecurrence));
}

TEST_CASE("large logits: scores in the hundreds") {
  testing::CheckOptions o = lesson(kRecurrence);
  o.range = 30.0f;
  for (int d : {64, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 128, 300, d), o);
}

TEST_CASE("rising scores: the running max moves at every tile") {
  // The max is in the last tile, not the first: l and acc must be rescaled at every tile.
  for (int n : {129, 1000, 4097}) check_rising(Problem::make(1, 2, n, n, 64));
  for (int d : {32, 59, 128}) check_rising(Problem::make(1, 2, 200, 1000, d));
  check_rising(Problem::make(1, 1, 17, 1000, 64));
}

TEST_CASE("a custom softmax scale") {
  Problem p = Problem::make(1, 2, 50, 60, 32);
  p.scale = 0.37f;
  testing::check_against_reference(kernel(), p, lesson(kExp2));
}

TEST_CASE("BSHD layout (heads interleaved per token)") {
  testing::check_against_reference(kernel(), Problem::make(2, 4, 65, 33, 64, false, Layout::BSHD),
                                   lesson(kRecurrence));
}

TEST_CASE("padded rows: O's row stride is larger than head_dim") {
  Problem p = Problem::make(2, 3, 37, 41, 20);
  p.o = {3 * 37 * 24, 37 * 24, 24};  // 4 unused floats after each output row
  p.q = {3 * 37 * 21, 37 * 21, 21};  // and 1 after each query row
  testing::check_against_reference(kernel(), p, lesson(kRecurrence));
}

TEST_CASE("K and V rows that are not 16-byte aligned (4-byte loads at d = 64)") {
  Problem p = Problem::make(1, 2, 70, 100, 64);
  p.k = {2 * 100 * 65, 100 * 65, 65};  // row stride 65 floats: rows 4-byte aligned only
  p.v = {2 * 100 * 66, 100 * 66, 66};
  testing::check_against_reference(kernel(), p, lesson(kRecurrence));
}

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  testing::check_against_reference(kernel(), testing::grid_limit_problem(3, 5, 16),
                                   lesson(kRecurrence));
}

TEST_CASE("refuses the causal mask and head dims over 128, with clear messages") {
  const Status causal = kernel().supports(Problem::make(1, 1, 4, 4, 16, /*causal=*/true));
  CHECK_FALSE(causal.is_ok());
  CHECK(causal.message().find("causal") != std::string::npos);
  for (int d : {129, 256}) {
    const Status wide = kernel().supports(Problem::make(1, 1, 4, 4, d));
    CHECK_FALSE(wide.is_ok());
    CHECK(wide.message().find("head_dim") != std::string::npos);
  }
  CHECK(kernel().supports(Problem::make(1, 1, 4, 4, 128)).is_ok());
}

// Going further (lesson 03, section 9): `./course grade 03 --extra`. The shapes a change of
// the tile size or of the tile loop breaks first; the solution passes them as it is.
TEST_SUITE("extra") {
  TEST_CASE("extra: 32 keys per tile: key counts around multiples of 32, every instance") {
    // With kKeysPerTile = 32 the partial last tile and the masked tail move; the bug models
    // of the hints read the same constant.
    for (int sk : {31, 32, 33, 63, 64, 65, 95, 97, 1000})
      for (int d : {32, 64, 96, 128})
        testing::check_against_reference(kernel(), Problem::make(1, 2, 129, sk, d),
                                         lesson(kRecurrence));
  }

  TEST_CASE("extra: the running max moves at every tile, at every instance and alignment") {
    for (int d : {16, 48, 64, 80, 96, 128}) check_rising(Problem::make(1, 2, 130, 1000, d));
    Problem p = Problem::make(1, 2, 100, 700, 64);
    p.v = {2 * 700 * 65, 700 * 65, 65};  // V rows 4-byte aligned only: the 4-byte path
    check_rising(p);
  }

  TEST_CASE("extra: falling and flat scores (the max in the first tile, or everywhere)") {
    // Falling: alpha = 1 from the first tile on. Flat: every tile ties the max.
    for (double step : {-0.05, 0.0})
      for (int d : {64, 128}) {
        const Problem p = Problem::make(1, 2, 200, 1000, d);
        const Inputs in = rising_inputs(p, testing::next_seed(), step);
        testing::check_inputs_against_reference(kernel(), p, in, lesson(kPitfalls));
      }
  }
}
