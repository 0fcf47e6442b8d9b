// The device layer: softmax arithmetic shared by every kernel of the course.
//
// Every kernel from module 03 on computes exp(x) as exp2(x * log2(e)): the GPU's special
// function unit evaluates 2^x in one instruction (ex2.approx), while expf is a longer
// sequence. Multiplying q by softmax_scale * log2(e) once, when it is loaded, puts every
// score in base-2 units for free (module 03's lesson, section 2).
#pragma once

namespace attn::device {

// log2(e): exp(x) = 2^(x * kLog2e).
constexpr float kLog2e = 1.4426950408889634f;

}  // namespace attn::device
