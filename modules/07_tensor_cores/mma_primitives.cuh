// Module 07, given: the hardware primitives, one thin wrapper per PTX instruction, and the
// fragment layouts they produce (README, section 2 draws them). Everything here is sm_80+
// (Ampere) PTX, which the H100 runs too (its fastest tensor-core path, wgmma, is sm_90a only
// and comes later in the course):
//   mma.sync.aligned.m16n8k16   one warp: D(16x8, f32) += A(16x16, 16-bit) * B(16x8, 16-bit)
//                               (HMMA in SASS)
//   ldmatrix(.trans)            one warp loads four 8x8 tiles of 16-bit elements from shared
//                               memory straight into fragment registers (LDSM)
//   cp.async                    a 16-byte global -> shared copy that runs in the background
//                               (LDGSTS; common/device/cp_async.cuh)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/cp_async.cuh"
#include "common/device/math.cuh"

// mma.sync.m16n8k16 (with bf16), ldmatrix and cp.async need sm_80. The course also builds for
// sm_75 (Turing): there the wrappers below compile to nothing, and launch_config()
// (tensor_core_kernel.cuh) refuses to launch on a GPU older than sm_80, with one line.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ATTN_M07_HAS_SM80 1
#else
#define ATTN_M07_HAS_SM80 0
#endif

namespace attn::m07 {

// ---- The fragment layouts of mma.m16n8k16 --------------------------------------------------
// A warp's 32 lanes each hold a few elements of every operand. With lane L, g = L / 4 (the
// "group", 0..7) and t = L % 4 (the thread in the group, 0..3):
//
//   A, 16x16 (rows x k), row-major,  4 registers of two 16-bit values:
//       a0 = A[g][2t, 2t+1]      a1 = A[g+8][2t, 2t+1]
//       a2 = A[g][2t+8, 2t+9]    a3 = A[g+8][2t+8, 2t+9]
//   B, 16x8 (k x cols), "col" = stored as columns, 2 registers:
//       b0 = B[2t, 2t+1][g]      b1 = B[2t+8, 2t+9][g]
//   C/D, 16x8 (rows x cols), f32, 4 registers of one float:
//       c0, c1 = C[g][2t, 2t+1]  c2, c3 = C[g+8][2t, 2t+1]
//
// In each 32-bit register the element with the smaller column (or k) index is the low half.
// Note that C's layout is A's layout for one 8-column half: that is what lets P = softmax(S)
// go from the S accumulators straight into the A operand of P V (README, section 3).

// The element types: how two floats become one register of two 16-bit values, and the mma.
template <class T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static constexpr const char* name = "bf16";
  // .x (the low half) = lo, the element with the smaller index, as mma and ldmatrix expect.
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  // c(16x8, f32) += a(16x16) * b(16x8)
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if ATTN_M07_HAS_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

template <>
struct Elem<__half> {
  static constexpr const char* name = "f16";
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if ATTN_M07_HAS_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

// ---- ldmatrix ------------------------------------------------------------------------------
// ldmatrix.x4: the warp loads four 8x8 matrices of 16-bit elements. Lanes 8i .. 8i+7 give the
// shared-memory addresses of the 8 rows (16 bytes each) of matrix i. Register i of lane L
// receives matrix i, row L/4, columns 2(L%4) and 2(L%4)+1 -- exactly the (g, t) pattern of
// the fragments above, which is why one ldmatrix replaces eight scalar loads per lane.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
#if ATTN_M07_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#else
  r[0] = r[1] = r[2] = r[3] = smem_addr * 0u;
#endif
}
// The same, transposed: register i of lane L receives matrix i, elements (row 2(L%4), col L/4)
// and (row 2(L%4)+1, col L/4): a pair from one column of the stored matrix.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
#if ATTN_M07_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#else
  r[0] = r[1] = r[2] = r[3] = smem_addr * 0u;
#endif
}

// ---- cp.async ------------------------------------------------------------------------------
// The 16-byte copies of K and V, their commit groups and waits are the device layer's
// (common/device/cp_async.cuh, met in module 06); smem_u32 gives the shared-window address
// that ldmatrix takes.
using device::smem_u32;

// 2^x on the special-function unit (MUFU.EX2); 2^-inf = +0 (common/device/math.cuh).
using device::fast_exp2;

// ---- Shared-memory tiles and the swizzle ---------------------------------------------------
// A tile stores rows of D 16-bit elements: D/8 "chunks" of 16 bytes per row, the unit of a
// cp.async and of one ldmatrix row address. ldmatrix reads one chunk from each of 8
// consecutive rows at the same logical chunk. Stored plainly, a row is 128 bytes (D = 64) or
// 256 bytes (D = 128), a multiple of the 128-byte span of the 32 banks: all 8 chunks fall on
// the same 4 banks, an 8-way bank conflict. The swizzle stores logical chunk c of row r at
// physical chunk c ^ (r % 8): for 8 consecutive rows these are 8 different chunks, so the 8
// reads cover all 32 banks once. It only permutes chunks inside a row, so cp.async writes (8
// threads, 8 chunks of one row) stay conflict-free too (README, section 4).
//
// Element offset of logical chunk `chunk` of row `row`.
template <int D, bool kSwizzle>
__device__ __forceinline__ int chunk_offset(int row, int chunk) {
  static_assert(D % 64 == 0, "the swizzle permutes groups of 8 chunks: D must be 64 or 128");
  return row * D + ((kSwizzle ? chunk ^ (row & 7) : chunk) << 3);
}

}  // namespace attn::m07
