// Module 05 exercise: attention unfused, as two batched GEMMs and a row softmax.
// Read modules/05_batched_gemm/README.md first. Run: ./course run 05   Grade: ./course grade 05
//
//   S = scale · Q K^T   gemm_strided (B transposed), S in a device workspace
//   P = softmax(S)      row_softmax, in place, causal mask bottom-right aligned
//   O = P V             gemm_strided
//
// Given: the dispatch (grid, per-head pointers from strides or pointer arrays), the launches,
// forward(), the workspace, a 16-byte store helper and one of the two tile loaders. Your part
// is the tiled GEMM and the softmax, in seven TODOs:
//   TODO(1) load_chunk: 4 floats with one 16-byte load where allowed      (README, section 3)
//   TODO(2) load_tile_transposed: stage a tile k-major in shared memory    (section 3)
//   TODO(3) the k loop: tiles, barriers, the 8 x 8 outer products          (section 3)
//   TODO(4) the epilogue: alpha · acc into C, nothing past M or N           (section 3)
//   TODO(5) the row softmax's visible keys (causal, bottom-right)           (section 4)
//   TODO(6) pass 1: the row's max and sum (online, then across the warp)   (section 4)
//   TODO(7) pass 2: P over S, zeros for masked keys                        (section 4)
// The tiling (batched_gemm.h): a block of 128 threads computes a 128 x 64 tile of C, walking K
// in steps of 16; every thread accumulates an 8 x 8 micro-tile of C in registers.
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/cuda_check.h"
#include "modules/05_batched_gemm/batched_gemm.h"

namespace attn::m05::ATTN_IMPL {

namespace {

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = 2^(x · log2(e))
// 3 blocks of 128 threads per SM: <= 168 registers per thread. (With 4, ptxas must fit 128
// and spills: README, section 3.3.)
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

// One head's operands, from either strategy.
struct HeadOperands {
  const float* a;
  const float* b;
  float* c;
  int64_t lda, ldb, ldc;
};

__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmStridedArgs& g, int b,
                                                      int h) {
  return {g.A + b * g.a_batch_stride + h * g.a_head_stride,
          g.B + b * g.b_batch_stride + (h / g.b_head_group) * g.b_head_stride,
          g.C + b * g.c_batch_stride + h * g.c_head_stride,
          g.a_row_stride, g.b_row_stride, g.c_row_stride};
}

__device__ __forceinline__ HeadOperands head_operands(const BatchedGemmPtrArgs& g, int b, int h) {
  const int64_t i = int64_t(b) * g.num_heads + h;
  return {g.A[i], g.B[i], g.C[i], g.lda, g.ldb, g.ldc};
}

// ---- Moving 4 floats (README, section 3: float4 where alignment allows) -----------------------

// p[0 .. 4) with the entries at index >= count replaced by `fill`. One 16-byte load when the
// caller knows p is 16-byte aligned (vec4) and all 4 are in range, else up to 4 scalar loads.
// Nothing at index >= count is read.
__device__ __forceinline__ float4 load_chunk(const float* p, int count, bool vec4,
                                             float fill = 0.0f) {
  // TODO(1): when vec4 and count >= 4, one 16-byte load:
  //     return *reinterpret_cast<const float4*>(p);
  //   else the entries 0..3 one by one: p[e] where e < count, `fill` where e >= count (never
  //   read p[e] there: it may be past the end of the matrix). README, section 3.
  (void)p;
  (void)count;
  (void)vec4;
  return make_float4(fill, fill, fill, fill);
}

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

// ---- Staging tiles in shared memory (README, section 3) ---------------------------------------

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
  // TODO(2): for i = 0 .. kRows / 32 - 1 (#pragma unroll), row r = lane + 32 · i of the tile:
  //   v = the chunk src[(r0 + r) · ld + c0 + k .. + 3] via load_chunk (count: the columns left
  //       in the matrix, cols - (c0 + k)), or zeros when r0 + r >= rows (do not read there);
  //   tile[k + 0][r] = v.x, tile[k + 1][r] = v.y, tile[k + 2][r] = v.z, tile[k + 3][r] = v.w.
  //   Compute the row offset in 64 bits: int64_t(r0 + r) * ld. load_tile_direct above is
  //   the same idea without the transpose. README, section 3.
  (void)tile;
  (void)src;
  (void)ld;
  (void)rows;
  (void)cols;
  (void)r0;
  (void)c0;
  (void)vec4;
  (void)k;
  (void)lane;
}

