// Module 11, given: the blocked layout of the fp32 dQ sums that the wgmma kernel adds with bulk
// reductions (backward_hopper.cuh) and store_dq_kernel reads (rows_kernels.cuh). Plain C++, so
// the host tests (tests/test_backward.cpp) check it without a GPU.
//
// A bulk reduction adds one contiguous range of shared memory to one contiguous range of global
// memory. So the 64 x D sums of a query tile are kept as D / 64 blocks of 64 x 64 floats, each
// block 16 KB in one piece: one reduction adds a warpgroup's whole block. Inside a block, the
// 8-float chunk c / 8 of row r sits at chunk (c / 8) ^ (r % 8): a warp stores its accumulators
// as float2 pairs, 8 rows x 4 lanes at a time, and without the XOR the 8 rows (256 bytes apart)
// would fall in the same 8 banks; with it each half-warp's 32 words fall in 32 different banks.
#pragma once

#include <cstdint>

#include "common/problem.h"  // ATTN_HOST_DEVICE

namespace attn::m11 {

constexpr int kDqBlockRows = 64, kDqBlockCols = 64;

// Where element (r, c) of a 64 x 64 block sits, in floats from the block's start.
ATTN_HOST_DEVICE inline int dq_block_offset(int r, int c) {
  return r * kDqBlockCols + (((c / 8) ^ (r % 8)) * 8) + c % 8;
}

// Where dQ sum (query row i, column d) of head bh sits in the blocked buffer of rows_pad rows
// (a multiple of 64) and D columns (a multiple of 64) per head.
ATTN_HOST_DEVICE inline int64_t dq_blocked_index(int64_t bh, int rows_pad, int D, int i, int d) {
  return (bh * rows_pad + i / kDqBlockRows * kDqBlockRows) * D +
         int64_t(d / kDqBlockCols) * (kDqBlockRows * kDqBlockCols) +
         dq_block_offset(i % kDqBlockRows, d % kDqBlockCols);
}

}  // namespace attn::m11
