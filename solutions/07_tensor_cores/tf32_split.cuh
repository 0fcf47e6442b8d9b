// Module 07 solution, TODO 5: 3xTF32's split of an fp32 value into a TF32 big part and a TF32
// small part, in a header so that two programs instantiate it: solution.cu's forward_3xtf32()
// and the ladder (bench/07_tensor_cores/bench.cu). The kernel that calls it on every element of
// Q, K, V and P, and the three products, are given in modules/07_tensor_cores/tf32_kernel.cuh.
#pragma once

#include <cstdint>

#include "modules/07_tensor_cores/tf32_primitives.cuh"

namespace attn::m07::ATTN_IMPL {

struct Tf32Split {
  // x = big + small + (what is lost), with
  //   big   = x rounded to TF32 (to nearest): |x - big| <= 2^-11 |x|;
  //   small = x - big, exactly: both are multiples of x's last fp32 bit and the difference
  //           needs at most 13 bits, so the subtraction rounds nothing.
  // small is left to the mma to round: the mma reads the top 19 bits of an operand register,
  // which truncates small to TF32, at a cost of at most 2^-22 |x| -- the size of the small *
  // small product that 3xTF32 drops anyway, and two integer instructions less per element than
  // to_tf32(x - big). So the split is three instructions: an add and a mask (big), a subtract.
  static __device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
    big = to_tf32(x);
    small = __float_as_uint(x - __uint_as_float(big));
  }
};

}  // namespace attn::m07::ATTN_IMPL
