// Module 02 solution: K and V tiles staged in shared memory. Still one thread per query and
// still the three passes of module 01; the only new idea is the tiling.
//
// A block of kQueriesPerBlock = 64 threads owns 64 consecutive queries of one (batch, head).
// The keys are processed kKeysPerTile = 32 at a time: the 64 threads copy a tile of K (in
// pass 3 also of V) from global into shared memory together, wait at a barrier, and then
// every thread runs its own query against the 32 rows of the tile, read from shared memory.
// So each element of K and V is read from global memory once per block and pass, not once
// per thread and pass (README, section 1), and with coalesced loads (section 2).
//
// Each thread keeps its query row, already multiplied by the softmax scale, in registers:
// q_reg[D], where D is head_dim rounded up to 32, 64, 96 or 128 (a template parameter, so
// every index into q_reg is a compile-time constant; a run-time index would force the array
// into local memory). The entries past head_dim are zero, and so are the tile columns past
// head_dim, so the padding adds nothing to a dot product. The passes:
//   1. m = max_j s_j            with s_j = (scale * q_i) . k_j
//   2. l = sum_j exp(s_j - m)
//   3. o_i = (sum_j exp(s_j - m) * v_j) / l
#include "common/cuda_check.h"
#include "modules/02_smem_tiling/smem_tiling.h"

namespace attn::m02::ATTN_IMPL {

// 64 threads = 2 warps per block. More queries per block would reuse each loaded tile more
// often, but at B=1, H=8, N=1024 blocks of 64 give 128 blocks, enough to put work on almost
// all 132 SMs of an H100; blocks of 128 would leave half of them idle (README, section 2).
constexpr int kQueriesPerBlock = 64;
// 32 keys: the K and V tiles take 2 * 32 * D * 4 B = 16 KiB at D = 64 and 32 KiB at D = 128,
// under the 48 KiB that a block can have in static __shared__ arrays (README, section 4).
constexpr int kKeysPerTile = 32;

// Output columns one sweep of pass 3 accumulates. During pass 3 a thread holds q_reg[D] and
// the accumulator acc[] in registers. At D = 128 both whole rows would be 256 floats, more
// than the 255 registers a thread can have, and the compiler would spill to local memory;
// so at D = 128 pass 3 runs twice, over output columns 0..63 and then 64..127 (one extra
// sweep over K, the price of one thread per query). Smaller D take one sweep.
constexpr int output_columns(int d) { return d <= 96 ? d : 64; }

// scale * (q . k), with the scale already folded into q. Four partial sums, so that four
// independent chains of FMAs are in flight: a single chain makes every FMA wait for the
// previous one (about 4 cycles), and with only a few warps per SM nothing else would fill
// the gap. k_row is a row of a shared-memory tile that every thread of the warp reads at
// the same time (a broadcast, README section 5).
template <int D>
__device__ __forceinline__ float dot(const float (&q_reg)[D], const float* k_row) {
  float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < D; ++c) partial[c % 4] = fmaf(q_reg[c], k_row[c], partial[c % 4]);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// Copies rows key0 .. key0 + keys - 1 of K or V for head (b, h) into tile, all threads of the
// block together. Element e of the tile (row e / D, column e % D) is copied by thread
// e % kQueriesPerBlock: the 32 lanes of a warp copy 32 consecutive floats of one row (D is
// a multiple of 32), which is one coalesced 128-byte request (README, section 2). Columns
// past head_dim and rows past the last key become 0: nothing is read out of bounds, and the
// zero columns cancel q_reg's zero padding.
//
// Plain 4-byte loads, not float4: a float4 needs a 16-byte aligned address, which head_dim
// 59 or a row stride of 21 do not give, and a second code path is not worth it here: the
// loads are about 1 instruction in 64 of the kernel (README, section 2).
template <int D>
__device__ void load_tile(float (*tile)[D], const float* __restrict__ src, const Strides& s,
                          int b, int h, int key0, int keys, int head_dim) {
#pragma unroll 4
  for (int e = threadIdx.x; e < kKeysPerTile * D; e += kQueriesPerBlock) {
    const int row = e / D;
    const int col = e % D;
    float x = 0.0f;
    if (row < keys && col < head_dim) x = src[Problem::offset(s, b, h, key0 + row) + col];
    tile[row][col] = x;
  }
}

template <int D>
__global__ void __launch_bounds__(kQueriesPerBlock)
    smem_tiling_kernel(Problem p, float scale, int query_blocks, const float* __restrict__ q,
                       const float* __restrict__ k, const float* __restrict__ v,
                       float* __restrict__ o) {
  // The tiles, shared by the 64 threads of the block (README, sections 2 and 4).
  __shared__ float k_tile[kKeysPerTile][D];
  __shared__ float v_tile[kKeysPerTile][D];

  // Which queries: the 1-D grid numbers the query blocks of head (0, 0) first, then those of
  // head (0, 1), and so on. gridDim.x may reach 2^31 - 1; a 2-D grid with batch*heads in
  // gridDim.y would stop at 65535 heads. Neighbouring blocks share a head, and so its K and
  // V, which they then find in L2.
  const int block = int(blockIdx.x);
  const int bh = block / query_blocks;
  const int b = bh / p.heads;
  const int h = bh % p.heads;
  const int i = (block % query_blocks) * kQueriesPerBlock + int(threadIdx.x);
  // The last block of a head can have threads past the last query. They must NOT return:
  // they copy their share of every tile and reach every __syncthreads() like the others
  // (README, section 3). They compute on a zero query and skip the final write.
  const bool has_query = i < p.seq_q;

  // The scaled query row in registers (zero past head_dim, and for a thread without query).
  float q_reg[D];
  const float* q_row = q + Problem::offset(p.q, b, h, has_query ? i : 0);
#pragma unroll
  for (int c = 0; c < D; ++c) q_reg[c] = (has_query && c < p.head_dim) ? scale * q_row[c] : 0.0f;

  const int tiles = (p.seq_k + kKeysPerTile - 1) / kKeysPerTile;

  // Pass 1: the row max over all K tiles.
  float m = -INFINITY;
  for (int t = 0; t < tiles; ++t) {
    const int key0 = t * kKeysPerTile;
    const int keys = min(kKeysPerTile, p.seq_k - key0);  // the last tile may be partial
    load_tile<D>(k_tile, k, p.k, b, h, key0, keys, p.head_dim);
    __syncthreads();  // the tile is complete: every thread's share of it has been stored
    for (int j = 0; j < keys; ++j) m = fmaxf(m, dot<D>(q_reg, k_tile[j]));
    __syncthreads();  // no thread still reads the tile when the next load overwrites it
  }

  // Pass 2: the softmax denominator, over all K tiles again.
  float l = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    const int key0 = t * kKeysPerTile;
    const int keys = min(kKeysPerTile, p.seq_k - key0);
    load_tile<D>(k_tile, k, p.k, b, h, key0, keys, p.head_dim);
    __syncthreads();
    for (int j = 0; j < keys; ++j) l += expf(dot<D>(q_reg, k_tile[j]) - m);
    __syncthreads();
  }

