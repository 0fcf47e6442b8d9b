// Grader for module 02 (GPU): K/V tiles in shared memory, one thread per query, three passes.
// Built twice: grade_02 (exercise), check_02 (solution). Without a GPU it exits 77 (skipped).
#include "modules/02_smem_tiling/smem_tiling.h"
#include "tests/support.h"

using namespace attn;

namespace {
const Kernel& kernel() { return testing::kernel_under_test(2, testing::impl_under_test()); }
testing::CheckOptions lesson(const char* section) {
  testing::CheckOptions o;
  o.lesson = section;
  return o;
}
const char* kQueries =
    "modules/02_smem_tiling/README.md, section 2 (blocks of queries, the 1-D grid)";
const char* kTiles =
    "modules/02_smem_tiling/README.md, section 2 (the tile loads and the loops over tiles)";
const char* kBarriers =
    "modules/02_smem_tiling/README.md, section 3 (barriers; threads past the last query)";
}  // namespace

TEST_CASE("one small head") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 8, 8, 16), lesson(kTiles));
}

TEST_CASE("sequence lengths around the block and tile sizes: 1, 2, 17, 63, 64, 65, 127, 128, "
          "129, 1000") {
  for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
    testing::check_against_reference(kernel(), Problem::make(1, 2, n, n, 64), lesson(kTiles));
}

TEST_CASE("a long sequence: 4097") {
  testing::check_against_reference(kernel(), Problem::make(1, 1, 4097, 4097, 64), lesson(kTiles));
}

TEST_CASE("seq_q != seq_k") {
  for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {65, 2}})
    testing::check_against_reference(kernel(), Problem::make(1, 2, sq, sk, 64), lesson(kTiles));
}

TEST_CASE("a partial last key tile: seq_k = 32k +- 1 and 64k +- 1") {
  // One key past a tile boundary (a tile holding a single key) and one short of it.
  for (int sk : {31, 33, 63, 65, 127, 129, 255, 257})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 70, sk, 64), lesson(kTiles));
}

TEST_CASE("a last query block with one query, over many key tiles") {
  // 63 of the 64 threads of the last block have no query. If they leave early, their share
  // of every tile is never loaded and the one remaining query reads stale shared memory.
  for (auto [sq, sk] : {std::pair{65, 300}, {129, 1000}})
    testing::check_against_reference(kernel(), Problem::make(2, 2, sq, sk, 64), lesson(kBarriers));
}

TEST_CASE("head dims 1, 16, 32, 59, 64, 80, 96, 128") {
  for (int d : {1, 16, 32, 59, 64, 80, 96, 128})
    testing::check_against_reference(kernel(), Problem::make(1, 2, 65, 70, d), lesson(kTiles));
}

TEST_CASE("several batches and heads in one launch") {
  testing::check_against_reference(kernel(), Problem::make(3, 5, 100, 90, 64), lesson(kQueries));
}

TEST_CASE("large logits: scores in the hundreds (exp overflows without the max)") {
  testing::CheckOptions o = lesson(kTiles);
  o.range = 30.0f;
  testing::check_against_reference(kernel(), Problem::make(1, 2, 128, 128, 64), o);
}

TEST_CASE("a custom softmax scale") {
  Problem p = Problem::make(1, 2, 50, 60, 32);
  p.scale = 0.37f;
  testing::check_against_reference(kernel(), p, lesson(kTiles));
}

TEST_CASE("BSHD layout (heads interleaved per token)") {
  testing::check_against_reference(kernel(), Problem::make(2, 4, 65, 33, 64, false, Layout::BSHD),
                                   lesson(kTiles));
}

TEST_CASE("padded rows: O's row stride is larger than head_dim") {
  Problem p = Problem::make(2, 3, 37, 41, 20);
  p.o = {3 * 37 * 24, 37 * 24, 24};  // 4 unused floats after each output row
  p.q = {3 * 37 * 21, 37 * 21, 21};  // and 1 after each query row
  p.k = {3 * 41 * 23, 41 * 23, 23};  // and 3 after each key row
  testing::check_against_reference(kernel(), p, lesson(kTiles));
}

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  // A grid of (query blocks, batch*heads) would need gridDim.y = 70000; the limit is 65535.
  testing::check_against_reference(kernel(), testing::grid_limit_problem(3, 5, 16), lesson(kQueries));
}

TEST_CASE("refuses the causal mask with a clear message") {
  Problem p = Problem::make(1, 1, 4, 4, 16, /*causal=*/true);
  const Status s = kernel().supports(p);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("causal") != std::string::npos);
}

TEST_CASE("refuses head_dim > 128 with a clear message, accepts 128") {
  const Status s = kernel().supports(Problem::make(1, 1, 4, 4, 129));
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("head_dim <= 128 (got 129)") != std::string::npos);
  CHECK(kernel().supports(Problem::make(1, 1, 4, 4, 128)).is_ok());
}

// Going further (lesson 02, section 11): `./course grade 02 --extra`. These shapes are the
// ones a changed tile copy or tile size breaks first; the solution passes them as it is.
TEST_SUITE("extra") {
  TEST_CASE("extra: 16-byte tile copies: every row alignment and head dim near a multiple of 4") {
    // A float4 path is legal only when a row starts on a 16-byte boundary and head_dim % 4 ==
    // 0; everything else must take the 4-byte path and still be right.
    for (int d : {59, 60, 61, 62, 63, 64, 96, 128})
      for (int stride_extra : {0, 1, 2, 3, 4}) {
        Problem p = Problem::make(1, 2, 70, 97, d);
        const int ks = d + stride_extra, vs = d + (stride_extra + 2) % 5;
        p.k = {int64_t(2) * 97 * ks, int64_t(97) * ks, ks};
        p.v = {int64_t(2) * 97 * vs, int64_t(97) * vs, vs};
        testing::check_against_reference(kernel(), p, lesson(kTiles));
      }
  }

  TEST_CASE("extra: other tile sizes: key counts around multiples of 16, 32, 64 at every D") {
    // With 64-key tiles (dynamic shared memory at D = 128) or 16-key tiles, the partial last
    // tile moves: these lengths put one key past, or one short of, each boundary.
    for (int sk : {15, 16, 17, 47, 48, 49, 63, 64, 65, 127, 128, 129, 191, 193})
      for (int d : {32, 96, 128})
        testing::check_against_reference(kernel(), Problem::make(1, 2, 65, sk, d),
                                         lesson(kTiles));
  }

  TEST_CASE("extra: a query tile per block: seq_q around multiples of 64 and 128, BSHD") {
    // Staging Q in shared memory (section 5's padded rows) or changing kQueriesPerBlock moves
    // the last query block.
    for (int sq : {63, 64, 65, 127, 128, 129, 255, 257})
      testing::check_against_reference(
          kernel(), Problem::make(2, 3, sq, 100, 64, false, Layout::BSHD), lesson(kQueries));
  }
}
