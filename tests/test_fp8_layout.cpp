// The key order of module 09's FP8 rung (modules/09_hopper/fp8_layout.h), checked on the CPU:
// the order is a permutation of a 32-key group; every lane, packing its S accumulators into
// the e4m3 A registers as the kernel does, puts at each A position the key the quantize pass
// stores there; and a whole warp's P V, computed from those registers and the permuted V,
// equals P V computed directly.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>

#include "modules/09_hopper/fp8_layout.h"

using namespace attn::m09::fp8;

namespace {

// The S accumulator layout (wgmma m64nN, fp32): register `index` of lane (t, g) holds
// row g + 8*(r/2), column 8j + 2t + r%2 with j = index/4, r = index%4 (rows of one warp).
struct Cell {
  int row, col;
};
Cell accumulator_cell(int lane, int index) {
  const int t = lane % 4, g = lane / 4, j = index / 4, r = index % 4;
  return {g + 8 * (r / 2), 8 * j + 2 * t + r % 2};
}

// The e4m3 A operand layout (wgmma m64nNk32): byte e of register i of lane (t, g) is
// row g + 8*(i%2), k = 16*(i/2) + 4t + e.
Cell a_cell(int lane, int i, int e) {
  const int t = lane % 4, g = lane / 4;
  return {g + 8 * (i % 2), 16 * (i / 2) + 4 * t + e};
}

}  // namespace

TEST_CASE("the FP8 key order is a permutation of a 32-key group that keeps its halves") {
  std::array<int, kKeyGroup> seen{};
  for (int k = 0; k < kKeyGroup; ++k) {
    const int key = fp8_key_at_position(k);
    REQUIRE(key >= 0);
    REQUIRE(key < kKeyGroup);
    ++seen[key];
    // Keys 0..15 stay in positions 0..15: a V row padded to a multiple of 16 keys never has a
    // real key moved past its end.
    CHECK((key < 16) == (k < 16));
  }
  for (int key = 0; key < kKeyGroup; ++key) CHECK_MESSAGE(seen[key] == 1, "key " << key);
}

TEST_CASE("every lane packs into each A position the key the quantize pass stores there") {
  constexpr int kBlockN = 128;  // four 32-key blocks, as the kernel's K/V tile
  for (int lane = 0; lane < 32; ++lane)
    for (int block = 0; block < kBlockN / kKeyGroup; ++block)
      for (int i = 0; i < 4; ++i)
        for (int e = 0; e < 4; ++e) {
          const int index = fp8_accumulator_for(block, i, e);
          REQUIRE(index >= 0);
          REQUIRE(index < kBlockN / 2);
          const Cell from = accumulator_cell(lane, index);
          const Cell to = a_cell(lane, i, e);
          INFO("lane " << lane << " block " << block << " register " << i << " byte " << e);
          CHECK(from.row == to.row);                        // the same row of P
          CHECK(from.col / kKeyGroup == block);             // a key of this block
          CHECK(from.col % kKeyGroup == fp8_key_at_position(to.col));
        }
}

TEST_CASE("P V from the packed registers and the permuted V equals P V") {
  // One warp's 16 rows, one 32-key block, 8 columns of V.
  constexpr int kRows = 16, kCols = 8;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  double p[kRows][kKeyGroup], v[kKeyGroup][kCols];
  for (auto& row : p)
    for (double& x : row) x = uniform(rng);
  for (auto& row : v)
    for (double& x : row) x = uniform(rng);
  // What each lane's registers hold (the S accumulators of block 0: 16 per lane), packed.
  double a[kRows][kKeyGroup];
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 4; ++e) {
        const Cell from = accumulator_cell(lane, fp8_accumulator_for(0, i, e));
        const Cell to = a_cell(lane, i, e);
        a[to.row][to.col] = p[from.row][from.col];
      }
  // The quantize pass's V: position k of the group holds key fp8_key_at_position(k).
  double v_stored[kKeyGroup][kCols];
  for (int k = 0; k < kKeyGroup; ++k)
    for (int c = 0; c < kCols; ++c) v_stored[k][c] = v[fp8_key_at_position(k)][c];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      double want = 0, got = 0;
      for (int key = 0; key < kKeyGroup; ++key) want += p[r][key] * v[key][c];
      for (int k = 0; k < kKeyGroup; ++k) got += a[r][k] * v_stored[k][c];
      CHECK(std::abs(got - want) < 1e-12);
    }
}
