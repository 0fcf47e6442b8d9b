// The checks of the FlashAttention-2 forward on the tensor cores, f16 and bf16, shared by the
// graders of module 07 (written by hand, tests/test_07_tensor_cores.cpp) and module 08 (the
// same kernel written with CuTe, tests/test_08_cute.cpp): one tolerance, one set of shapes.
// A grader includes this header once and defines, in namespace attn::tensor_core_cases, the
// three things declared at its top: the kernel under test, the module's hints for a wrong but
// finite output, and the README sections each kind of check points at.
//
// The reference is the double-precision CPU attention on the SAME 16-bit inputs (the random
// inputs are rounded to the dtype before anything runs), so the only differences left are the
// kernel's own roundings: P rounded to 16 bits before P V, and O rounded on store. The
// tolerance on the relative L2 error is default_tolerance(dtype) (common/compare.h): 2e-3 for
// f16, 1e-2 for bf16 -- a correct kernel measures about 3e-4 and 2.4e-3 (module 07's README,
// section 6), while a wrong fragment, mask or rescale gives 1e-1 or more.
//
// Every check runs in both dtypes: the shapes that break tiled kernels (odd lengths, seq_q !=
// seq_k, head dims that are not 64 or 128, causal rows that see no key, large and rising
// logits), strided and packed layouts, rows that are not 16-byte aligned (the 16-byte
// cp.async path must fall back), GQA/MQA and grids past 65535.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/compare.h"
#include "common/problem.h"
#include "common/registry.h"
#include "common/runner.h"
#include "tests/support.h"

namespace attn::tensor_core_cases {

// ---- What the including grader defines -----------------------------------------------------

const Kernel& kernel();  // the module's forward, exercise or solution
// Explanations of a wrong but finite output in the module's terms (testing::ExtraHints).
std::vector<std::string> hints(const Problem& p, const Inputs& in, const CheckResult& r);
// The README section ("modules/NN_name/README.md, section 3 (...)") each kind of check points
// at when it fails.
struct Lessons {
  const char* first;      // the first and smallest check: one 16 x 16 head
  const char* tiles;      // sequence lengths and key tiles: S = Q K^T and O += P V per tile
  const char* softmax;    // causal masks, rows that see no key, large and rising scores
  const char* shapes;     // long sequences, head dims, partial query blocks, batches, grids
  const char* strides;    // BSHD, padded O rows, packed QKV views, grouped K/V heads
  const char* alignment;  // rows that are not 16-byte aligned: the copies' fallback
};
extern const Lessons kLessons;

// ---- The checks ----------------------------------------------------------------------------

namespace {

constexpr DType kDtypes[] = {DType::bf16, DType::f16};

testing::CheckOptions lesson(const char* section, DType t) {
  testing::CheckOptions o;
  o.lesson = section;
  o.tolerance = default_tolerance(t);
  o.extra_hints = hints;
  return o;
}

using testing::make_problem;  // Problem::make with the dtype set (tests/support.h)

// Fresh random inputs (rounded to p.dtype by random_inputs), run, compare.
bool check(const Problem& p, const char* section, float range = 1.0f) {
  testing::CheckOptions o = lesson(section, p.dtype);
  o.range = range;
  return testing::check_against_reference(kernel(), p, o);
}

// Scores that rise (direction 1), fall (-1) or stay nearly flat (0) along the keys, so that an
// online softmax's running max moves at every key tile (or never).
void check_trend(const Problem& p, double direction) {
  const double step = direction * std::min(0.05, 24.0 / p.seq_k);
  // check_kernel rounds these float inputs to p.dtype for the reference, as the upload does.
  const Inputs in = testing::rising_inputs(p, testing::next_seed(), step);
  testing::check_inputs_against_reference(kernel(), p, in, lesson(kLessons.softmax, p.dtype));
}

void check_rising(const Problem& p) { check_trend(p, 1.0); }

// ---- Q, K, V as views into ONE packed 16-bit buffer: testing::check_packed_qkv -------------
// As in module 06: a fused QKV projection writes [B, S, H + 2*KVH, D]; Q, K and V are views
// into it (tests/support.h); an odd shift puts every pointer 2 bytes off a 16-byte boundary.

bool check_packed(const testing::PackedQkv& c, DType t, const char* section) {
  return testing::check_packed_qkv(kernel(), c, t, lesson(section, t));
}

}  // namespace

// ---- Shapes --------------------------------------------------------------------------------

TEST_CASE("one small head, f16 and bf16") {
  for (DType t : kDtypes) check(make_problem(1, 1, 16, 16, 64, false, t), kLessons.first);
}

TEST_CASE("sequence lengths 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000, causal and not") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
        check(make_problem(1, 2, n, n, 64, causal, t), kLessons.tiles);
}

