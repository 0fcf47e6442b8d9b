// Module 02 exercise: K and V tiles staged in shared memory, still one thread per query and
// three passes. Read modules/02_smem_tiling/README.md first.
// Run: ./course run 02   Grade: ./course grade 02
//
// Given: the block and query of each thread, the query row in registers, the dot product,
// the launch. Yours: copying tiles into shared memory, the barriers, the loops over tiles.
#include "common/cuda_check.h"
#include "modules/02_smem_tiling/smem_tiling.h"

namespace attn::m02::ATTN_IMPL {

constexpr int kQueriesPerBlock = 64;  // threads per block, one query each (README, section 2)
constexpr int kKeysPerTile = 32;      // rows of K (and V) per shared-memory tile (section 4)

// Output columns one sweep of pass 3 accumulates: D, except at D = 128, where q_reg[128] and
// acc[128] together would not fit in a thread's 255 registers; there pass 3 sweeps over the
// keys twice, for columns 0..63 and 64..127 (README, section 4).
constexpr int output_columns(int d) { return d <= 96 ? d : 64; }

// scale * (q . k), with the scale already folded into q_reg. Given. Four partial sums keep
// four independent FMA chains in flight. k_row is a row of a shared-memory tile.
template <int D>
__device__ __forceinline__ float dot(const float (&q_reg)[D], const float* k_row) {
  float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < D; ++c) partial[c % 4] = fmaf(q_reg[c], k_row[c], partial[c % 4]);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// TODO(1): copy rows key0 .. key0 + keys - 1 of K or V for head (b, h) into tile[32][D], with
// all kQueriesPerBlock threads of the block sharing the work (README, section 2).
//   - Coalesced: the lanes of a warp must read consecutive floats of a row. Number the tile's
//     kKeysPerTile * D elements e = row * D + col and give element e to thread
//     e % kQueriesPerBlock (loop e = threadIdx.x, threadIdx.x + kQueriesPerBlock, ...).
//   - Row `row` of the tile is key key0 + row: src + Problem::offset(s, b, h, key0 + row).
//   - Store 0.0f where col >= head_dim (q_reg is zero there too, and shared memory starts out
//     holding garbage, possibly NaN) and where row >= keys (past the last key: never read
//     global memory there).
template <int D>
__device__ void load_tile(float (*tile)[D], const float* __restrict__ src, const Strides& s,
                          int b, int h, int key0, int keys, int head_dim) {
  (void)tile;
  (void)src;
  (void)s;
  (void)b;
  (void)h;
  (void)key0;
  (void)keys;
  (void)head_dim;
}

template <int D>
__global__ void __launch_bounds__(kQueriesPerBlock)
    smem_tiling_kernel(Problem p, float scale, int query_blocks, const float* __restrict__ q,
                       const float* __restrict__ k, const float* __restrict__ v,
                       float* __restrict__ o) {
  __shared__ float k_tile[kKeysPerTile][D];
  __shared__ float v_tile[kKeysPerTile][D];

  // Given: this block's head (b, h) and this thread's query i. The 1-D grid holds the query
  // blocks of head (0, 0), then those of head (0, 1), ... (README, section 2).
  const int block = int(blockIdx.x);
  const int bh = block / query_blocks;
  const int b = bh / p.heads;
  const int h = bh % p.heads;
  const int i = (block % query_blocks) * kQueriesPerBlock + int(threadIdx.x);
  // Threads past the last query must stay: they load their share of every tile and reach
  // every __syncthreads(); they only skip writing O (README, section 3). No `return` here.
  const bool has_query = i < p.seq_q;

  // Given: the scaled query row in registers, zero past head_dim (and for has_query false).
  float q_reg[D];
  const float* q_row = q + Problem::offset(p.q, b, h, has_query ? i : 0);
#pragma unroll
  for (int c = 0; c < D; ++c) q_reg[c] = (has_query && c < p.head_dim) ? scale * q_row[c] : 0.0f;

  // TODO(2): pass 1, the row max m over all keys, one K tile at a time (README, sections 2, 3).
  //   The keys come in ceil(seq_k / kKeysPerTile) tiles; tile t starts at key0 = t * 32 and
  //   holds keys = min(32, seq_k - key0) keys (the last tile may be partial). For each tile:
  //   load_tile into k_tile; wait until the whole tile is in shared memory (__syncthreads,
  //   section 3); for j < keys: m = fmaxf(m, dot<D>(q_reg, k_tile[j])); and wait until every
  //   thread is done reading the tile before the next load overwrites it.
  float m = -INFINITY;

  // TODO(3): pass 2, l = sum over all keys of expf(s_j - m): the same loop over K tiles,
  //   with the same two barriers (README, sections 2, 3).
  float l = 0.0f;

  // TODO(4): pass 3 (README, sections 2, 3). Inside the given sweep below, loop over the tiles
  //   again, loading both k_tile and v_tile, and for each key j of the tile add
  //   w = expf(dot<D>(q_reg, k_tile[j]) - m) times v_tile[j][col0 + c] to acc[c], for
  //   c < kCols (fully unrolled: acc must stay in registers). After the loop, a thread with a
  //   query writes o_row[col0 + c] = acc[c] / l for the columns col0 + c < head_dim.
  constexpr int kCols = output_columns(D);
  float* o_row = o + Problem::offset(p.o, b, h, has_query ? i : 0);
#pragma unroll
  for (int col0 = 0; col0 < D; col0 += kCols) {  // one sweep unless D = 128
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
    (void)acc;  // TODO(4) goes here
  }

  // These casts only silence "unused" warnings in the starter; delete them as you go.
  (void)k;
  (void)v;
  (void)k_tile;
  (void)v_tile;
  (void)m;
  (void)l;
  (void)o_row;
}

// Given: one block of kQueriesPerBlock threads per (batch, head, query block), all in the
// 1-D grid.x (gridDim.y and z stop at 65535, and batch * heads can be larger).
template <int D>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  const int query_blocks = (p.seq_q + kQueriesPerBlock - 1) / kQueriesPerBlock;
  const int64_t blocks = int64_t(p.batch) * p.heads * query_blocks;  // <= 2^31 - 1 (validate)
  smem_tiling_kernel<D><<<unsigned(blocks), kQueriesPerBlock, 0, stream>>>(
      p, p.softmax_scale(), query_blocks, q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  // Given: the smallest compiled head dim D (32, 64, 96, 128) that holds head_dim.
  if (p.head_dim <= 32) return launch<32>(p, q, k, v, o, stream);
  if (p.head_dim <= 64) return launch<64>(p, q, k, v, o, stream);
  if (p.head_dim <= 96) return launch<96>(p, q, k, v, o, stream);
  return launch<128>(p, q, k, v, o, stream);
}

}  // namespace attn::m02::ATTN_IMPL