  // Pass 3: o_i = sum_j exp(s_j - m) v_j / l, accumulated in registers over K and V tiles,
  // in sweeps of kCols output columns (one sweep unless D = 128; see output_columns).
  constexpr int kCols = output_columns(D);
  const float inv_l = 1.0f / l;
  float* o_row = o + Problem::offset(p.o, b, h, has_query ? i : 0);
#pragma unroll
  for (int col0 = 0; col0 < D; col0 += kCols) {  // unrolled: col0 is a constant in each copy
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * kKeysPerTile;
      const int keys = min(kKeysPerTile, p.seq_k - key0);
      load_tile<D>(k_tile, k, p.k, b, h, key0, keys, p.head_dim);
      load_tile<D>(v_tile, v, p.v, b, h, key0, keys, p.head_dim);
      __syncthreads();
      for (int j = 0; j < keys; ++j) {
        const float w = expf(dot<D>(q_reg, k_tile[j]) - m);
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[c] = fmaf(w, v_tile[j][col0 + c], acc[c]);
      }
      __syncthreads();
    }
    if (has_query) {
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        if (col0 + c < p.head_dim) o_row[col0 + c] = acc[c] * inv_l;
    }
  }
}

template <int D>
Status launch(const Problem& p, const float* q, const float* k, const float* v, float* o,
              cudaStream_t stream) {
  const int query_blocks = (p.seq_q + kQueriesPerBlock - 1) / kQueriesPerBlock;
  // One block per (batch, head, query block), all in grid.x. validate() keeps
  // batch*heads*seq_q <= 2^31 - 1, so the block count fits gridDim.x (and an int).
  const int64_t blocks = int64_t(p.batch) * p.heads * query_blocks;
  smem_tiling_kernel<D><<<unsigned(blocks), kQueriesPerBlock, 0, stream>>>(
      p, p.softmax_scale(), query_blocks, q, k, v, o);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  // The smallest compiled head dim that holds head_dim: four kernels, one per D.
  if (p.head_dim <= 32) return launch<32>(p, q, k, v, o, stream);
  if (p.head_dim <= 64) return launch<64>(p, q, k, v, o, stream);
  if (p.head_dim <= 96) return launch<96>(p, q, k, v, o, stream);
  return launch<128>(p, q, k, v, o, stream);
}

}  // namespace attn::m02::ATTN_IMPL
