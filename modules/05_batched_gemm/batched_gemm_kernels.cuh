// Module 05, given: the unfused attention pipeline around the seven functions of exercise.cu.
//
//   S = scale · Q K^T   gemm_strided (B transposed), S in a device workspace
//   P = softmax(S)      row_softmax, in place, causal mask bottom-right aligned
//   O = P V             gemm_strided
//
// The GEMM (README, section 3): a block of 128 threads computes a 128 x 64 tile of C. It walks
// K in steps of 16: stages a 128 x 16 tile of A and a 16 x 64 tile of B in shared memory, both
// stored k-major (tile[k][row]) so that the inner loop reads 4 consecutive floats with one
// 16-byte load, then every thread accumulates its 8 x 8 micro-tile of C in 64 registers with
// outer products: per k, 8 values of A times 8 values of B = 64 FMAs for 4 shared-memory loads.
// A micro-tile is two groups of 4 rows (64 apart) by two groups of 4 columns (32 apart), so that
// the 8 threads of a quarter-warp read 128 consecutive bytes of B (no bank conflict) and one
// broadcast word group of A.
// Dispatch (section 2): one kernel per strategy; the block finds its (batch, head, tile) from
// the grid and its head's base pointers from strides or from the pointer arrays; from there the
// tile code is shared.
//
// Given here: the grid, the tiled GEMM's k loop with its shared-memory tile loaders, 16-byte
// stores, the kernels and their launches, the scores workspace, and the entry points of
// batched_gemm.h (forward() and friends). Declared here and written in exercise.cu (filled in:
// solutions/05_batched_gemm/solution.cu): head_operands (the dispatch: strided or pointer
// arrays), load_chunk and store_c_tile (the GEMM's loads and epilogue), visible_keys,
// row_max_and_sum, write_probabilities (the softmax). This header defines the entry points, so
// exactly one file of each implementation includes it: exercise.cu or solution.cu.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/cuda_check.h"
#include "common/device/math.cuh"
#include "modules/05_batched_gemm/batched_gemm.h"

namespace attn::m05 {

// 3 blocks of 128 threads per SM: <= 168 registers per thread. (With 4, ptxas must fit 128
// and spills: modules/05_batched_gemm/NOTES.md, section 4.)
constexpr int kMinGemmBlocksPerSM = 3;
constexpr int kThreadsAcrossN = kTileN / kThreadN;  // 8 threads side by side along N
static_assert(kGemmThreads / 32 * 4 == kTileK, "each warp stages 4 columns of k");
static_assert(kTileM % 32 == 0 && kTileN % 32 == 0, "tile rows are dealt to 32 lanes");

__device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- Where a block works: the grid (README, section 2) --------------------------------------

// grid = (tiles of C, num_heads, batch): the tiles of one head are neighbours in blockIdx.x,
// so blocks running together share that head's operands in L2. When num_heads or batch
// exceed the 65535 limit of grid.y / grid.z, everything is flattened into grid.x
// (2^31 - 1 blocks) and the block decodes (batch, head, tile) from blockIdx.x.
struct GridMap {
  int64_t tiles = 0;  // tiles of C per head: tiles_m · tiles_n
  int tiles_n = 0;    // tiles across N
  int num_heads = 0;
  bool flat = false;
};

struct BlockWork {
  int b, h;    // batch and head
  int m0, n0;  // first row and column of this block's tile of C
};

__device__ __forceinline__ BlockWork block_work(const GridMap& g) {
  int64_t tile;
  int b, h;
  if (g.flat) {
    const int64_t bh = int64_t(blockIdx.x) / g.tiles;
    tile = int64_t(blockIdx.x) % g.tiles;
    h = int(bh % g.num_heads);
    b = int(bh / g.num_heads);
  } else {
    tile = blockIdx.x;
    h = int(blockIdx.y);
    b = int(blockIdx.z);
  }
  return {b, h, int(tile / g.tiles_n) * kTileM, int(tile % g.tiles_n) * kTileN};
}

// One head's operands, from either strategy (head_operands, exercise.cu): the base pointers of
// A, B and C for head (b, h) and their row strides.
struct HeadOperands {
  const float* a;
  const float* b;
  float* c;
  int64_t lda, ldb, ldc;
};

// What one thread of a GEMM block works on: its head's operands, the sizes, the block's tile
// of C (first row m0, first column n0) and the thread's micro-tile in it. Micro-tile entry
// (i, j) is tile row row_of(i), tile column col_of(j): rows ty·4 + {0..3} and
// 64 + ty·4 + {0..3}, columns tx·4 + {0..3} and 32 + tx·4 + {0..3}.
// 16-byte loads and stores need every row 16-byte aligned: the head's base and the row
// stride (x_vec4). Pointer arrays can point anywhere, so this is decided per block, on the GPU.
struct GemmTile {
  HeadOperands op;
  int M, N, K;
  int m0, n0;
  int tx, ty;  // 0..7 across N, 0..15 down M
  bool a_vec4, b_vec4, c_vec4;
  __device__ __forceinline__ int row_of(int i) const {
    return (i / 4) * (kTileM / 2) + ty * 4 + i % 4;
  }
  __device__ __forceinline__ int col_of(int j) const {
    return (j / 4) * (kTileN / 2) + tx * 4 + j % 4;
  }
};

// A softmax row's statistics: its max m and its sum l = sum_j 2^((s_j - m) · scale · log2 e).
struct RowStats {
  float m, l;
};

}  // namespace attn::m05

