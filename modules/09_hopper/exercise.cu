// Module 09 exercise: the parts of the Hopper kernel that carry its ideas. The pipeline around
// them (warp roles, softmax, masks, tensor maps, launch) is given in hopper_kernel.cuh; the
// lesson (README.md) walks through it. Fill in the TODOs; `./course grade 09` checks them.
#include "modules/09_hopper/hopper.h"
#include "modules/09_hopper/hopper_kernel.cuh"

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
};

Status forward(const Problem& p, const void* q, const void* k, const void* v, void* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  return launch<HopperSteps>(p, q, k, v, o, stream);
}

}  // namespace attn::m09::ATTN_IMPL