// ---- The tile of C (README, section 3) ---------------------------------------------------------

template <bool kBTransposed>
__device__ __forceinline__ void gemm_tile(const HeadOperands& op, int M, int N, int K,
                                          float alpha, int m0, int n0) {
  __shared__ __align__(16) float a_tile[kTileK][kTileM];  // a_tile[k][m] = A[m0 + m][k0 + k]
  __shared__ __align__(16) float b_tile[kTileK][kTileN];  // b_tile[k][n] = B(k0 + k, n0 + n)

  // This thread's micro-tile: rows ty·4 + {0..3} and 64 + ty·4 + {0..3} of the tile, columns
  // tx·4 + {0..3} and 32 + tx·4 + {0..3}. Micro-tile entry (i, j) is tile row row_of(i),
  // tile column col_of(j).
  const int tx = int(threadIdx.x) % kThreadsAcrossN;  // 0..7
  const int ty = int(threadIdx.x) / kThreadsAcrossN;  // 0..15
  const auto row_of = [&](int i) { return (i / 4) * (kTileM / 2) + ty * 4 + i % 4; };
  const auto col_of = [&](int j) { return (j / 4) * (kTileN / 2) + tx * 4 + j % 4; };

  // 16-byte loads and stores need every row 16-byte aligned: the head's base and the row
  // stride. (Pointer arrays can point anywhere, so this is checked per block, on the GPU.)
  const bool a_vec4 = aligned16(op.a) && op.lda % 4 == 0;
  const bool b_vec4 = aligned16(op.b) && op.ldb % 4 == 0;
  const bool c_vec4 = aligned16(op.c) && op.ldc % 4 == 0;

  float acc[kThreadM][kThreadN];
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += kTileK) {
    // TODO(3): one step of K (README, section 3):
    //   a. stage the tiles: load_tile_transposed<kTileM>(a_tile, op.a, op.lda, M, K, m0, k0,
    //      a_vec4) for A; for B, load_tile_transposed<kTileN>(b_tile, op.b, op.ldb, N, K, n0, k0,
    //      b_vec4) when kBTransposed (if constexpr), else load_tile_direct(b_tile, op.b, op.ldb,
    //      K, N, k0, n0, b_vec4);
    //   b. a barrier: every thread's part of both tiles is in shared memory before anyone reads;
    //   c. for k = 0 .. kTileK - 1 (#pragma unroll): this thread's 8 values of A's column k,
    //      a_tile[k][row_of(i)] for i < 8, and 8 values of B's row k, b_tile[k][col_of(j)] for
    //      j < 8, each as two 16-byte loads (rows ty·4 .. +3 and 64 + ty·4 .. +3; columns
    //      tx·4 .. +3 and 32 + tx·4 .. +3), then acc[i][j] += a[i] · b[j] (fmaf) for all 64;
    //   d. a barrier: nobody starts the next loads while others still read these tiles.
    (void)a_tile;
    (void)b_tile;
    (void)k0;
  }

  // TODO(4): the micro-tile to C (README, section 3): for each i < 8 with row
  //   m = m0 + row_of(i) < M, and each half (columns n = n0 + col_of(4 · half), 4 of them),
  //   store alpha · acc[i][4 · half .. + 3] at op.c + int64_t(m) · op.ldc + n with store_chunk
  //   (count N - n: the columns left; c_vec4 says whether 16-byte stores are allowed).
  // (The casts below only keep the untouched starter free of "unused" warnings.)
  (void)store_chunk;
  (void)load_tile_direct;
  (void)alpha;
  (void)row_of;
  (void)col_of;
  (void)a_vec4;
  (void)b_vec4;
  (void)c_vec4;
  (void)M;
  (void)N;
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

