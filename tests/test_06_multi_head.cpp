// Grader for module 06 (GPU): the fused multi-head kernel. Built twice: grade_06 (exercise),
// check_06 (solution). Without a GPU it exits 77 (skipped).
//
// Module 06 is the first kernel that must take ANY layout the strides describe, so beside the
// shapes that break tiled kernels (odd lengths, seq_q != seq_k, every head dim, causal rows
// that see no key, large and rising logits) it runs on BSHD, on Q/K/V that are views into one
// packed QKV buffer, on O with padding between rows (written padding fails), on rows and
// pointers that are not 16-byte aligned (float4 paths must fall back), on grouped K/V heads
// (GQA, MQA) and on grids past the 65535 limit of gridDim.y/z. When a check fails with finite
// outputs, the grader recomputes the output as the classic bugs of this module would (dense
// BHSD indexing, the wrong K/V head for a query head) and names the one that matches.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/random.h"
#include "common/reference.h"
#include "modules/06_multi_head/multi_head.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(6, testing::impl_under_test()); }

const char* kGrid = "modules/06_multi_head/README.md, section 1 (one launch for every head)";
const char* kGrouped =
    "modules/06_multi_head/README.md, section 1 (heads that share K/V: GQA and MQA)";
const char* kStrides = "modules/06_multi_head/README.md, section 2 (strides and layouts)";
const char* kAlign =
    "modules/06_multi_head/README.md, section 2 (the float4 alignment rule)";
const char* kTiling = "modules/06_multi_head/README.md, section 3 (register tiling)";
const char* kPitfalls = "modules/06_multi_head/README.md, section 5 (pitfalls)";

// ---- Models of the classic bugs of this module --------------------------------------------

using testing::matches;  // tests/support.h

// Attention where query head h reads K/V head kv_of(h): K/V repeated per query head by
// copying, then the ordinary reference with Q and O as in `p`.
template <class KvOf>
std::vector<double> mapped_kv_reference(const Problem& p, const Inputs& in, KvOf kv_of) {
  Problem mha = p;
  mha.kv_heads = p.heads;
  const Problem dense = Problem::make(p.batch, p.heads, p.seq_q, p.seq_k, p.head_dim);
  mha.k = mha.v = dense.k;
  std::vector<float> k(size_t(dense.kv_elements())), v(size_t(dense.kv_elements()));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int j = 0; j < p.seq_k; ++j)
        for (int c = 0; c < p.head_dim; ++c) {
          const size_t dst = size_t(Problem::offset(mha.k, b, h, j) + c);
          k[dst] = in.k[size_t(Problem::offset(p.k, b, kv_of(h), j) + c)];
          v[dst] = in.v[size_t(Problem::offset(p.v, b, kv_of(h), j) + c)];
        }
  return reference_attention(mha, in.q, k, v);
}

// Finite but wrong outputs: which classic bug reproduces them?
std::vector<std::string> multi_head_hints(const Problem& p, const Inputs& in,
                                          const CheckResult& r) {
  std::vector<std::string> hints;
  if (!testing::models_affordable(p)) return hints;

  // Strides ignored: the kernel indexed every tensor as dense BHSD, reading and writing the
  // same buffers at the wrong places.
  Problem dense = Problem::make(p.batch, p.heads, p.seq_q, p.seq_k, p.head_dim, p.causal,
                                Layout::BHSD, p.kv_heads);
  dense.scale = p.scale;
  const bool strided = dense.q.seq != p.q.seq || dense.q.head != p.q.head ||
                       dense.k.seq != p.k.seq || dense.k.head != p.k.head ||
                       dense.v.seq != p.v.seq || dense.v.head != p.v.head ||
                       dense.o.seq != p.o.seq || dense.o.head != p.o.head;
  if (strided && int64_t(in.q.size()) >= dense.q_elements() &&
      int64_t(in.k.size()) >= dense.kv_elements() && int64_t(in.v.size()) >= dense.kv_elements() &&
      int64_t(r.output.size()) >= dense.o_elements() &&
      matches(dense, r, reference_attention(dense, in.q, in.k, in.v)))
    hints.push_back("the output is what a kernel that assumes dense BHSD tensors computes: "
                    "index every tensor with its strides, Problem::offset(p.q, b, h, i) (and "
                    "p.k, p.v, p.o), never with ((b * heads + h) * seq + i) * head_dim");

  // Grouped K/V heads: the wrong K/V head for a query head.
  if (p.kv_heads != p.heads && p.kv_heads > 1) {
    if (matches(p, r, mapped_kv_reference(p, in, [&](int h) { return h % p.kv_heads; })))
      hints.push_back("the output matches query head h reading K/V head h % kv_heads: the "
                      "heads of a group are consecutive, K/V head h / (heads / kv_heads) "
                      "(p.kv_head(h))");
    if (matches(p, r, mapped_kv_reference(p, in, [](int) { return 0; })))
      hints.push_back("the output matches every query head reading K/V head 0: use "
                      "p.kv_head(h) for the K and V offsets");
  }
  return hints;
}

testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  o.extra_hints = multi_head_hints;
  return o;
}

Problem make(int batch, int heads, int seq_q, int seq_k, int head_dim, bool causal = false,
             Layout layout = Layout::BHSD, int kv_heads = 0) {
  return Problem::make(batch, heads, seq_q, seq_k, head_dim, causal, layout, kv_heads);
}

using testing::rising_inputs;  // tests/support.h

void check_rising(const Problem& p) {
  const double step = std::min(0.05, 24.0 / p.seq_k);
  const Inputs in = rising_inputs(p, testing::next_seed(), step);
  testing::check_inputs_against_reference(kernel(), p, in, lesson(kPitfalls));
}

// ---- Q, K, V as views into ONE packed buffer: testing::check_packed_qkv ----------------------

bool check_packed(const testing::PackedQkv& c, const char* section) {
  return testing::check_packed_qkv(kernel(), c, DType::f32, lesson(section));
}

}  // namespace

// ---- Shapes --------------------------------------------------------------------------------

TEST_CASE("one small head") {
  testing::check_against_reference(kernel(), make(1, 1, 8, 8, 16), lesson(kGrid));
}

TEST_CASE("sequence lengths 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000, causal and not") {
  for (bool causal : {false, true})
    for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
      testing::check_against_reference(kernel(), make(1, 2, n, n, 64, causal), lesson(kGrid));
}

TEST_CASE("a long sequence: 4097, causal and not") {
  for (bool causal : {false, true})
    testing::check_against_reference(kernel(), make(1, 1, 4097, 4097, 64, causal),
                                     lesson(kTiling));
}

TEST_CASE("seq_q != seq_k, both ways, causal and not") {
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {64, 65},
                          {65, 64}, {100, 129}, {129, 100}})
      testing::check_against_reference(kernel(), make(1, 2, sq, sk, 64, causal),
                                       lesson(causal ? kPitfalls : kTiling));
}

TEST_CASE("causal with seq_q > seq_k: the first seq_q - seq_k rows see no key and are 0") {
  // A row that sees no key has l = 0: its output must be written, and be 0, not 0/0. With
  // 140 queries over 100 keys the first query block holds both kinds of rows.
  for (int d : {16, 64, 128})
    for (auto [sq, sk] : {std::pair{1000, 17}, {65, 2}, {4097, 1}, {300, 100}, {140, 100}})
      testing::check_against_reference(kernel(), make(2, 2, sq, sk, d, true), lesson(kPitfalls));
}

TEST_CASE("head dims 16, 32, 59, 64, 80, 96, 128 and the instance edges 1, 33, 65, 127") {
  for (bool causal : {false, true})
    for (int d : {1, 16, 32, 33, 59, 64, 65, 80, 96, 127, 128}) {
      testing::check_against_reference(kernel(), make(1, 2, 130, 70, d, causal), lesson(kTiling));
      testing::check_against_reference(kernel(), make(1, 2, 70, 130, d, causal), lesson(kTiling));
    }
}

TEST_CASE("many key tiles at every head dim") {
  for (int d : {32, 59, 64, 96, 128}) {
    testing::check_against_reference(kernel(), make(1, 2, 300, 1000, d), lesson(kTiling));
    testing::check_against_reference(kernel(), make(1, 2, 300, 1000, d, true), lesson(kTiling));
  }
}

TEST_CASE("a last query block with one query, over many key tiles") {
  // Threads past seq_q must still load their share of every tile and reach every barrier.
  for (int sq : {33, 65, 129})
    for (bool causal : {false, true})
      testing::check_against_reference(kernel(), make(2, 2, sq, 300, 64, causal), lesson(kTiling));
}

TEST_CASE("several batches and heads in one launch") {
  testing::check_against_reference(kernel(), make(3, 5, 100, 90, 64), lesson(kGrid));
  testing::check_against_reference(kernel(), make(3, 5, 300, 280, 96, true), lesson(kGrid));
}

// ---- Numerics ------------------------------------------------------------------------------

TEST_CASE("large logits: scores in the hundreds") {
  testing::CheckOptions o = lesson(kPitfalls);
  o.range = 30.0f;
  for (bool causal : {false, true})
    for (int d : {64, 128}) {
      testing::check_against_reference(kernel(), make(1, 2, 128, 300, d, causal), o);
      testing::check_against_reference(kernel(), make(1, 2, 300, 128, d, causal), o);
    }
}

