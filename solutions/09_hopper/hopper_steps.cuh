// Module 09 solution: the parts of the kernel that carry the Hopper ideas (HopperSteps in
// modules/09_hopper/hopper_kernel.cuh calls them): the producer's copies and the consumers'
// side of the barrier protocol, and the two products issued as wgmma with their descriptors;
// then the same two products in 3xTF32 for fp32 tensors (modules/09_hopper/tf32_kernel.cuh).
#pragma once

#include "modules/09_hopper/hopper_kernel.cuh"
#include "modules/09_hopper/tf32_kernel.cuh"

namespace attn::m09::ATTN_IMPL {

struct HopperSteps {
  // ---- The barrier protocol ----

  // Producer: the work tile's Q (the kernel has waited for q_empty). One arrival that announces
  // the tile's bytes, then one copy per panel.
  template <class Plan>
  __device__ static void load_q(const Plan& plan, const CUtensorMap* q_map, int first_row,
                                int head, int batch) {
    using C = typename Plan::Config;
    plan.arrive_expect_bytes(q_full, 0, C::kQBytes);
    for (int panel = 0; panel < C::kPanels; ++panel)
      tma_load_4d(plan.q() + panel * C::kBlockM * C::kRowBytes, q_map, plan.barrier(q_full),
                  panel * C::kPanelCols, first_row, head, batch);
  }

  // Producer: one tile (K or V) into ring slot ring.slot, once the consumers have emptied it.
  // The empty barrier's phase for this fill is the one before the full barrier's:
  // ring.phase ^ 1 (the first fill of a slot passes at once). `bytes` is what the copies bring.
  template <class Plan>
  __device__ static void fill_slot(const Plan& plan, Barrier empty, Barrier full, uint32_t tile,
                                   const CUtensorMap* map, RingPosition ring, int first_key,
                                   int kv_head, int batch, uint32_t bytes) {
    using C = typename Plan::Config;
    plan.wait(empty, ring.slot, ring.phase ^ 1);
    plan.arrive_expect_bytes(full, ring.slot, bytes);
    for (int panel = 0; panel < C::kPanels; ++panel)
      tma_load_4d(tile + panel * C::kBlockN * C::kRowBytes, map, plan.barrier(full, ring.slot),
                  panel * C::kPanelCols, first_key, kv_head, batch);
  }

  // Producer: the K and V tiles of keys [first_key, first_key + kBlockN) into ring slot
  // ring.slot.
  template <class Plan>
  __device__ static void load_kv_tile(const Plan& plan, const CUtensorMap* k_map,
                                      const CUtensorMap* v_map, RingPosition ring, int first_key,
                                      int kv_head, int batch) {
    using C = typename Plan::Config;
    fill_slot(plan, k_empty, k_full, plan.k(ring.slot), k_map, ring, first_key, kv_head, batch,
              C::kKVBytes);
    fill_slot(plan, v_empty, v_full, plan.v(ring.slot), v_map, ring, first_key, kv_head, batch,
              C::kKVBytes);
  }

  template <class Plan>
  __device__ static void wait_q(const Plan& plan, uint32_t phase) {
    plan.wait(q_full, 0, phase);
  }
  template <class Plan>
  __device__ static void wait_k(const Plan& plan, RingPosition ring) {
    plan.wait(k_full, ring.slot, ring.phase);
  }
  template <class Plan>
  __device__ static void wait_v(const Plan& plan, RingPosition ring) {
    plan.wait(v_full, ring.slot, ring.phase);
  }
  // Consumer: one arrival per warp, after the warp's wgmma reads of the slot have completed.
  template <class Plan>
  __device__ static void release_k(const Plan& plan, RingPosition ring, int lane) {
    if (lane == 0) plan.arrive(k_empty, ring.slot);
  }
  template <class Plan>
  __device__ static void release_v(const Plan& plan, RingPosition ring, int lane) {
    if (lane == 0) plan.arrive(v_empty, ring.slot);
  }

  // ---- The products ----