namespace attn::m05::ATTN_IMPL {

// ---- The functions of exercise.cu (README, sections 2, 3 and 4) ------------------------------

// p[0 .. 4), entries at index >= count replaced by `fill`; one 16-byte load where allowed.
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4,
                                             float fill = 0.0f);
// Where head (b, h) of a batched GEMM starts: from the strides, or from the pointer arrays.
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmStridedArgs& g, int b,
                                                      int h);
__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmPtrArgs& g, int b, int h);
// alpha · acc into C, nothing past row M or column N.
__device__ __forceinline__ void store_c_tile(const float (&acc)[kThreadM][kThreadN],
                                             const GemmTile& t, float alpha);
// The keys [0, visible) that query `query` sees.
__device__ __forceinline__ int visible_keys(const RowSoftmaxArgs& s, int query);
// Pass 1 of the row softmax: the row's max and sum, the same in every lane of the warp.
__device__ __forceinline__ RowStats row_max_and_sum(const float* x, int visible, bool vec4,
                                                    float scale_log2e, int lane);
// Pass 2: P over S for the whole row, zeros for the masked keys.
__device__ __forceinline__ void write_probabilities(float* x, int seq_k, int visible, bool vec4,
                                                    float scale_log2e, int lane, RowStats row);

// ---- Moving 4 floats out (README, section 3: float4 where alignment allows) -------------------

// p[0 .. min(count, 4)) = v: one 16-byte store when allowed, else scalar stores.
__device__ __forceinline__ void store_chunk(float* p, float4 v, int count, bool vec4) {
  if (vec4 && count >= 4) {
    *reinterpret_cast<float4*>(p) = v;
    return;
  }
  if (count > 0) p[0] = v.x;
  if (count > 1) p[1] = v.y;
  if (count > 2) p[2] = v.z;
  if (count > 3) p[3] = v.w;
}

// ---- Staging B as stored (README, section 3) ---------------------------------------------------