TEST_CASE("rising scores: the running max moves at every key tile") {
  for (int n : {129, 1000, 4097}) check_rising(make(1, 2, n, n, 64));
  for (int d : {32, 59, 128}) check_rising(make(1, 2, 200, 1000, d));
  check_rising(make(1, 1, 17, 1000, 64));
  check_rising(make(1, 2, 1000, 1000, 64, true));
  check_rising(make(1, 8, 300, 700, 64, false, Layout::BSHD, 2));
}

TEST_CASE("a custom softmax scale") {
  Problem p = make(1, 2, 50, 60, 32);
  p.scale = 0.37f;
  testing::check_against_reference(kernel(), p, lesson(kTiling));
}

// ---- Layouts and strides -------------------------------------------------------------------

TEST_CASE("BSHD layout (heads interleaved per token), causal and not") {
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{65, 33}, {33, 65}, {200, 200}})
      for (int d : {59, 64, 128})
        testing::check_against_reference(kernel(), make(2, 4, sq, sk, d, causal, Layout::BSHD),
                                         lesson(kStrides));
}

TEST_CASE("padding between O's rows and heads must stay untouched") {
  // O: 4 unused floats after every row and 8 after every head; Q: 1 after every row. The
  // grader poisons the padding and fails the check if any of it is written.
  for (bool causal : {false, true}) {
    Problem p = make(2, 3, 37, 41, 20, causal);
    p.o = {3 * (37 * 24 + 8), 37 * 24 + 8, 24};
    p.q = {3 * 37 * 21, 37 * 21, 21};
    testing::check_against_reference(kernel(), p, lesson(kStrides));
    Problem q = make(2, 4, 130, 70, 64, causal, Layout::BSHD);
    q.o = {130 * 4 * 72, 72, 4 * 72};  // BSHD with 8 floats after every row
    testing::check_against_reference(kernel(), q, lesson(kStrides));
  }
}

TEST_CASE("Q, K, V as views into one packed QKV buffer; O with padded rows") {
  // [B, S, 3, H, D]: row stride 3*H*D, K and V H*D and 2*H*D floats after Q.
  check_packed({2, 4, 4, 77, 64}, kStrides);
  check_packed({2, 4, 4, 77, 64, true, 0, 0, 4}, kStrides);
  check_packed({1, 3, 3, 130, 128, true}, kStrides);
  check_packed({1, 3, 3, 65, 32, false, 0, 0, 12}, kStrides);
  // Grouped heads packed as [B, S, H + 2*KVH, D], as in Llama-style fused projections.
  check_packed({2, 8, 2, 70, 64, false}, kGrouped);
  check_packed({1, 8, 1, 129, 64, true, 0, 0, 4}, kGrouped);
}

TEST_CASE("rows not 16-byte aligned: float4 paths must fall back") {
  // head_dim 59: every row stride is odd.
  for (bool causal : {false, true}) {
    testing::check_against_reference(kernel(), make(1, 2, 100, 130, 59, causal), lesson(kAlign));
    testing::check_against_reference(kernel(), make(2, 3, 70, 70, 59, causal, Layout::BSHD),
                                     lesson(kAlign));
  }
  // head_dim 64 (a multiple of 4) but row strides of 65 and 66 floats: the rows of K and V
  // start 4 and 8 bytes off a 16-byte boundary.
  Problem p = make(1, 2, 70, 100, 64);
  p.k = {2 * 100 * 65, 100 * 65, 65};
  p.v = {2 * 100 * 66, 100 * 66, 66};
  testing::check_against_reference(kernel(), p, lesson(kAlign));
  // Q and O rows likewise (head stride odd too).
  Problem o = make(2, 2, 90, 60, 64, true);
  o.q = {2 * (90 * 68 + 1), 90 * 68 + 1, 68};
  o.o = {2 * 90 * 66, 90 * 66, 66};
  testing::check_against_reference(kernel(), o, lesson(kAlign));
  // Every stride a multiple of 4 floats, but every pointer 4 bytes off a 16-byte boundary.
  check_packed({1, 2, 2, 70, 64, false, 1, 1}, kAlign);
  check_packed({2, 2, 2, 100, 128, true, 1, 3, 4}, kAlign);
  check_packed({1, 4, 2, 65, 32, false, 2, 2}, kAlign);
}

// ---- Grouped K/V heads ---------------------------------------------------------------------

