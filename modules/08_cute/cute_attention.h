// Module 08: the FlashAttention-2 forward of module 07 again, written with CuTe (CUTLASS's
// layout library). Same algorithm, same instructions (cp.async, ldmatrix, mma.sync), same
// tiles; the index arithmetic that module 07 wrote by hand becomes layouts, tiled copies and
// a tiled MMA. The exercise (exercise.cu) and the solution (solutions/08_cute/solution.cu)
// both implement the module's recipe (struct Recipe: the layouts and the copy and MMA
// partitioning); the kernel that uses it is given (cute_kernel.cuh). The grader
// (tests/test_08_cute.cpp) checks forward() on the GPU, and the host grader
// (tests/test_08_cute_host.cpp) checks the recipe's layouts on the CPU through the probes
// below.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m08 {

constexpr int kMaxSupportedHeadDim = 128;

// What this module's forward() handles: module 07's inputs (f16/bf16, head_dim <= 128, any
// strides, GQA, causal).
inline Status supports(const Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Status::error("module 08 runs on the tensor cores and takes f16 or bf16 tensors "
                         "(--dtype bf16 or --dtype f16), not " + std::string(dtype_name(p.dtype)));
  return require_head_dim_at_most(p, kMaxSupportedHeadDim, "module 08", "a warp's output rows");
}

namespace ATTN_IMPL {

// Launches the kernel on `stream`; pointers and strides as in module 07.
Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream);

// Host probes of the recipe, for the layout grader (tests/test_08_cute_host.cpp): each one
// evaluates one of the recipe's layouts on the CPU, with the configuration the kernel uses
// (128 threads = 4 warps, bf16, 128-query and 64-key tiles).
struct Coord {
  int row, col;
};
// 1. head_layout(rows, cols, row_stride) at (row, col).
int64_t probe_head_offset(int rows, int cols, int64_t row_stride, int row, int col);
// 2. shared_tile<rows, d>() at (row, col); rows and d are 64 or 128.
int probe_shared_offset(int rows, int d, int row, int col);
// 3. global_copy: the (row, column) of each element thread `thread` copies of a 64 x d tile,
//    in the order of its values (d = 64 or 128).
std::vector<Coord> probe_copy_coords(int d, int thread);
// 4. tiled_mma: the (row, key) of each S accumulator of `thread` in a 128 x 64 tile, and the
//    (row, k) of each element of its A fragment of a 128 x 64 operand (what the MMA expects).
std::vector<Coord> probe_s_coords(int thread);
std::vector<Coord> probe_a_coords(int thread);
// 6. transposed(shared_tile<64, d>()) at (column, key).
int probe_transposed_offset(int d, int column, int key);
// 7. The S accumulators of `thread` seen through accumulator_as_a: the (row, key) of each
//    element of that A fragment, in the order of probe_a_coords (equal when the recipe is right).
std::vector<Coord> probe_p_coords(int thread);

}  // namespace ATTN_IMPL
}  // namespace attn::m08
