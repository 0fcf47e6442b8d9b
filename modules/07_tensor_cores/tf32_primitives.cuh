// Module 07, given: the fp32 rungs' hardware primitives (README, section 10). fp32 Q, K, V and O
// in memory, products on the tensor cores in TF32:
//   mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32   one warp: D(16x8, f32) += A(16x8,
//                                                          tf32) * B(8x8, tf32) (HMMA.1688.F32.TF32)
//   cvt.rna.tf32.f32                                       fp32 -> tf32, round to nearest, ties
//                                                          away from zero
// TF32 is fp32's sign and 8-bit exponent with only 10 of its 23 mantissa bits: a tf32 value
// is an fp32 bit pattern whose low 13 bits are zero, held in a 32-bit register. The mma reads
// the top 19 bits of each operand register and ignores the low 13 (CUTLASS's 3xTF32 relies on
// the same truncation); the products of two tf32 values are exact in fp32, and the sums are
// fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/convert.cuh"
#include "modules/07_tensor_cores/mma_primitives.cuh"

namespace attn::m07 {

// ---- The fragment layouts of mma.m16n8k8 with .tf32 --------------------------------------
// With lane L, g = L / 4 (groupID) and t = L % 4 (threadID_in_group), one 32-bit element per
// register (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32; the same layouts as CUTLASS's
// SM80_16x8x8_F32TF32TF32F32_TN traits):
//
//   A, 16x8 (rows x k), 4 registers:     a0 = A[g][t]      a1 = A[g+8][t]
//                                        a2 = A[g][t+4]    a3 = A[g+8][t+4]
//   B, 8x8 (k x cols), 2 registers:      b0 = B[t][g]      b1 = B[t+4][g]
//   C/D, 16x8 (rows x cols), 4 floats:   c0, c1 = C[g][2t, 2t+1]    c2, c3 = C[g+8][2t, 2t+1]
//
// C is laid out as for m16n8k16, but A and B are not: a lane's k indices are t and t + 4, not
// 2t and 2t + 1. Two consequences the kernel uses (tf32_kernel.cuh):
//  - The sum over k does not care which k index is which, only that A and B agree. So a lane
//    may feed any two of "its" columns as k = t and k = t + 4, provided the B operand's lane
//    does the same: Q K^T takes head-dim columns 4t .. 4t + 3 of a 16-column block (one
//    16-byte load per lane) as k = t, t + 4 of two k-steps; P V takes the keys 2t, 2t + 1 that
//    a lane's S accumulators already hold (c0, c1) as k = t, t + 4, so P goes from the
//    accumulators to the A operand without a shuffle, and V's lane reads keys 2t and 2t + 1.
//  - ldmatrix moves 16-bit elements in pairs; fp32 fragments come from plain 16-byte shared
//    loads (ld.shared.v4) instead, from tiles swizzled for that pattern (tf32_offset below).

// c (16x8, f32) += a (16x8, tf32) * b (8x8, tf32). Not volatile: the result depends on the
// registers only, so the compiler may schedule it like arithmetic.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if ATTN_M07_HAS_SM80
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// fp32 -> tf32 with the PTX instruction: round to nearest, ties away from zero; inf and NaN
// kept. Four SASS instructions (an inf/NaN test, an add of half a tf32 ulp, a select, a mask).
__device__ __forceinline__ uint32_t cvt_rna_tf32(float x) {
#if ATTN_M07_HAS_SM80
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#else
  return __float_as_uint(x);
#endif
}

// The same rounding in two integer instructions (common/device/convert.cuh, shared with
// module 09's 3xTF32 rung): add half a tf32 ulp (bit 12) to the bit pattern, then clear the
// low 13 bits.
using device::to_tf32;

// ---- fp32 tiles in shared memory and their swizzle ----------------------------------------
// A tile stores rows of D floats in 16-byte chunks of 4 (D / 4 = 16 or 32 chunks: 2 or 4 full
// passes over the 32 banks). Logical chunk c of row r is stored at physical chunk
// c ^ swizzle_tf32(r), swizzle_tf32(r) = (r % 8) ^ (4 if r is odd): a permutation inside each
// group of 8 chunks (128 bytes, every bank once). A 16-byte load by a warp is served a
// quarter-warp (8 lanes, 128 bytes) at a time, so the 8 lanes of a quarter must hit 8
// different chunks modulo 8:
//   Q and K fragments: lanes 8p .. 8p + 7 read rows 2p and 2p + 1 (g), chunks 4j .. 4j + 3 (t)
//     of each: the two rows must fall in different halves of the 8 chunks; the odd row's
//     extra 4 does that (plain r % 8 would put both in one half: a 2-way conflict).
//   V fragments: lanes 8p .. 8p + 7 read rows 2t (or 2t + 1), t = 0..3, chunks 2p and 2p + 1
//     (g) of a 32-column group: the four even (or odd) rows XOR with four different multiples
//     of 2, so the four chunk pairs are disjoint.
//   Copies and the in-place split: 8 consecutive threads own 8 consecutive chunks of one row,
//     permuted inside their group: distinct.
__device__ __forceinline__ int swizzle_tf32(int row) { return (row & 7) ^ ((row & 1) << 2); }

// Element offset of logical chunk `chunk` (floats 4 chunk .. 4 chunk + 3) of row `row`.
template <int D>
__device__ __forceinline__ int tf32_offset(int row, int chunk) {
  static_assert(D % 32 == 0, "rows of whole 8-chunk groups");
  return row * D + ((chunk ^ swizzle_tf32(row)) << 2);
}

}  // namespace attn::m07