// tile[k][n] = src[(r0 + k) · ld + c0 + n] for the kTileK x kTileN tile starting at row r0,
// column c0 of a rows x cols row-major matrix; zeros outside it. Used for B when it is stored
// K x N (P V): the rows of B are the k's, so the copy keeps its orientation. 16 threads cover a
// row of 64 floats with 16-byte chunks: a warp reads 2 x 256 contiguous bytes (coalesced) and
// writes 512 contiguous bytes of shared memory (no bank conflict).
__device__ __forceinline__ void load_tile_direct(float (*tile)[kTileN], const float* src,
                                                 int64_t ld, int rows, int cols, int r0, int c0,
                                                 bool vec4) {
  constexpr int kChunksPerRow = kTileN / 4;                   // 16
  constexpr int kRowsPerPass = kGemmThreads / kChunksPerRow;  // 8
  const int c = int(threadIdx.x) % kChunksPerRow * 4;
#pragma unroll
  for (int pass = 0; pass < kTileK / kRowsPerPass; ++pass) {
    const int r = int(threadIdx.x) / kChunksPerRow + pass * kRowsPerPass;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < rows) v = load_chunk(src + int64_t(r0 + r) * ld + c0 + c, cols - (c0 + c), vec4);
    *reinterpret_cast<float4*>(&tile[r][c]) = v;
  }
}

// ---- The k loop (README, section 3) ------------------------------------------------------------

// tile[k][r] = src[(r0 + r) · ld + c0 + k] for the kRows x kTileK block starting at row r0,
// column c0 of a rows x cols row-major matrix; zeros outside it. Used for A (rows = m) and for
// B stored N x K (Q K^T: rows = n): the k's are the contiguous columns of src, and the tile
// turns them into its rows (k-major), so that the inner loop reads 4 consecutive m (or n)
// with one 16-byte load. Warp w stages the 4 columns c0 + 4w .. +3 (one 16-byte chunk per row),
// lane l the rows l, l + 32, ...: each of its 4 stores per chunk writes 32 consecutive words of
// one tile row (32 banks, no conflict). The global reads are 16 bytes from each of 32 rows;
// the 4 warps together read 64 contiguous bytes per row, the other half of each 32-byte sector
// comes from L1.
template <int kRows>
__device__ __forceinline__ void load_tile_transposed(float (*tile)[kRows], const float* src,
                                                     int64_t ld, int rows, int cols, int r0,
                                                     int c0, bool vec4) {
  const int k = 4 * (int(threadIdx.x) / 32);  // this warp's first column of the tile
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int i = 0; i < kRows / 32; ++i) {
    const int r = lane + 32 * i;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < rows) v = load_chunk(src + int64_t(r0 + r) * ld + c0 + k, cols - (c0 + k), vec4);
    tile[k + 0][r] = v.x;
    tile[k + 1][r] = v.y;
    tile[k + 2][r] = v.z;
    tile[k + 3][r] = v.w;
  }
}

