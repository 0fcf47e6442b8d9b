// Module 08, given: forward() and the host probes over the recipe of the file that includes
// this one (exercise.cu or solutions/08_cute/recipe.cuh), which must define
// attn::m08::ATTN_IMPL::Recipe first (one recipe per implementation: the CLI links both).
#pragma once

#include <algorithm>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device/head_dim.cuh"
#include "common/device/shared_memory.cuh"
#include "modules/08_cute/cute_attention.h"
#include "modules/08_cute/cute_kernel.cuh"

namespace attn::m08 {

// 4 warps x 32 rows, 64-key tiles, 2 blocks per SM, two stages; Q's fragments in registers
// at D = 64 only (module 07's tiles and its choice of Q; README, section 5).
template <class T, int D> using KernelConfig = Config<T, D, 4, 64, 2, D == 64>;

template <class Recipe, class C>
Status launch_config(const Problem& p, const void* q, const void* k, const void* v, void* o,
                     cudaStream_t stream) {
  if (Status s = require_sm80("module 08"); !s) return s;  // common/device.h
  using T = typename C::T;
  const int64_t query_blocks = (int64_t(p.seq_q) + C::kQueries - 1) / C::kQueries;
  const int64_t blocks = query_blocks * p.batch * p.heads;
  if (blocks > 0x7fffffff) return Status::error("module 08: more than 2^31 - 1 blocks");
  const bool vec = p.head_dim % 8 == 0 && rows_aligned16(q, p.q, 2) &&
                   rows_aligned16(k, p.k, 2) && rows_aligned16(v, p.v, 2) &&
                   rows_aligned16(o, p.o, 2);
  // Heads per group of the block order (cute_kernel.cuh): a quarter of the SM count, so that
  // the 2 blocks per SM in flight hold about 8 query blocks of each head of a group.
  const int head_group = std::clamp(current_sm_count() / 4, 1, std::max(1, p.batch * p.heads));
  using Kernel = void (*)(Problem, float, int, int, const T*, const T*, const T*, T*);
  static const Kernel kernels[2][2] = {  // [causal][vec]
      {cute_flash_kernel<Recipe, C, false, false>, cute_flash_kernel<Recipe, C, false, true>},
      {cute_flash_kernel<Recipe, C, true, false>, cute_flash_kernel<Recipe, C, true, true>}};
  const cudaError_t opt_in = device::allow_shared_memory(  // above 48 KB
      C::kSmemBytes, kernels[0][0], kernels[0][1], kernels[1][0], kernels[1][1]);
  ATTN_CUDA_RETURN(opt_in);
  kernels[p.causal][vec]<<<unsigned(blocks), C::kThreads, C::kSmemBytes, stream>>>(
      p, p.softmax_scale() * device::kLog2e, int(query_blocks), head_group,
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(o));
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

namespace ATTN_IMPL {

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return device::dispatch_head_dim<64, 128>(p.head_dim, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (p.dtype == DType::bf16)
      return launch_config<Recipe, KernelConfig<bfloat16_t, D>>(p, q, k, v, o, stream);
    return launch_config<Recipe, KernelConfig<half_t, D>>(p, q, k, v, o, stream);
  });
}

// The probes (cute_attention.h). Layouts are functions: on the host they are evaluated
// exactly as in the kernel, the identity tensors giving (row, column) instead of data.
namespace probe {
template <class CoordTensor>
std::vector<Coord> coords(const CoordTensor& c) {
  std::vector<Coord> out;
  for (int i = 0; i < int(size(c)); ++i) out.push_back({int(get<0>(c(i))), int(get<1>(c(i)))});
  return out;
}
using ProbeT = bfloat16_t;
inline auto probe_mma() { return Recipe::template tiled_mma<ProbeT, 4>(); }
inline auto s_tile() { return make_identity_tensor(Shape<_128, _64>{}); }
}  // namespace probe

int64_t probe_head_offset(int rows, int cols, int64_t row_stride, int row, int col) {
  return int64_t(Recipe::head_layout(rows, cols, row_stride)(row, col));
}
int probe_shared_offset(int rows, int d, int row, int col) {
  auto at = [&](auto layout) { return int(layout(row, col)); };
  if (rows == 64)
    return d == 64 ? at(Recipe::template shared_tile<64, 64>()) : at(Recipe::template shared_tile<64, 128>());
  return d == 64 ? at(Recipe::template shared_tile<128, 64>()) : at(Recipe::template shared_tile<128, 128>());
}
std::vector<Coord> probe_copy_coords(int d, int thread) {
  auto of = [&](auto copy, auto shape) {
    return probe::coords(copy.get_thread_slice(thread).partition_S(make_identity_tensor(shape)));
  };
  if (d == 64) return of(Recipe::template global_copy<probe::ProbeT, 128, 64>(), Shape<_64, _64>{});
  return of(Recipe::template global_copy<probe::ProbeT, 128, 128>(), Shape<_64, _128>{});
}
std::vector<Coord> probe_s_coords(int thread) {
  return probe::coords(probe::probe_mma().get_thread_slice(thread).partition_C(probe::s_tile()));
}
std::vector<Coord> probe_a_coords(int thread) {
  return probe::coords(probe::probe_mma().get_thread_slice(thread).partition_A(probe::s_tile()));
}
int probe_transposed_offset(int d, int column, int key) {
  if (d == 64) return int(Recipe::transposed(Recipe::template shared_tile<64, 64>())(column, key));
  return int(Recipe::transposed(Recipe::template shared_tile<64, 128>())(column, key));
}
std::vector<Coord> probe_p_coords(int thread) {
  Tensor s = probe::probe_mma().get_thread_slice(thread).partition_C(probe::s_tile());
  return probe::coords(make_tensor(s.data(), Recipe::accumulator_as_a(s.layout())));
}

}  // namespace ATTN_IMPL
}  // namespace attn::m08
