// Module 09 exercise: the parts of the Hopper kernel that carry its ideas. The pipeline around
// them (warp roles, softmax, masks, tensor maps, launch) is given in hopper_kernel.cuh; the
// lesson (README.md) walks through it. Fill in the TODOs; `./course grade 09` checks them.
#include "modules/09_hopper/hopper.h"
#include "modules/09_hopper/hopper_kernel.cuh"
#include "modules/09_hopper/tf32_kernel.cuh"

namespace attn::m09::ATTN_IMPL {

struct HopperSteps {
  // ---- The barrier protocol (README section 4) ----

  // Producer: the block's Q tile, kPanels copies of 64 columns x kBlockM rows, completing on
  // the q_full barrier.
  template <class Plan>
  __device__ static void load_q(const Plan& plan, const CUtensorMap* q_map, int first_row,
                                int head, int batch) {
    using C = typename Plan::Config;
    // TODO 1: announce the tile's bytes on q_full, then issue one tma_load_4d per panel.
    (void)plan, (void)q_map, (void)first_row, (void)head, (void)batch;
    (void)sizeof(C);
  }

  // Producer: the K and V tiles of keys [first_key, first_key + kBlockN) into ring slot
  // ring.slot, once the consumers have released it.
  template <class Plan>
  __device__ static void load_kv_tile(const Plan& plan, const CUtensorMap* k_map,
                                      const CUtensorMap* v_map, RingPosition ring, int first_key,
                                      int kv_head, int batch) {
    // TODO 2: for K, then V: wait until the slot is empty (which phase?), announce the bytes
    // on its full barrier, issue the copies.
    (void)plan, (void)k_map, (void)v_map, (void)ring, (void)first_key, (void)kv_head, (void)batch;
  }

  // Consumers: wait until a tile has landed (its full barrier, this fill's parity); release a
  // slot once this warp's wgmmas that read it have completed (the kernel has waited for them):
  // one arrival per warp on the slot's empty barrier.
  template <class Plan>
  __device__ static void wait_q(const Plan& plan, uint32_t phase) {
    (void)plan, (void)phase;  // TODO 3
  }
  template <class Plan>
  __device__ static void wait_k(const Plan& plan, RingPosition ring) {
    (void)plan, (void)ring;  // TODO 3
  }
  template <class Plan>
  __device__ static void wait_v(const Plan& plan, RingPosition ring) {
    (void)plan, (void)ring;  // TODO 3
  }
  template <class Plan>
  __device__ static void release_k(const Plan& plan, RingPosition ring, int lane) {
    (void)plan, (void)ring, (void)lane;  // TODO 4
  }
  template <class Plan>
  __device__ static void release_v(const Plan& plan, RingPosition ring, int lane) {
    (void)plan, (void)ring, (void)lane;  // TODO 4
  }

  // ---- The products (README section 2) ----

  // S (64 x kBlockN) = Q K^T for this warpgroup's 64 query rows (q_rows) and the K tile.
  template <class C, bool kBf16>
  __device__ static void issue_scores(float (&s)[C::kBlockN / 2], uint32_t q_rows, uint32_t k_tile) {
    // TODO 5: kHeadDim / 16 wgmmas (Wgmma<C::kBlockN>::a_smem) with their descriptors, after
    // wgmma_fence(), closed into one group by wgmma_commit() (the kernel waits for it).
    for (int i = 0; i < C::kBlockN / 2; ++i) s[i] = 0.0f;
    (void)q_rows, (void)k_tile;
  }

  // O (64 x kHeadDim) += P (registers) V (the V tile in shared memory).
  template <class C, bool kBf16>
  __device__ static void issue_pv(float (&o)[C::kHeadDim / 2],
                                  const uint32_t (&p)[C::kBlockN / 16][4], uint32_t v_tile) {
    // TODO 6: kBlockN / 16 wgmmas (Wgmma<C::kHeadDim>::a_regs_b_n_major), V read N-major,
    // after wgmma_fence(), closed by wgmma_commit().
    (void)o, (void)p, (void)v_tile;
  }

  // ---- fp32 as 3xTF32 (README section 11) ----

  // S (64 x kBlockN) = Q K^T from the split operands. Given: the big x big product of each k8
  // step (32 bytes along the 128-byte rows, a new panel every 4 steps). q_rows holds Q's big
  // parts, q_small[kk] the A registers of Q's small parts for step kk; the slot holds K big,
  // then K small C::kPlaneBytes further.
  template <class C>
  __device__ static void issue_scores_3xtf32(float (&s)[C::kBlockN / 2], uint32_t q_rows,
                                             const uint32_t (&q_small)[C::kHeadDim / 8][4],
                                             uint32_t k_tile) {
    wgmma_fence();
    for (int kk = 0; kk < C::kHeadDim / 8; ++kk) {
      const uint32_t panel = kk / 4, step = (kk % 4) * 32;
      const uint64_t q_big =
          matrix_descriptor(q_rows + panel * C::kBlockM * C::kRowBytes + step, 16, 1024);
      const uint64_t k_big =
          matrix_descriptor(k_tile + panel * C::kBlockN * C::kRowBytes + step, 16, 1024);
      // TODO 7: the two products that carry the small parts (WgmmaTf32<C::kBlockN>::a_smem
      // and ::a_regs), before big x big; the first product of the tile overwrites S.
      WgmmaTf32<C::kBlockN>::a_smem(s, q_big, k_big, kk > 0 ? 1 : 0);
    }
    (void)q_small;
    wgmma_commit();
  }

  // O (64 x kHeadDim) += P V from the split operands. Given: big x big per 8 keys. p_big[kb]
  // and p_small[kb] are the A registers of P's big and small parts for step kb (the kernel
  // ordered them as tf32_layout.h says); the V slot holds V^T big
  // (head_dim rows of kBlockN keys, panels of 32 keys), then V^T small C::kPlaneBytes further.
  template <class C>
  __device__ static void issue_pv_3xtf32(float (&o)[C::kHeadDim / 2],
                                         const uint32_t (&p_big)[C::kBlockN / 8][4],
                                         const uint32_t (&p_small)[C::kBlockN / 8][4],
                                         uint32_t v_tile) {
    wgmma_fence();
    for (int kb = 0; kb < C::kBlockN / 8; ++kb) {
      const uint32_t panel = kb / 4, step = (kb % 4) * 32;
      const uint64_t v_big =
          matrix_descriptor(v_tile + panel * C::kHeadDim * C::kRowBytes + step, 16, 1024);
      // TODO 8: P small x V big and P big x V small, before big x big.
      WgmmaTf32<C::kHeadDim>::a_regs(o, p_big[kb], v_big, 1);
    }
    (void)p_small;
    wgmma_commit();
  }
};

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<HopperSteps>(p, q, k, v, o, stream);
}

Status forward_3xtf32(const Problem& p, const float* q, const float* k, const float* v, float* o,
                      cudaStream_t stream) {
  return tf32::forward_3xtf32<HopperSteps>(p, q, k, v, o, stream);  // checks p itself
}

}  // namespace attn::m09::ATTN_IMPL