TEST_CASE("a long sequence: 4097, causal and not, head dims 64 and 128") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int d : {64, 128}) check(make_problem(1, 1, 4097, 4097, d, causal, t), kLessons.shapes);
}

TEST_CASE("seq_q != seq_k, both ways, causal and not") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {64, 65},
                            {65, 64}, {100, 129}, {129, 100}})
        check(make_problem(1, 2, sq, sk, 64, causal, t),
              causal ? kLessons.softmax : kLessons.tiles);
}

TEST_CASE("causal with seq_q > seq_k: the first seq_q - seq_k rows see no key and are 0") {
  // A row that sees no key has l = 0: its output must be written, and be 0, not 0/0. With
  // 140 queries over 100 keys the first query block holds both kinds of rows.
  for (DType t : kDtypes)
    for (int d : {16, 64, 128})
      for (auto [sq, sk] : {std::pair{1000, 17}, {65, 2}, {4097, 1}, {300, 100}, {140, 100}})
        check(make_problem(2, 2, sq, sk, d, true, t), kLessons.softmax);
}

TEST_CASE("head dims 1, 8, 16, 32, 40, 59, 64, 72, 80, 96, 127, 128") {
  // Below 64 the tile is padded to 64 columns, above to 128: the padding must be zeros in
  // shared memory and never stored. Dims that are not a multiple of 8 take the element path.
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int d : {1, 8, 16, 32, 40, 59, 64, 72, 80, 96, 127, 128}) {
        check(make_problem(1, 2, 130, 70, d, causal, t), kLessons.shapes);
        check(make_problem(1, 2, 70, 130, d, causal, t), kLessons.shapes);
      }
}

TEST_CASE("many key tiles at every head dim") {
  for (DType t : kDtypes)
    for (int d : {32, 59, 64, 96, 128}) {
      check(make_problem(1, 2, 300, 1000, d, false, t), kLessons.tiles);
      check(make_problem(1, 2, 300, 1000, d, true, t), kLessons.tiles);
    }
}

TEST_CASE("a last query block with one query, over many key tiles") {
  // The production blocks hold 128 queries (4 warps x 32 rows): 129 leaves one query in the
  // last block and 65 a block whose last two warps have no query; their rows must still load
  // their share of every tile and reach every barrier.
  for (DType t : kDtypes)
    for (int sq : {65, 129})
      for (bool causal : {false, true})
        for (int d : {64, 128}) check(make_problem(2, 2, sq, 300, d, causal, t), kLessons.shapes);
}

TEST_CASE("several batches and heads in one launch") {
  for (DType t : kDtypes) {
    check(make_problem(3, 5, 100, 90, 64, false, t), kLessons.shapes);
    check(make_problem(3, 5, 300, 280, 96, true, t), kLessons.shapes);
  }
}

// ---- Numerics ------------------------------------------------------------------------------

TEST_CASE("large logits: scores in the hundreds") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int d : {64, 128}) {
        check(make_problem(1, 2, 128, 300, d, causal, t), kLessons.softmax, 30.0f);
        check(make_problem(1, 2, 300, 128, d, causal, t), kLessons.softmax, 30.0f);
      }
}