// Per k0: stage both tiles, barrier, 16 rank-1 updates of the 8 x 8 accumulators, barrier.
template <bool kBTransposed>
__device__ __forceinline__ void gemm_k_loop(float (*a_tile)[kTileM], float (*b_tile)[kTileN],
                                            const GemmTile& t, float alpha) {
  float acc[kThreadM][kThreadN];  // this thread's micro-tile of C, in 64 registers
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) acc[i][j] = 0.0f;

  const HeadOperands& op = t.op;
  for (int k0 = 0; k0 < t.K; k0 += kTileK) {
    load_tile_transposed<kTileM>(a_tile, op.a, op.lda, t.M, t.K, t.m0, k0, t.a_vec4);
    if constexpr (kBTransposed)
      load_tile_transposed<kTileN>(b_tile, op.b, op.ldb, t.N, t.K, t.n0, k0, t.b_vec4);
    else
      load_tile_direct(b_tile, op.b, op.ldb, t.K, t.N, k0, t.n0, t.b_vec4);
    __syncthreads();  // both tiles are complete before anyone reads them

#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      // 8 values of A's column k and 8 of B's row k (4 loads of 16 bytes), then their outer
      // product: 64 independent FMAs.
      const float4 a_lo = *reinterpret_cast<const float4*>(&a_tile[k][t.ty * 4]);
      const float4 a_hi = *reinterpret_cast<const float4*>(&a_tile[k][kTileM / 2 + t.ty * 4]);
      const float4 b_lo = *reinterpret_cast<const float4*>(&b_tile[k][t.tx * 4]);
      const float4 b_hi = *reinterpret_cast<const float4*>(&b_tile[k][kTileN / 2 + t.tx * 4]);
      const float a_frag[kThreadM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w,
                                      a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float b_frag[kThreadN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w,
                                      b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // everyone is done with the tiles before the next loads overwrite them
  }
  store_c_tile(acc, t, alpha);
}

// ---- The batched GEMM (README, sections 2 and 3) ------------------------------------------------

template <bool kBTransposed>
__device__ __forceinline__ void gemm_tile(const HeadOperands& op, int M, int N, int K,
                                          float alpha, int m0, int n0) {
  __shared__ __align__(16) float a_tile[kTileK][kTileM];  // a_tile[k][m] = A[m0 + m][k0 + k]
  __shared__ __align__(16) float b_tile[kTileK][kTileN];  // b_tile[k][n] = B(k0 + k, n0 + n)
  const GemmTile t{op, M, N, K, m0, n0,
                   int(threadIdx.x) % kThreadsAcrossN, int(threadIdx.x) / kThreadsAcrossN,
                   aligned16(op.a) && op.lda % 4 == 0, aligned16(op.b) && op.ldb % 4 == 0,
                   aligned16(op.c) && op.ldc % 4 == 0};
  // The accumulators are declared inside gemm_k_loop, not here: as a reference parameter
  // they reach ptxas in another order, and it allocates registers differently.
  gemm_k_loop<kBTransposed>(a_tile, b_tile, t, alpha);
}

template <class Args, bool kBTransposed>
__global__ void __launch_bounds__(kGemmThreads, kMinGemmBlocksPerSM)
    batched_gemm_kernel(Args args, GridMap grid) {
  const BlockWork w = block_work(grid);
  gemm_tile<kBTransposed>(head_operands(args, w.b, w.h), args.M, args.N, args.K, args.alpha,
                          w.m0, w.n0);
}

template <class Args>
Status launch_gemm(const Args& args, cudaStream_t stream) {
  if (Status s = check_gemm_args(args); !s) return s;
  if (args.M > INT_MAX - kTileM || args.N > INT_MAX - kTileN)
    return Status::error("batched GEMM: M and N must be below 2^31 - 128");
  GridMap g;
  const int64_t tiles_m = (int64_t(args.M) + kTileM - 1) / kTileM;
  g.tiles_n = int((int64_t(args.N) + kTileN - 1) / kTileN);
  g.tiles = tiles_m * g.tiles_n;
  g.num_heads = args.num_heads;
  g.flat = args.num_heads > kMaxGridYZ || args.batch > kMaxGridYZ;
  const int64_t blocks = g.flat ? g.tiles * args.num_heads * args.batch : g.tiles;
  if (blocks > INT_MAX)
    return Status::error("batched GEMM: " + std::to_string(blocks) +
                         " tiles of C exceed the 2^31 - 1 blocks of grid.x");
  const dim3 grid = g.flat ? dim3(unsigned(blocks))
                           : dim3(unsigned(blocks), unsigned(args.num_heads), unsigned(args.batch));
  if (args.b_transposed)
    batched_gemm_kernel<Args, true><<<grid, kGemmThreads, 0, stream>>>(args, g);
  else
    batched_gemm_kernel<Args, false><<<grid, kGemmThreads, 0, stream>>>(args, g);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// ---- The row softmax (README, section 4) ---------------------------------------------------

// One warp per row. Pass 1 (row_max_and_sum): the row's max and sum, merged across the warp.
// Pass 2 (write_probabilities): p_j = 2^((s_j - m) · scale · log2 e) / l written over s_j; 0
// for the masked keys. Rows read twice, written once; the scores never leave the row's warp.
__global__ void __launch_bounds__(kSoftmaxRowsPerBlock * 32)
    row_softmax_kernel(RowSoftmaxArgs s, float scale_log2e) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kSoftmaxRowsPerBlock + threadIdx.x / 32;
  if (row >= s.rows) return;  // the whole warp leaves; this kernel has no block barrier
  const int visible = visible_keys(s, int(row % s.seq_q));
  float* x = s.scores + row * s.row_stride;
  const bool vec4 = aligned16(x);
  const RowStats stats = row_max_and_sum(x, visible, vec4, scale_log2e, lane);
  write_probabilities(x, s.seq_k, visible, vec4, scale_log2e, lane, stats);
}

// ---- The attention workspace ---------------------------------------------------------------

// Stream-ordered device memory that is freed (on the same stream) when it goes out of scope,
// so every early return below frees it too.
class StreamWorkspace {
 public:
  explicit StreamWorkspace(cudaStream_t stream) : stream_(stream) {}
  ~StreamWorkspace() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;

  // `bytes` holds the scores of `p` (and what else the caller needs beside them).
  Status allocate(size_t bytes, const Problem& p) {
    const cudaError_t err = cudaMallocAsync(&ptr_, bytes, stream_);
    if (err == cudaSuccess) return Status::ok();
    ptr_ = nullptr;
    (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    const auto gib = [](double b) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f", b / double(1 << 30));
      return std::string(text);
    };
    return Status::error(
        "module 05 keeps the scores in device memory: " + p.describe() + " needs " +
        gib(scores_bytes(p)) + " GiB for them (batch*heads*seq_q*seq_k floats), the device "
        "has " + gib(double(free_bytes)) + " GiB free of " + gib(double(total_bytes)) +
        " GiB (cudaMallocAsync: " + cudaGetErrorName(err) + "). Use a shorter sequence, or a "
        "fused module (03, 04) that needs no scores");
  }
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

__global__ void fill_head_pointers(float** out, float* base, int64_t head_stride, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = base + i * head_stride;
}

// ---- The entry points of batched_gemm.h ------------------------------------------------------

Status gemm_strided(const BatchedGemmStridedArgs& args, cudaStream_t stream) {
  return launch_gemm(args, stream);
}

Status gemm_pointer_array(const BatchedGemmPtrArgs& args, cudaStream_t stream) {
  return launch_gemm(args, stream);
}

Status row_softmax(const RowSoftmaxArgs& args, cudaStream_t stream) {
  if (Status s = check_softmax_args(args); !s) return s;
  if (args.rows == 0) return Status::ok();
  const int64_t blocks = (args.rows + kSoftmaxRowsPerBlock - 1) / kSoftmaxRowsPerBlock;
  if (blocks > INT_MAX) return Status::error("row softmax: too many rows for one launch");
  row_softmax_kernel<<<unsigned(blocks), kSoftmaxRowsPerBlock * 32, 0, stream>>>(
      args, args.scale * device::kLog2e);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

// P = softmax(S) in place, for the batch * heads * seq_q rows of S (row stride ld) that both
// forward paths write: S already holds scale * q.k, so the softmax scale is 1.
Status softmax_of_scores(const Problem& p, float* S, int64_t ld, cudaStream_t stream) {
  RowSoftmaxArgs sm;
  sm.scores = S;
  sm.rows = int64_t(p.batch) * p.heads * p.seq_q;
  sm.seq_q = p.seq_q;
  sm.seq_k = p.seq_k;
  sm.row_stride = ld;
  sm.scale = 1.0f;
  sm.causal = p.causal;
  return row_softmax(sm, stream);
}

Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  const int64_t ld = scores_row_stride(p.seq_k);  // 16-byte aligned rows of S
  const int64_t head_stride = int64_t(p.seq_q) * ld;
  StreamWorkspace scores(stream);
  if (Status s = scores.allocate(size_t(scores_bytes(p)), p); !s) return s;
  float* S = reinterpret_cast<float*>(scores.get());

  // S = scale · Q K^T: M = seq_q, N = seq_k, K = head_dim; K is stored [seq_k, head_dim],
  // i.e. B transposed. The scale rides on alpha (free in the GEMM's epilogue).
  BatchedGemmStridedArgs qk;
  qk.A = q;
  qk.B = k;
  qk.C = S;
  qk.M = p.seq_q;
  qk.N = p.seq_k;
  qk.K = p.head_dim;
  qk.batch = p.batch;
  qk.num_heads = p.heads;
  qk.a_batch_stride = p.q.batch, qk.a_head_stride = p.q.head, qk.a_row_stride = p.q.seq;
  qk.b_batch_stride = p.k.batch, qk.b_head_stride = p.k.head, qk.b_row_stride = p.k.seq;
  qk.b_head_group = p.heads / p.kv_heads;  // query head h reads K head p.kv_head(h)
  qk.c_batch_stride = p.heads * head_stride, qk.c_head_stride = head_stride, qk.c_row_stride = ld;
  qk.b_transposed = true;
  qk.alpha = p.softmax_scale();
  if (Status s = gemm_strided(qk, stream); !s) return s;

  if (Status s = softmax_of_scores(p, S, ld, stream); !s) return s;

  // O = P V: M = seq_q, N = head_dim, K = seq_k; V is stored [seq_k, head_dim] = K x N.
  BatchedGemmStridedArgs pv;
  pv.A = S;
  pv.B = v;
  pv.C = o;
  pv.M = p.seq_q;
  pv.N = p.head_dim;
  pv.K = p.seq_k;
  pv.batch = p.batch;
  pv.num_heads = p.heads;
  pv.a_batch_stride = qk.c_batch_stride, pv.a_head_stride = head_stride, pv.a_row_stride = ld;
  pv.b_batch_stride = p.v.batch, pv.b_head_stride = p.v.head, pv.b_row_stride = p.v.seq;
  pv.b_head_group = qk.b_head_group;
  pv.c_batch_stride = p.o.batch, pv.c_head_stride = p.o.head, pv.c_row_stride = p.o.seq;
  pv.b_transposed = false;
  pv.alpha = 1.0f;
  return gemm_strided(pv, stream);
}

Status forward_pointer_array(const Problem& p, const float* const* q_heads,
                             const float* const* k_heads, const float* const* v_heads,
                             float* const* o_heads, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  const int64_t ld = scores_row_stride(p.seq_k);
  const int64_t head_stride = int64_t(p.seq_q) * ld;
  const int64_t heads = int64_t(p.batch) * p.heads;
  // One allocation: the array of the scores' head pointers (256-byte aligned), then S.
  const size_t pointer_bytes = (size_t(heads) * sizeof(float*) + 255) / 256 * 256;
  StreamWorkspace workspace(stream);
  if (Status s = workspace.allocate(pointer_bytes + size_t(scores_bytes(p)), p); !s) return s;
  float** s_heads = reinterpret_cast<float**>(workspace.get());
  float* S = reinterpret_cast<float*>(workspace.get() + pointer_bytes);
  fill_head_pointers<<<unsigned((heads + 255) / 256), 256, 0, stream>>>(s_heads, S, head_stride,
                                                                        heads);
  ATTN_CUDA_RETURN(cudaGetLastError());

  BatchedGemmPtrArgs qk;
  qk.A = q_heads;
  qk.B = k_heads;
  qk.C = s_heads;
  qk.M = p.seq_q;
  qk.N = p.seq_k;
  qk.K = p.head_dim;
  qk.batch = p.batch;
  qk.num_heads = p.heads;
  qk.lda = p.q.seq, qk.ldb = p.k.seq, qk.ldc = ld;
  qk.b_transposed = true;
  qk.alpha = p.softmax_scale();
  if (Status s = gemm_pointer_array(qk, stream); !s) return s;

  if (Status s = softmax_of_scores(p, S, ld, stream); !s) return s;

  BatchedGemmPtrArgs pv;
  pv.A = s_heads;
  pv.B = v_heads;
  pv.C = o_heads;
  pv.M = p.seq_q;
  pv.N = p.head_dim;
  pv.K = p.seq_k;
  pv.batch = p.batch;
  pv.num_heads = p.heads;
  pv.lda = ld, pv.ldb = p.v.seq, pv.ldc = p.o.seq;
  pv.b_transposed = false;
  pv.alpha = 1.0f;
  return gemm_pointer_array(pv, stream);
}

}  // namespace attn::m05::ATTN_IMPL
