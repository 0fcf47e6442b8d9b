// The key order of module 09's FP8 rung (fp8_kernel.cuh): how a consumer thread hands its
// probabilities P to the second product O += P V without moving them between threads, and
// the order in which the quantize pass must therefore store the keys of V. Plain arithmetic,
// compiled for the host too, so that a CPU test (tests/test_fp8_layout.cpp) checks it.
//
// The two layouts that meet (t = lane % 4, g = lane / 4; rows inside a warp's 16 rows):
//   S accumulator (fp32, wgmma m64nN): register 4j + r holds row g + 8*(r/2), column
//     8j + 2t + (r%2). In a 32-key block (j = 4b .. 4b+3) a thread holds, per row, the 8
//     columns 2t + {0,1} + {0, 8, 16, 24}.
//   A operand (e4m3, wgmma m64nNk32): register a[i] holds four bytes, row g + 8*(i%2),
//     k = 16*(i/2) + 4t + {0,1,2,3} (low byte first).
// For 16-bit types these agree (module 09's rescale_and_pack only packs pairs); for 8-bit
// types they do not: the thread holds columns 2t, 2t+1, 2t+8, 2t+9, ... but must supply
// k = 4t .. 4t+3, 4t+16 .. 4t+19. Rather than exchanging values between the four threads of a
// quad (shuffles on every tile), the kernel uses that the keys of P V are summed over:
//   O[row][d] = sum over keys c of P[row][c] * V[c][d]
// is unchanged when the same permutation is applied to P's columns and to V's rows. So each
// thread packs its 8 values of a row in the order they sit in its registers, and the quantize
// pass stores V's keys of each 32-key group permuted to match: A position k of the group
// holds key fp8_key_at_position(k).
#pragma once

#include "common/problem.h"  // ATTN_HOST_DEVICE

namespace attn::m09::fp8 {

constexpr int kKeyGroup = 32;  // keys per k32 step of O += P V

// The S accumulator register (of the thread's kBlockN/2) that goes to byte `e` (0..3) of A
// register `i` (0..3) of 32-key block `block`: the four bytes are the register pairs of two
// adjacent 8-column blocks, j = 4*block + 2*(i/2) + e/2, for the row half i%2.
ATTN_HOST_DEVICE constexpr int fp8_accumulator_for(int block, int i, int e) {
  return 4 * (4 * block + 2 * (i / 2) + e / 2) + 2 * (i % 2) + e % 2;
}

// The original key (0..31, inside its group) stored at A position k (0..31): k = 4t + e + 16h
// with e = k % 4, t = (k / 4) % 4, h = k / 16 is byte e of register 2h (or 2h+1) of thread t,
// which holds accumulator column 8 * (2h + e/2) + 2t + e%2 (the formula above with block 0).
// The permutation keeps keys 0..15 among positions 0..15 and 16..31 among 16..31.
ATTN_HOST_DEVICE constexpr int fp8_key_at_position(int k) {
  const int e = k % 4, t = (k / 4) % 4, h = k / 16;
  return 2 * t + (e % 2) + 8 * (2 * h + e / 2);
}

}  // namespace attn::m09::fp8
