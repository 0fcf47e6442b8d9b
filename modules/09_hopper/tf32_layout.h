// The key order of module 09's 3xTF32 rung (tf32_kernel.cuh): how a consumer thread hands its
// probabilities P to the second product O += P V without moving them between threads, and the
// order in which the split pass must therefore store the keys of V. Plain arithmetic, compiled
// for the host too, so that a CPU test (tests/test_tf32_layout.cpp) checks it.
//
// The two layouts that meet (t = lane % 4, g = lane / 4; rows inside a warp's 16 rows):
//   S accumulator (fp32, wgmma m64nN): register 4j + r holds row g + 8*(r/2), column
//     8j + 2t + (r%2): in each 8-key block a thread holds keys 2t and 2t + 1 of its rows.
//   A operand (tf32, wgmma m64nNk8): a[i] holds row g + 8*(i%2), k = t + 4*(i/2): in each
//     k8 step a thread supplies k = t and k = t + 4.
// The sum over the keys of O[row][d] = sum_c P[row][c] V[c][d] does not care about their
// order, as long as P's columns and V's rows agree. So the thread passes its accumulator
// 4j + r unchanged as A register (r%2)*2 + r/2 of step j (keys 2t -> k = t, 2t + 1 ->
// k = t + 4), and the split pass stores the keys of each 8-key group of V in the matching
// order: position k of the group holds key tf32_key_at_position(k).
#pragma once

#include "common/problem.h"  // ATTN_HOST_DEVICE

namespace attn::m09::tf32 {

constexpr int kKeyGroup = 8;  // keys per k8 step of O += P V

// The A register (0..3) of a k8 step that S accumulator register 4j + r (r = 0..3) of the same
// 8-key block becomes: r = 0 (row g, key 2t) -> a[0] (row g, k = t); r = 1 (row g, key
// 2t + 1) -> a[2] (row g, k = t + 4); r = 2 -> a[1]; r = 3 -> a[3].
ATTN_HOST_DEVICE constexpr int tf32_a_register_for(int r) { return (r % 2) * 2 + r / 2; }

// The key (0..7, inside its group) stored at A position k (0..7): k = t holds key 2t, k = t + 4
// holds key 2t + 1. So positions 0..7 hold keys 0, 2, 4, 6, 1, 3, 5, 7.
ATTN_HOST_DEVICE constexpr int tf32_key_at_position(int k) { return 2 * (k % 4) + k / 4; }

// The inverse: the position of key c (0..7) in its group.
ATTN_HOST_DEVICE constexpr int tf32_position_of_key(int c) { return (c % 2) * 4 + c / 2; }

}  // namespace attn::m09::tf32
