// Module 09, given: TMA tensor maps, made on the host. Used by module 09's kernels and by
// module 11's backward (its producer warpgroup loads tiles the same way).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (the types only: no libcuda link)
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m09 {

// cuTensorMapEncodeTiled is a driver function; the runtime hands out its address so the course
// links only the runtime (cudart), as the other modules do.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_function() {
  static EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &address, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess)
      return nullptr;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &address, cudaEnableDefault, &found) !=
        cudaSuccess)
      return nullptr;
#endif
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiledFn>(address) : nullptr;
  }();
  return fn;
}

// A 4-D tensor map: dims and the box innermost first, the three outer strides in bytes; rows
// past a dim read as zeros and are never written. Every map (16-bit here, the FP8 rung's 8-bit
// ones in fp8_kernel.cuh, the fp32 ones in tf32_kernel.cuh) is made by this one call.
inline Status encode_tensor_map_4d(CUtensorMap* map, CUtensorMapDataType type, const void* base,
                                   const cuuint64_t (&dims)[4], const cuuint64_t (&byte_strides)[3],
                                   const cuuint32_t (&box)[4], CUtensorMapSwizzle swizzle,
                                   const char* name) {
  EncodeTiledFn encode = encode_tiled_function();
  if (!encode)
    return Status::error("the CUDA driver does not provide cuTensorMapEncodeTiled "
                         "(TMA needs a driver for CUDA 12 or newer)");
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, type, 4, const_cast<void*>(base), dims, byte_strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::error(std::string("cuTensorMapEncodeTiled refused the ") + name +
                         " tensor (error " + std::to_string(static_cast<int>(r)) + ")");
  return Status::ok();
}

// A 4-D map over (head_dim, seq, heads, batch) with the tensor's own strides, read in boxes of
// 64 columns x `box_rows` rows, written to shared memory in the 128-byte swizzle.
inline Status make_tensor_map(CUtensorMap* map, DType dtype, const void* base, int head_dim,
                              int seq, int heads, int batch, const Strides& s, int box_rows,
                              const char* name) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.seq) * 2,
                                 static_cast<cuuint64_t>(s.head) * 2,
                                 static_cast<cuuint64_t>(s.batch) * 2};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  return encode_tensor_map_4d(
      map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, name);
}

// TMA reads rows whose start and stride are multiples of 16 bytes.
inline bool tma_compatible(const void* base, const Strides& s) {
  auto aligned = [](int64_t elements) { return (elements * 2) % 16 == 0 && elements > 0; };
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && aligned(s.seq) && aligned(s.head) &&
         aligned(s.batch);
}

}  // namespace attn::m09