  // S (64 x kBlockN) = Q (this warpgroup's 64 rows) K^T: kHeadDim/16 wgmmas, each k16 step 32
  // bytes further along the 128-byte rows, and a new panel every 4 steps. Both operands are
  // K-major: LBO is unused with the swizzle (16), SBO = 1024 bytes from one 8-row atom to
  // the next.
  template <class C, bool kBf16>
  __device__ static void issue_scores(float (&s)[C::kBlockN / 2], uint32_t q_rows, uint32_t k_tile) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::kHeadDim / 16; ++kk) {
      const uint32_t panel = kk / 4, step = (kk % 4) * 32;
      const uint64_t a =
          matrix_descriptor(q_rows + panel * C::kBlockM * C::kRowBytes + step, 16, 1024);
      const uint64_t b =
          matrix_descriptor(k_tile + panel * C::kBlockN * C::kRowBytes + step, 16, 1024);
      Wgmma<C::kBlockN>::template a_smem<kBf16>(s, a, b, kk > 0 ? 1 : 0);
    }
    wgmma_commit();  // the kernel decides when to wait for the group
  }

  // O (64 x kHeadDim) += P (64 x kBlockN, registers) V (kBlockN x kHeadDim). V is stored with
  // head_dim contiguous, i.e. N-major for this product: LBO = bytes from one 64-column panel to
  // the next, SBO = 1024 bytes from 8 keys to the next 8; each k16 step is 16 rows further.
  template <class C, bool kBf16>
  __device__ static void issue_pv(float (&o)[C::kHeadDim / 2],
                                       const uint32_t (&p)[C::kBlockN / 16][4], uint32_t v_tile) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::kBlockN / 16; ++kk) {
      const uint64_t b = matrix_descriptor(v_tile + kk * 16 * C::kRowBytes,
                                           C::kBlockN * C::kRowBytes, 1024);
      Wgmma<C::kHeadDim>::template a_regs_b_n_major<kBf16>(o, p[kk], b, 1);
    }
    wgmma_commit();
  }

  // ---- fp32 as 3xTF32 (README section 11; tf32_kernel.cuh calls these) ----

  // S = Q K^T from the split operands: per k8 step (32 bytes along the 128-byte rows, a new
  // panel every 4 steps), the two products with a small part first, then big big, so the
  // small contributions are summed before the large one joins them:
  //   Q big (shared memory) x K small, Q small (registers, q_small[kk]) x K big, Q big x K big.
  // The slot holds K big, then K small kPlaneBytes further.
  template <class C>
  __device__ static void issue_scores_3xtf32(float (&s)[C::kBlockN / 2], uint32_t q_rows,
                                             const uint32_t (&q_small)[C::kHeadDim / 8][4],
                                             uint32_t k_tile) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::kHeadDim / 8; ++kk) {
      const uint32_t panel = kk / 4, step = (kk % 4) * 32;
      const uint64_t q_big =
          matrix_descriptor(q_rows + panel * C::kBlockM * C::kRowBytes + step, 16, 1024);
      const uint32_t k_at = k_tile + panel * C::kBlockN * C::kRowBytes + step;
      const uint64_t k_big = matrix_descriptor(k_at, 16, 1024);
      const uint64_t k_small = matrix_descriptor(k_at + C::kPlaneBytes, 16, 1024);
      WgmmaTf32<C::kBlockN>::a_smem(s, q_big, k_small, kk > 0 ? 1 : 0);
      WgmmaTf32<C::kBlockN>::a_regs(s, q_small[kk], k_big, 1);
      WgmmaTf32<C::kBlockN>::a_smem(s, q_big, k_big, 1);
    }
    wgmma_commit();
  }

  // O += P V from the split operands: per 8 keys, P small x V big, P big x V small, P big x
  // V big. p_big[kb] and p_small[kb] are the A registers of step kb (the kernel split P and
  // ordered it as tf32_layout.h says); the V slot holds V^T big (head_dim rows of kBlockN keys, in panels of
  // 32 keys), then V^T small kPlaneBytes further.
  template <class C>
  __device__ static void issue_pv_3xtf32(float (&o)[C::kHeadDim / 2],
                                         const uint32_t (&p_big)[C::kBlockN / 8][4],
                                         const uint32_t (&p_small)[C::kBlockN / 8][4],
                                         uint32_t v_tile) {
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < C::kBlockN / 8; ++kb) {
      const uint32_t panel = kb / 4, step = (kb % 4) * 32;
      const uint32_t v_at = v_tile + panel * C::kHeadDim * C::kRowBytes + step;
      const uint64_t v_big = matrix_descriptor(v_at, 16, 1024);
      const uint64_t v_small = matrix_descriptor(v_at + C::kPlaneBytes, 16, 1024);
      WgmmaTf32<C::kHeadDim>::a_regs(o, p_small[kb], v_big, 1);
      WgmmaTf32<C::kHeadDim>::a_regs(o, p_big[kb], v_small, 1);
      WgmmaTf32<C::kHeadDim>::a_regs(o, p_big[kb], v_big, 1);
    }
    wgmma_commit();
  }
};

}  // namespace attn::m09::ATTN_IMPL
