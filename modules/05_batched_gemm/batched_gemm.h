// Module 05: the unfused baseline. Attention as the textbook writes it, three kernels:
//   S = scale · Q K^T     (batched GEMM, B transposed: K is stored [seq_k, head_dim])
//   P = softmax(S)        (row softmax, in place, causal mask bottom-right aligned)
//   O = P V               (batched GEMM)
// with the seq_q x seq_k scores of every head in device memory. The GEMM has two dispatch
// strategies for "many small matrix products": strided (every head at a fixed stride from a
// base pointer) and pointer-array (a device array with one pointer per head, for heads that
// live in separate allocations).
// The functions declared here are defined in batched_gemm_kernels.cuh (the given pipeline)
// over the seven device functions of the exercise (exercise.cu) or of the solution
// (solutions/05_batched_gemm/solution.cu); the grader (tests/test_05_batched_gemm.cpp) checks
// either, against a double-precision CPU GEMM, against cuBLAS and against the attention
// reference. The benchmark (bench/05_batched_gemm/bench.cu, program bench_05) times both
// strategies beside cuBLAS.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "common/problem.h"
#include "common/status.h"

namespace attn::m05 {

// ---- The GEMM's tiling (shared by the exercise, the solution, the grader and the bench) ----
//
// A block of kGemmThreads threads computes a kTileM x kTileN tile of C, walking K in steps of
// kTileK: it stages a kTileM x kTileK tile of A and a kTileK x kTileN tile of B in shared
// memory, then every thread accumulates its kThreadM x kThreadN micro-tile of C in registers
// (README, section 3).
constexpr int kTileM = 128;
constexpr int kTileN = 64;
constexpr int kTileK = 16;
constexpr int kThreadM = 8;  // rows of C per thread (two groups of 4, 64 rows apart)
constexpr int kThreadN = 8;  // columns of C per thread (two groups of 4, 32 columns apart)
constexpr int kGemmThreads = (kTileM / kThreadM) * (kTileN / kThreadN);  // 16 x 8 = 128
static_assert(kGemmThreads == 128, "the tile loaders assume 4 warps");

// The row softmax: one warp per row, kSoftmaxRowsPerBlock rows per block.
constexpr int kSoftmaxRowsPerBlock = 8;

// The grid's y and z dimensions stop at 65535 blocks; x goes to 2^31 - 1.
constexpr int kMaxGridYZ = 65535;

// ---- The batched GEMM API ----------------------------------------------------------------
//
// For every batch b < batch and head h < num_heads, with row-major matrices:
//   C_bh[m][n] = alpha · sum_k A_bh[m][k] · B_bh(k, n)      (m < M, n < N, k < K)
// where B_bh(k, n) is B_bh[k][n] (B stored K x N), or B_bh[n][k] when b_transposed (B stored
// N x K, as K is for Q K^T). C is overwritten (no beta). All strides are in elements; the
// last index of every matrix is contiguous. Entries of C outside its M x N (the padding
// between rows when the row stride is larger than N) are never written.

// Strided: head (b, h) of X starts at X + b · x_batch_stride + h · x_head_stride, and its
// row r at that + r · x_row_stride. One launch for all heads; BHSD and BSHD tensors are both
// just strides (BSHD: row stride heads · head_dim, head stride head_dim). A head stride of 0
// gives every head the same matrix. Grouped heads (GQA: several query heads share one K/V
// head) are not a stride: b_head_group = g makes head h read B's head h / g (A and C always
// use h).
struct BatchedGemmStridedArgs {
  const float* A = nullptr;  // [.., M, K]
  const float* B = nullptr;  // [.., K, N], or [.., N, K] when b_transposed
  float* C = nullptr;        // [.., M, N]
  int M = 0, N = 0, K = 0;
  int batch = 1, num_heads = 1;
  int64_t a_batch_stride = 0, a_head_stride = 0, a_row_stride = 0;
  int64_t b_batch_stride = 0, b_head_stride = 0, b_row_stride = 0;
  int64_t c_batch_stride = 0, c_head_stride = 0, c_row_stride = 0;
  int b_head_group = 1;  // heads per head of B: head h reads B's head h / b_head_group
  bool b_transposed = false;
  float alpha = 1.0f;
};

// Pointer-array: head (b, h) of X starts at X[b · num_heads + h], where X is a DEVICE array
// of batch · num_heads pointers (the kernel reads it). Heads can live anywhere, e.g. in
// separate allocations, and several entries may point at the same head (GQA); rows are
// lda, ldb, ldc elements apart.
struct BatchedGemmPtrArgs {
  const float* const* A = nullptr;  // device array of batch · num_heads pointers to [M, K]
  const float* const* B = nullptr;  // ... to [K, N], or [N, K] when b_transposed
  float* const* C = nullptr;        // ... to [M, N]
  int M = 0, N = 0, K = 0;
  int batch = 1, num_heads = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides
  bool b_transposed = false;
  float alpha = 1.0f;
};

// Argument checks shared by exercise and solution (given): sizes >= 1, row strides that do
// not overlap rows, a finite alpha, non-null pointers. One line saying what is wrong.
inline Status check_gemm_shape(int M, int N, int K, int batch, int num_heads, int64_t a_row,
                               int64_t b_row, int64_t c_row, bool b_transposed, float alpha) {
  for (auto [name, value] : {std::pair{"M", M}, {"N", N}, {"K", K}, {"batch", batch},
                             {"num_heads", num_heads}})
    if (value < 1)
      return Status::error(std::string("batched GEMM: ") + name + " must be >= 1 (got " +
                           std::to_string(value) + ")");
  // A row stride below the row length would make rows overlap (only matters with > 1 row).
  const int b_rows = b_transposed ? N : K, b_cols = b_transposed ? K : N;
  const bool overlap = (M > 1 && a_row < K) || (b_rows > 1 && b_row < b_cols) ||
                       (M > 1 && c_row < N) || a_row < 0 || b_row < 0 || c_row < 0;
  if (overlap)
    return Status::error(std::string("batched GEMM: a row stride is smaller than its row "
                                     "(need lda >= K, ldb >= ") +
                         (b_transposed ? "K" : "N") + ", ldc >= N)");
  if (!std::isfinite(alpha)) return Status::error("batched GEMM: alpha must be finite");
  return Status::ok();
}

inline Status check_gemm_args(const BatchedGemmStridedArgs& g) {
  if (!g.A || !g.B || !g.C) return Status::error("batched GEMM: A, B and C must be non-null");
  if (g.a_batch_stride < 0 || g.a_head_stride < 0 || g.b_batch_stride < 0 ||
      g.b_head_stride < 0 || g.c_batch_stride < 0 || g.c_head_stride < 0)
    return Status::error("batched GEMM: negative batch or head strides are not supported");
  if (g.b_head_group < 1) return Status::error("batched GEMM: b_head_group must be >= 1");
  return check_gemm_shape(g.M, g.N, g.K, g.batch, g.num_heads, g.a_row_stride, g.b_row_stride,
                          g.c_row_stride, g.b_transposed, g.alpha);
}

inline Status check_gemm_args(const BatchedGemmPtrArgs& g) {
  if (!g.A || !g.B || !g.C)
    return Status::error("batched GEMM: the pointer arrays A, B and C must be non-null");
  return check_gemm_shape(g.M, g.N, g.K, g.batch, g.num_heads, g.lda, g.ldb, g.ldc,
                          g.b_transposed, g.alpha);
}

// ---- The row softmax ------------------------------------------------------------------------
//
// In place on `rows` rows of seq_k scores, row r at scores + r · row_stride:
//   s_j <- exp(scale · s_j - max) / sum   over the visible keys j < first_masked_key(query),
//   s_j <- 0                              for the masked keys (causal only),
// where the query of row r is r % seq_q (the rows of a head are its queries, heads follow
// each other) and the causal mask is Problem::first_masked_key's: bottom-right aligned,
// query i sees key j iff j <= i + seq_k - seq_q. A row that sees no key becomes all zeros.
// scale must be > 0 (then max(scale · s) = scale · max(s)).
struct RowSoftmaxArgs {
  float* scores = nullptr;
  int64_t rows = 0;  // batch · heads · seq_q in forward()
  int seq_q = 1, seq_k = 1;
  int64_t row_stride = 0;  // >= seq_k
  float scale = 1.0f;
  bool causal = false;
};

inline Status check_softmax_args(const RowSoftmaxArgs& s) {
  if (!s.scores) return Status::error("row softmax: scores must be non-null");
  if (s.rows < 0 || s.seq_q < 1 || s.seq_k < 1)
    return Status::error("row softmax: rows >= 0, seq_q >= 1 and seq_k >= 1 are required");
  if (s.row_stride < s.seq_k && s.rows > 1)
    return Status::error("row softmax: row_stride must be >= seq_k");
  if (!(s.scale > 0.0f) || !std::isfinite(s.scale))
    return Status::error("row softmax: scale must be finite and > 0");
  return Status::ok();
}

// ---- Attention --------------------------------------------------------------------------------

// Bytes of the scores workspace forward() allocates: batch · heads · seq_q rows of seq_k
// floats, each row padded to a multiple of 4 floats (16-byte aligned rows).
inline int64_t scores_row_stride(int seq_k) { return (int64_t(seq_k) + 3) / 4 * 4; }
inline double scores_bytes(const Problem& p) {
  return 4.0 * double(p.batch) * p.heads * p.seq_q * double(scores_row_stride(p.seq_k));
}

// What forward() handles: any problem the course accepts, grouped K/V heads included (the
// GEMM has no head-dim limit; K and V heads are found with b_head_group). The limit that
// matters is memory: the scores need scores_bytes(p), which forward() allocates and reports
// when it does not fit. Shared by exercise and solution (given, not a TODO).
inline Status supports(const Problem&) { return Status::ok(); }

// ATTN_IMPL is `exercise` or `solution`, set by the build (see modules/00_reference/reference.h).
namespace ATTN_IMPL {

// One launch for every (batch, head): grid (tiles of C, num_heads, batch), or a flat grid.x
// when num_heads or batch exceed 65535 (README, section 2). Asynchronous on `stream`.
Status gemm_strided(const BatchedGemmStridedArgs& args, cudaStream_t stream);
// The same over per-head pointers read from device arrays.
Status gemm_pointer_array(const BatchedGemmPtrArgs& args, cudaStream_t stream);
// The row softmax described above, in place. Asynchronous on `stream`.
Status row_softmax(const RowSoftmaxArgs& args, cudaStream_t stream);

// Attention, unfused: allocates the scores (cudaMallocAsync on `stream`, freed on it after
// use), runs S = scale · Q K^T (gemm_strided), P = softmax(S) (row_softmax, in place),
// O = P V (gemm_strided). q, k, v, o are device pointers laid out as `p` says (BHSD, BSHD, any
// strides). Returns an error naming the GiB the scores need when they do not fit.
Status forward(const Problem& p, const float* q, const float* k, const float* v, float* o,
               cudaStream_t stream);

// The same over heads that live anywhere: q_heads[b · heads + h] points at head (b, h)'s
// seq_q x head_dim rows, p.q.seq elements apart; o_heads likewise (p.o.seq); k_heads and
// v_heads[b · heads + h] at the K and V head that query head h reads (p.kv_head(h): with
// grouped heads several entries are the same pointer), rows p.k.seq and p.v.seq apart. p's
// batch and head strides are not used. The four arrays are DEVICE arrays of batch · heads
// pointers. Runs gemm_pointer_array -> row_softmax ->
// gemm_pointer_array on a scores workspace as forward() does.
Status forward_pointer_array(const Problem& p, const float* const* q_heads,
                             const float* const* k_heads, const float* const* v_heads,
                             float* const* o_heads, cudaStream_t stream);

}  // namespace ATTN_IMPL
}  // namespace attn::m05