// One warp per row. Pass 1: every lane keeps a running max m and sum l of its chunks (the
// online softmax of module 00, one update per chunk of 4), then the 32 (m, l) pairs are merged
// with shuffles. Pass 2: p_j = 2^((s_j - m) · scale · log2 e) / l, written over s_j; 0 for the
// masked keys. Rows read twice, written once; the scores never leave the row's warp.
__global__ void __launch_bounds__(kSoftmaxRowsPerBlock * 32)
    row_softmax_kernel(RowSoftmaxArgs s, float scale_log2e) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kSoftmaxRowsPerBlock + threadIdx.x / 32;
  if (row >= s.rows) return;  // the whole warp leaves; this kernel has no block barrier
  const int query = int(row % s.seq_q);
  // TODO(5): the keys this row sees are [0, visible). Without the mask, all seq_k of them.
  //   With s.causal, the mask is bottom-right aligned (module 04, Problem::first_masked_key):
  //   query i sees key j iff j <= i + seq_k - seq_q; clamp to [0, seq_k] (with seq_q > seq_k
  //   the first queries see nothing). Compute i + seq_k - seq_q in 64 bits. README, section 4.
  const int visible = s.seq_k;  // replace with the visible keys of TODO(5)
  (void)query;
  float* x = s.scores + row * s.row_stride;
  const bool vec4 = aligned16(x);

  // Pass 1. Masked (and missing) entries load as -inf and add 2^-inf = 0. A lane that has
  // seen nothing has m = -inf; m_ref = 0 then keeps (m - m_ref) from being -inf - -inf = NaN.
  float m = -INFINITY, l = 0.0f;
  // TODO(6): the row's max m and sum l = sum_j 2^((s_j - m) · scale_log2e) (README, section 4).
  //   a. each lane walks its chunks: c = 4 · lane, c + 128, ... < visible; load the chunk with
  //      load_chunk(x + c, visible - c, vec4, -INFINITY) (masked keys add 2^-inf = 0), and
  //      update its running (m, l) once per chunk:
  //        m_new = max(m, chunk max),  m_ref = (m_new == -inf ? 0 : m_new),
  //        l = l · 2^((m - m_ref) · scale_log2e) + sum of the chunk's 2^((s - m_ref) · scale_log2e),
  //        m = m_new;
  //   b. merge the 32 lanes' (m, l) with __shfl_xor_sync(0xffffffff, .., offset) for
  //      offset = 16, 8, 4, 2, 1, by the same rule (each side rescaled to the larger max).
  //   m_ref keeps -inf - -inf = NaN out: a lane, or a whole row, may see no key at all.

  // TODO(7): pass 2, the whole row (README, section 4): for c = 4 · lane, c + 128, ... < seq_k,
  //   p = 2^((s - m_ref) · scale_log2e) / l for the visible keys (load them as in pass 1: the
  //   masked ones come back -inf and give 0), stored over the scores with
  //   store_chunk(x + c, p, s.seq_k - c, vec4). A row that sees no key has l = 0: write zeros,
  //   not 0/0 (use 1/l only when l > 0).
  // (The casts below only keep the untouched starter free of "unused" warnings.)
  (void)(m + l);
  (void)lane;
  (void)x;
  (void)vec4;
  (void)visible;
  (void)scale_log2e;
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

}  // namespace

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
      args, args.scale * kLog2e);
  ATTN_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
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

  RowSoftmaxArgs sm;
  sm.scores = S;
  sm.rows = int64_t(p.batch) * p.heads * p.seq_q;
  sm.seq_q = p.seq_q;
  sm.seq_k = p.seq_k;
  sm.row_stride = ld;
  sm.scale = 1.0f;  // S already holds scale · q·k
  sm.causal = p.causal;
  if (Status s = row_softmax(sm, stream); !s) return s;

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

  RowSoftmaxArgs sm;
  sm.scores = S;
  sm.rows = heads * p.seq_q;
  sm.seq_q = p.seq_q;
  sm.seq_k = p.seq_k;
  sm.row_stride = ld;
  sm.scale = 1.0f;
  sm.causal = p.causal;
  if (Status s = row_softmax(sm, stream); !s) return s;

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
