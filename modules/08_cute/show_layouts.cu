// Module 08: prints the recipe's layouts on the CPU, as tables a learner can read (README,
// section 2, "printing"). Built twice: show_layouts_08 over the exercise, show_layouts_08_solution
// over the solution. It reads the recipe through the same probes as the host grader, then
// prints the Hopper atoms that module 09 uses in their place (README, section 6).
//   build/release/show_layouts_08             your recipe
//   build/release/show_layouts_08_solution    the solution's
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdio>
#include <vector>

#include "modules/08_cute/cute_attention.h"

namespace probes = attn::m08::ATTN_IMPL;

namespace {

void head_layout() {
  std::printf("1. head_layout(rows = 4, cols = 8, row_stride = 2048): offset of (row, col)\n");
  for (int r = 0; r < 4; ++r) {
    std::printf("   row %d:", r);
    for (int c = 0; c < 8; ++c) std::printf(" %5lld", (long long)probes::probe_head_offset(4, 8, 2048, r, c));
    std::printf("\n");
  }
}

// Which 16-byte chunk of its 128-byte row each logical chunk lands in: the swizzle, visible.
void shared_tile() {
  std::printf("\n2. shared_tile<64, 64>: the physical chunk (offset / 8 %% 8) of each logical "
              "chunk, rows 0-7\n   (swizzled: every column of this table holds 8 different "
              "chunks, so an ldmatrix of 8 rows hits 8 bank groups)\n");
  for (int r = 0; r < 8; ++r) {
    std::printf("   row %d:", r);
    for (int c = 0; c < 8; ++c) std::printf(" %d", probes::probe_shared_offset(64, 64, r, 8 * c) / 8 % 8);
    std::printf("\n");
  }
}

void global_copy() {
  std::printf("\n3. global_copy<T, 128, 64>: the thread that copies each 16-byte chunk, rows 0-7 "
              "of a 64 x 64 tile\n   (coalesced: consecutive threads, consecutive chunks of a row)\n");
  int owner[8][8];
  for (auto& row : owner)
    for (int& o : row) o = -1;
  for (int t = 0; t < 128; ++t)
    for (const auto& c : probes::probe_copy_coords(64, t))
      if (c.row < 8 && c.col % 8 == 0) owner[c.row][c.col / 8] = t;
  for (int r = 0; r < 8; ++r) {
    std::printf("   row %d:", r);
    for (int c = 0; c < 8; ++c) std::printf(" %4d", owner[r][c]);
    std::printf("\n");
  }
}

void tiled_mma() {
  std::printf("\n4. tiled_mma<T, 4>: the thread holding S(row, key) of a 128 x 64 score tile, "
              "rows 0-15, keys 0-7\n");
  std::vector<std::vector<int>> owner(128, std::vector<int>(64, -1));
  for (int t = 0; t < 128; ++t)
    for (const auto& c : probes::probe_s_coords(t)) owner[c.row][c.col] = t;
  for (int r = 0; r < 16; ++r) {
    std::printf("   row %2d:", r);
    for (int k = 0; k < 8; ++k) std::printf(" %3d", owner[r][k]);
    std::printf("\n");
  }
  std::printf("   the warp owning each band of 8 rows (rows 0-7, 8-15, ..., 120-127):\n   ");
  for (int r = 0; r < 128; r += 8) std::printf(" %d", owner[r][0] < 0 ? -1 : owner[r][0] / 32);
  std::printf("\n");
}

void accumulator_as_a() {
  std::printf("\n7. accumulator_as_a: thread 0's P registers (from S) beside what the MMA "
              "expects of an A fragment\n");
  const auto p = probes::probe_p_coords(0), a = probes::probe_a_coords(0);
  for (size_t i = 0; i < p.size() && i < 16; ++i)
    std::printf("   value %2zu: P(%3d, %2d)  expected (%3d, %2d)%s\n", i, p[i].row, p[i].col,
                a[i].row, a[i].col, p[i].row == a[i].row && p[i].col == a[i].col ? "" : "  <- differs");
}

// Module 09's atoms, printed by CuTe itself.
void hopper_atoms() {
  using namespace cute;
  std::printf("\n--- Module 09 (Hopper): the same program with other atoms ---\n");
  std::printf("GMMA's 128-byte swizzle atom for 16-bit K-major tiles (8 rows x 64 elements),\n"
              "the layout TMA writes and wgmma reads; compare with shared_tile's atom above:\n");
  print(GMMA::Layout_K_SW128_Atom<bfloat16_t>{});
  std::printf("\nwarpgroup MMA, 64 x 128 x 16, A and B from shared memory (128 threads):\n");
  print(make_tiled_mma(SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));
  std::printf("\n");
}

}  // namespace

int main() {
  head_layout();
  shared_tile();
  global_copy();
  tiled_mma();
  accumulator_as_a();
  hopper_atoms();
  return 0;
}