TEST_CASE("rising scores: the running max moves at every key tile") {
  for (DType t : kDtypes) {
    for (int n : {129, 1000, 4097}) check_rising(make_problem(1, 2, n, n, 64, false, t));
    for (int d : {32, 59, 128}) check_rising(make_problem(1, 2, 200, 1000, d, false, t));
    check_rising(make_problem(1, 2, 1000, 1000, 128, true, t));
    check_rising(make_problem(1, 8, 300, 700, 64, false, t, Layout::BSHD, 2));
  }
}

TEST_CASE("a custom softmax scale") {
  for (DType t : kDtypes) {
    Problem p = make_problem(1, 2, 50, 60, 64, false, t);
    p.scale = 0.37f;
    check(p, kLessons.shapes);
  }
}

// ---- Layouts and strides -------------------------------------------------------------------

TEST_CASE("BSHD layout (heads interleaved per token), causal and not") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (auto [sq, sk] : {std::pair{65, 33}, {33, 65}, {200, 200}})
        for (int d : {59, 64, 128})
          check(make_problem(2, 4, sq, sk, d, causal, t, Layout::BSHD), kLessons.strides);
}

TEST_CASE("padding between O's rows and heads must stay untouched") {
  for (DType t : kDtypes)
    for (bool causal : {false, true}) {
      Problem p = make_problem(2, 3, 37, 41, 24, causal, t);
      p.o = {3 * (37 * 32 + 8), 37 * 32 + 8, 32};  // 8 unused elements after every row
      p.q = {3 * 37 * 25, 37 * 25, 25};            // Q rows 1 element apart: not aligned
      check(p, kLessons.strides);
      Problem q = make_problem(2, 4, 130, 70, 64, causal, t, Layout::BSHD);
      q.o = {130 * 4 * 72, 72, 4 * 72};  // BSHD with 8 elements after every row
      check(q, kLessons.strides);
    }
}

TEST_CASE("Q, K, V as views into one packed QKV buffer; O with padded rows") {
  for (DType t : kDtypes) {
    check_packed({2, 4, 4, 77, 64}, t, kLessons.strides);
    check_packed({2, 4, 4, 77, 64, true, 0, 0, 8}, t, kLessons.strides);
    check_packed({1, 3, 3, 130, 128, true}, t, kLessons.strides);
    check_packed({2, 8, 2, 70, 64, false}, t, kLessons.strides);  // GQA-packed [B, S, H + 2*KVH, D]
    check_packed({1, 8, 1, 129, 128, true, 0, 0, 8}, t, kLessons.strides);
  }
}

TEST_CASE("rows not 16-byte aligned: the cp.async path must fall back") {
  for (DType t : kDtypes) {
    // Row strides of 68 and 66 elements (head_dim 64): K rows 8 bytes, V rows 4 bytes off.
    Problem p = make_problem(1, 2, 70, 100, 64, false, t);
    p.k = {2 * 100 * 68, 100 * 68, 68};
    p.v = {2 * 100 * 66, 100 * 66, 66};
    check(p, kLessons.alignment);
    // Every stride a multiple of 8 elements, every pointer 2 bytes (one element) off.
    check_packed({1, 2, 2, 70, 64, false, 1, 1}, t, kLessons.alignment);
    check_packed({2, 2, 2, 100, 128, true, 3, 1, 8}, t, kLessons.alignment);
  }
}

// ---- Grouped K/V heads ---------------------------------------------------------------------

TEST_CASE("grouped K/V heads: GQA with 8 query heads over 2 and 4 K/V heads, and MQA") {
  for (DType t : kDtypes) {
    for (int kv : {4, 2, 1})
      for (bool causal : {false, true})
        for (Layout layout : {Layout::BHSD, Layout::BSHD}) {
          check(make_problem(2, 8, 100, 130, 64, causal, t, layout, kv), kLessons.strides);
          check(make_problem(1, 8, 130, 65, 128, causal, t, layout, kv), kLessons.strides);
        }
    // MQA decoding
    check(make_problem(1, 32, 1, 4097, 128, false, t, Layout::BSHD, 1), kLessons.strides);
  }
}

