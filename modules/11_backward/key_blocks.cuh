// Module 11, given: what both tensor-core kernels (backward_kernel.cuh, backward_hopper.cuh)
// do the same way around their products: which keys a block owns and in which order it
// visits the query tiles, and the store of dK and dV at the end.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/problem.h"
#include "modules/11_backward/rows_kernels.cuh"

namespace attn::m11 {

// Work item `item` (a block's index, or the item a persistent block took next) is kKeys keys
// of one (batch, K/V head); `key_blocks` = ceil(seq_k / kKeys) items per head (the host's
// key_block_grid). Key blocks fastest, so the items on the GPU at one time are all the key
// blocks of a few heads: they read the same Q and dO tiles and add into the same dQ rows, so
// the tiles come from L2 after the first read and the dQ sums stay in L2. (With heads fastest,
// every block of a wave would belong to another head at short sequences: each would read its
// tiles from DRAM and every dQ reduction would go to DRAM.) With the mask the items' work
// differs, and the order is by groups of heads (below). An item walks `steps` (query head,
// query tile) pairs: every query head of its group, and the query tiles that see any of its
// keys (all, or with the mask from the first query that sees key k0).
template <int kKeys, int kQueries, bool kCausal>
struct KeyBlockWalk {
  int b, kv_head, k0, key_block, group, first_tile, tiles_per_head, steps;

  __device__ KeyBlockWalk(const Problem& p, unsigned item, unsigned key_blocks) {
    const unsigned bg_count = unsigned(p.batch) * unsigned(p.kv_heads);
    int bg;
    if constexpr (kCausal) {
      // Groups of `per_group` (batch, K/V head) pairs, about one wave of blocks, key blocks
      // outer within a group: key block 0, seen by every query, is the heaviest, so every
      // head's heaviest items start first, and the grid ends on the lightest items of its
      // last group (with key blocks fastest it would end on the last head's block 0, started
      // late).
      const unsigned per_group = key_blocks >= 128 ? 1u : 128u / key_blocks;
      const unsigned group = item / (per_group * key_blocks);
      const unsigned in_group = item % (per_group * key_blocks);
      const unsigned heads_here = min(per_group, bg_count - group * per_group);
      key_block = int(in_group / heads_here);
      bg = int(group * per_group + in_group % heads_here);
    } else {
      key_block = int(item % key_blocks);
      bg = int(item / key_blocks);
    }
    b = bg / p.kv_heads, kv_head = bg % p.kv_heads;
    k0 = key_block * kKeys;
    group = p.heads / p.kv_heads;
    const int q_tiles = (p.seq_q + kQueries - 1) / kQueries;
    first_tile = kCausal ? first_query(p, k0) / kQueries : 0;
    tiles_per_head = q_tiles - first_tile;
    steps = group * (tiles_per_head > 0 ? tiles_per_head : 0);
  }
  // Step -> query head and first query row. The blocks of one head run at the same time and
  // all add into the same dQ rows. Blocks that start at tile 0 (all of them without the mask)
  // start at different query tiles instead (rotated by the key block's index): at every step
  // the blocks of a head then add into different rows instead of queueing on one. With the
  // mask the other blocks' first tiles differ already (two tiles apart at kKeys = 2 kQueries),
  // and walking them in order keeps them apart; rotated, a block that wrapped around would
  // meet others on the same tile.
  __device__ int head(int step) const { return kv_head * group + step / tiles_per_head; }
  __device__ int q0(int step) const {
    const int shift = kCausal && first_tile > 0 ? 0 : key_block;
    return (first_tile + (step % tiles_per_head + shift) % tiles_per_head) * kQueries;
  }
  // Whether a (key block, query tile) pair needs the per-score test: keys past seq_k in the
  // last key block, or (mask) a query tile that does not see all of the block's keys.
  __device__ bool edge(const Problem& p, int q0) const {
    return k0 + kKeys > p.seq_k || (kCausal && q0 + (p.seq_k - p.seq_q) < k0 + kKeys - 1);
  }
};

// dK and dV, rounded and staged by the kernel in two shared tiles (at byte offsets
// chunk_at(row, chunk) from dk_tile and dv_tile), written out as 16-byte row chunks
// (coalesced) by kThreads threads (`thread` = 0 .. kThreads - 1): rows < seq_k, columns <
// head_dim; kVec: 16-byte stores, else element by element.
template <int kKeys, int D, int kThreads, bool kVec, class ChunkAt>
__device__ __forceinline__ void store_dk_dv(const Problem& p, int b, int kv_head, int k0,
                                            const unsigned char* dk_tile,
                                            const unsigned char* dv_tile, ChunkAt chunk_at,
                                            void* dk, void* dv, int thread = int(threadIdx.x)) {
  constexpr int kChunks = D / 8;
  for (int c = thread; c < 2 * kKeys * kChunks; c += kThreads) {
    const int which = c / (kKeys * kChunks), rc = c % (kKeys * kChunks);
    const int row = rc / kChunks, chunk = rc % kChunks;
    if (k0 + row >= p.seq_k || chunk * 8 >= p.head_dim) continue;
    const uint16_t* src =
        reinterpret_cast<const uint16_t*>((which == 0 ? dk_tile : dv_tile) + chunk_at(row, chunk));
    uint16_t* dst = static_cast<uint16_t*>(which == 0 ? dk : dv) +
                    Problem::offset(which == 0 ? p.k : p.v, b, kv_head, k0 + row) + chunk * 8;
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && chunk * 8 + e < p.head_dim; ++e) dst[e] = src[e];
    }
  }
}

}  // namespace attn::m11
