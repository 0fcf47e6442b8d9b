// The key order of module 09's 3xTF32 rung (modules/09_hopper/tf32_layout.h), checked on the
// CPU: the order is a permutation of an 8-key group; every lane, passing its S accumulators
// to the tf32 A registers as the kernel does (split_p in tf32_kernel.cuh), puts at each A
// position the key the split pass stores there; and a whole warp's P V, computed from those
// registers and the permuted V, equals P V computed directly.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>

#include "modules/09_hopper/tf32_layout.h"

using namespace attn::m09::tf32;

namespace {

// The S accumulator layout (wgmma m64nN, fp32): register 4j + r of lane (t, g) holds row
// g + 8*(r/2), column 8j + 2t + r%2 (rows of one warp).
struct Cell {
  int row, col;
};
Cell accumulator_cell(int lane, int j, int r) {
  const int t = lane % 4, g = lane / 4;
  return {g + 8 * (r / 2), 8 * j + 2 * t + r % 2};
}

// The tf32 A operand layout (wgmma m64nNk8, as mma.sync.m16n8k8): register i of lane (t, g)
// is row g + 8*(i%2), k = t + 4*(i/2).
Cell a_cell(int lane, int i) {
  const int t = lane % 4, g = lane / 4;
  return {g + 8 * (i % 2), t + 4 * (i / 2)};
}

}  // namespace

TEST_CASE("the 3xTF32 key order is a permutation of an 8-key group, and position_of_key its inverse") {
  std::array<int, kKeyGroup> seen{};
  for (int k = 0; k < kKeyGroup; ++k) {
    const int key = tf32_key_at_position(k);
    REQUIRE(key >= 0);
    REQUIRE(key < kKeyGroup);
    ++seen[key];
    CHECK(tf32_position_of_key(key) == k);
  }
  for (int key = 0; key < kKeyGroup; ++key) CHECK_MESSAGE(seen[key] == 1, "key " << key);
  std::array<int, 4> registers{};
  for (int r = 0; r < 4; ++r) ++registers[tf32_a_register_for(r)];
  for (int i = 0; i < 4; ++i) CHECK_MESSAGE(registers[i] == 1, "A register " << i);
}

TEST_CASE("every lane passes into each A position the key the split pass stores there") {
  constexpr int kBlockN = 64;  // eight 8-key blocks, as the kernel's K/V tile
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < kBlockN / kKeyGroup; ++j)
      for (int r = 0; r < 4; ++r) {
        const Cell from = accumulator_cell(lane, j, r);
        const Cell to = a_cell(lane, tf32_a_register_for(r));
        INFO("lane " << lane << " block " << j << " accumulator " << r);
        CHECK(from.row == to.row);              // the same row of P
        CHECK(from.col / kKeyGroup == j);       // a key of this block
        CHECK(from.col % kKeyGroup == tf32_key_at_position(to.col));
      }
}

TEST_CASE("P V from the passed registers and the permuted V equals P V") {
  // One warp's 16 rows, one 8-key block, 8 columns of V.
  constexpr int kRows = 16, kCols = 8;
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  double p[kRows][kKeyGroup], v[kKeyGroup][kCols];
  for (auto& row : p)
    for (double& x : row) x = uniform(rng);
  for (auto& row : v)
    for (double& x : row) x = uniform(rng);
  double a[kRows][kKeyGroup];
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      const Cell from = accumulator_cell(lane, 0, r);
      const Cell to = a_cell(lane, tf32_a_register_for(r));
      a[to.row][to.col] = p[from.row][from.col];
    }
  // The split pass's V: position k of the group holds key tf32_key_at_position(k).
  double v_stored[kKeyGroup][kCols];
  for (int k = 0; k < kKeyGroup; ++k)
    for (int c = 0; c < kCols; ++c) v_stored[k][c] = v[tf32_key_at_position(k)][c];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      double want = 0, got = 0;
      for (int key = 0; key < kKeyGroup; ++key) want += p[r][key] * v[key][c];
      for (int k = 0; k < kKeyGroup; ++k) got += a[r][k] * v_stored[k][c];
      CHECK(std::abs(got - want) < 1e-12);
    }
}