// ---- Grid limits ---------------------------------------------------------------------------

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;  // 4 x 70000 blocks
  for (DType t : kDtypes) {
    check(make_problem(7, 10000, 3, 5, 16, true, t), kLessons.shapes);
    check(make_problem(70000, 1, 2, 3, 16, false, t), kLessons.shapes);
  }
}

TEST_CASE("grid limits: more than 65535 query blocks in one head") {
  if (testing::sanitizer_light()) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT: 8.4M queries are too many for a sanitizer");
    return;
  }
  // 128 * 65535 + 1 queries: more than 65535 blocks of up to 128 queries (the largest block).
  check(make_problem(1, 1, 128 * 65535 + 1, 3, 16, false, DType::bf16), kLessons.shapes);
}

// ---- What the module accepts ---------------------------------------------------------------

TEST_CASE("supports f16/bf16, causal, GQA and head_dim up to 128; refuses the rest in one line") {
  for (DType t : kDtypes) {
    CHECK(kernel().supports(make_problem(1, 1, 4, 4, 128, false, t)).is_ok());
    CHECK(kernel().supports(make_problem(1, 8, 4, 4, 64, true, t, Layout::BSHD, 2)).is_ok());
    const Status wide = kernel().supports(make_problem(1, 1, 4, 4, 129, false, t));
    CHECK_FALSE(wide.is_ok());
    CHECK(wide.message().find("head_dim") != std::string::npos);
    CHECK(wide.message().find('\n') == std::string::npos);
  }
  // f32: refused by a 16-bit-only module (08) in one line; module 07, which registers an fp32
  // forward too (its TF32 rungs), takes it (its grader checks the fp32 kernels).
  const Status f32 = kernel().supports(make_problem(1, 1, 4, 4, 64, false, DType::f32));
  if (kernel().accepts(DType::f32)) {
    CHECK(f32.is_ok());
    CHECK(kernel().native_dtype() == DType::bf16);
  } else {
    CHECK_FALSE(f32.is_ok());
    CHECK(f32.message().find("bf16") != std::string::npos);
    CHECK(f32.message().find('\n') == std::string::npos);
  }
}

// ---- Going further (the README's last section): `./course grade NN --extra` ----------------
// Denser sweeps for a learner who changes the given pipeline (Q in registers at D = 128, other
// tile shapes) or skips the O rescale when no row max moved. The solution passes them as is.

TEST_SUITE("extra") {
  TEST_CASE("extra: every head dim from 1 to 128 over several key tiles, causal and not") {
    for (DType t : kDtypes)
      for (int d = 1; d <= 128; d += (d < 64 ? 9 : 7))
        for (bool causal : {false, true})
          check(make_problem(1, 2, 193, 321, d, causal, t), kLessons.shapes);
  }

  TEST_CASE("extra: lengths around 32, 64 and 128 rows and keys, BSHD with GQA") {
    for (DType t : kDtypes)
      for (int n : {31, 32, 33, 95, 96, 97, 191, 192, 193})
        for (int d : {64, 96, 128}) {
          check(make_problem(2, 4, n, 257, d, true, t, Layout::BSHD, 2), kLessons.shapes);
          check(make_problem(2, 4, 257, n, d, false, t, Layout::BSHD, 2), kLessons.shapes);
        }
  }

  TEST_CASE("extra: scores that rise, fall or stay flat along the keys (a skipped rescale)") {
    for (DType t : kDtypes)
      for (double direction : {1.0, -1.0, 0.0})
        for (int d : {64, 128})
          for (bool causal : {false, true})
            check_trend(make_problem(1, 2, 300, 1000, d, causal, t), direction);
  }
}

}  // namespace attn::tensor_core_cases