TEST_CASE("grouped K/V heads: GQA with 8 query heads over 2 and 4 K/V heads, and MQA") {
  for (int kv : {4, 2, 1})
    for (bool causal : {false, true})
      for (Layout layout : {Layout::BHSD, Layout::BSHD}) {
        testing::check_against_reference(kernel(), make(2, 8, 100, 130, 64, causal, layout, kv),
                                         lesson(kGrouped));
        testing::check_against_reference(kernel(), make(1, 8, 130, 65, 59, causal, layout, kv),
                                         lesson(kGrouped));
      }
  testing::check_against_reference(kernel(), make(1, 8, 1000, 1000, 128, true, Layout::BHSD, 2),
                                   lesson(kGrouped));
  testing::check_against_reference(kernel(), make(1, 32, 1, 4097, 64, false, Layout::BSHD, 1),
                                   lesson(kGrouped));  // MQA decoding: one query, long K/V
}

// ---- Grid limits ---------------------------------------------------------------------------

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;  // 280000 blocks
  for (bool causal : {false, true}) {
    testing::check_against_reference(kernel(), make(7, 10000, 3, 5, 16, causal), lesson(kGrid));
    testing::check_against_reference(kernel(), make(7, 10000, 5, 3, 16, causal), lesson(kGrid));
  }
  testing::check_against_reference(kernel(), make(70000, 1, 2, 3, 16), lesson(kGrid));
  testing::check_against_reference(kernel(), make(7, 10000, 3, 5, 16, false, Layout::BSHD, 2500),
                                   lesson(kGrid));
}

TEST_CASE("grid limits: more than 65535 query blocks in one head") {
  // 128 * 65535 + 1 queries: more than 65535 blocks for any block of up to 128 queries, so a
  // grid that puts query blocks on y or z is refused; on x (up to 2^31 - 1) it fits.
  if (testing::sanitizer_light()) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT: 8.4M queries are too many for a sanitizer");
    return;
  }
  testing::check_against_reference(kernel(), make(1, 1, 128 * 65535 + 1, 3, 16), lesson(kGrid));
}

// ---- What the module accepts ---------------------------------------------------------------

TEST_CASE("supports causal, GQA/MQA and head_dim up to 128; refuses wider heads in one line") {
  CHECK(kernel().supports(make(1, 1, 4, 4, 128)).is_ok());
  CHECK(kernel().supports(make(1, 1, 4, 4, 128, true)).is_ok());
  CHECK(kernel().supports(make(1, 8, 4, 4, 64, true, Layout::BSHD, 2)).is_ok());
  CHECK(kernel().supports(make(1, 8, 4, 4, 64, false, Layout::BHSD, 1)).is_ok());
  for (int d : {129, 256}) {
    const Status wide = kernel().supports(make(1, 1, 4, 4, d));
    CHECK_FALSE(wide.is_ok());
    CHECK(wide.message().find("head_dim") != std::string::npos);
    CHECK(wide.message().find('\n') == std::string::npos);
  }
}

// ---- Going further (README, section 8): `./course grade 06 --extra` ------------------------
// Denser sweeps for a learner who changes the given kernel (P kept in registers, another
// tiling) or skips the rescale when no row max moved. The solution passes them as is.

namespace {

// Scores that rise (direction 1), fall (-1) or stay nearly flat (0) along the keys, over the
// same range of logits as check_rising.
void check_trend(const Problem& p, double direction) {
  const double step = direction * std::min(0.05, 24.0 / p.seq_k);
  const Inputs in = rising_inputs(p, testing::next_seed(), step);
  testing::check_inputs_against_reference(kernel(), p, in, lesson(kPitfalls));
}

}  // namespace

TEST_SUITE("extra") {
  TEST_CASE("extra: every head dim from 1 to 128 over several key tiles, causal and not") {
    for (int d = 1; d <= 128; d += (d < 64 ? 9 : 7))
      for (bool causal : {false, true})
        testing::check_against_reference(kernel(), make(1, 2, 193, 321, d, causal),
                                         lesson(kTiling));
  }

  TEST_CASE("extra: lengths around the 16-row groups and 64-key tiles, BSHD with GQA") {
    for (int n : {15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257})
      for (int d : {32, 64, 128}) {
        testing::check_against_reference(kernel(), make(2, 4, n, 257, d, true, Layout::BSHD, 2),
                                         lesson(kTiling));
        testing::check_against_reference(kernel(), make(2, 4, 257, n, d, false, Layout::BSHD, 2),
                                         lesson(kTiling));
      }
  }

  TEST_CASE("extra: scores that rise, fall or stay flat along the keys (a skipped rescale)") {
    for (double direction : {1.0, -1.0, 0.0})
      for (int d : {64, 128})
        for (bool causal : {false, true})
          check_trend(make(1, 2, 300, 1000, d, causal), direction);
  }
}
