// Kernels with planted bugs, for tests/test_emulation.cpp: the CPU emulation must stop each one
// with the thread and the source line. Compiled only for the emulation (through the same
// rewrite and checks as the modules). A comment `// PLANTED: name` marks each line a report
// must name; the test finds the line numbers by reading this file.
#include "tests/emulation/planted.h"

#include <vector>

#include "modules/02_smem_tiling/smem_tiling.h"
#include "modules/02_smem_tiling/smem_tiling_kernel.cuh"

namespace attn::planted {

// Module 02's solution (solutions/02_smem_tiling/solution.cu), with a barrier of pass 1 left
// out: kLeading drops the one between the tile load and the reads, kTrailing the one before
// the next load overwrites the tile.
template <bool kLeading, bool kTrailing>
struct Tiles02 {
  template <int D>
  static __device__ __forceinline__ void load_tile(float (*tile)[D], const float* __restrict__ src,
                                                   const Strides& s, int b, int h, int key0,
                                                   int keys, int head_dim) {
    for (int e = threadIdx.x; e < m02::kKeysPerTile * D; e += m02::kQueriesPerBlock) {
      const int row = e / D;
      const int col = e % D;
      float x = 0.0f;
      if (row < keys && col < head_dim) x = src[Problem::offset(s, b, h, key0 + row) + col];
      tile[row][col] = x;  // PLANTED: tile store
    }
  }

  template <int D>
  static __device__ __forceinline__ float row_max(const m02::Block<D>& blk,
                                                  const float (&q_reg)[D]) {
    const int tiles = (blk.seq_k + m02::kKeysPerTile - 1) / m02::kKeysPerTile;
    float m = -INFINITY;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * m02::kKeysPerTile;
      const int keys = min(m02::kKeysPerTile, blk.seq_k - key0);
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      if (kLeading) __syncthreads();
      for (int j = 0; j < keys; ++j) m = fmaxf(m, m02::dot<D>(q_reg, blk.k_tile[j]));  // PLANTED: tile read
      if (kTrailing) __syncthreads();
    }
    return m;
  }

  template <int D>
  static __device__ __forceinline__ float row_sum(const m02::Block<D>& blk,
                                                  const float (&q_reg)[D], float m) {
    const int tiles = (blk.seq_k + m02::kKeysPerTile - 1) / m02::kKeysPerTile;
    float l = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * m02::kKeysPerTile;
      const int keys = min(m02::kKeysPerTile, blk.seq_k - key0);
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      __syncthreads();
      for (int j = 0; j < keys; ++j) l += expf(m02::dot<D>(q_reg, blk.k_tile[j]) - m);
      __syncthreads();
    }
    return l;
  }

  template <int D, int kCols>
  static __device__ __forceinline__ void output_sweep(const m02::Block<D>& blk,
                                                      const float (&q_reg)[D], float m,
                                                      float inv_l, int col0, float (&acc)[kCols],
                                                      bool has_query, float* o_row) {
    const int tiles = (blk.seq_k + m02::kKeysPerTile - 1) / m02::kKeysPerTile;
    for (int t = 0; t < tiles; ++t) {
      const int key0 = t * m02::kKeysPerTile;
      const int keys = min(m02::kKeysPerTile, blk.seq_k - key0);
      load_tile<D>(blk.k_tile, blk.k, blk.k_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      load_tile<D>(blk.v_tile, blk.v, blk.v_strides, blk.b, blk.h, key0, keys, blk.head_dim);
      __syncthreads();
      for (int j = 0; j < keys; ++j) {
        const float w = expf(m02::dot<D>(q_reg, blk.k_tile[j]) - m);
        for (int c = 0; c < kCols; ++c) acc[c] = fmaf(w, blk.v_tile[j][col0 + c], acc[c]);
      }
      __syncthreads();
    }
    if (has_query)
      for (int c = 0; c < kCols; ++c)
        if (col0 + c < blk.head_dim) o_row[col0 + c] = acc[c] * inv_l;
  }
};

Status forward_02(const Problem& p, const float* q, const float* k, const float* v, float* o,
                  cudaStream_t stream) {
  return m02::launch<Tiles02<true, true>>(p, q, k, v, o, stream);
}
Status forward_02_no_leading_barrier(const Problem& p, const float* q, const float* k,
                                     const float* v, float* o, cudaStream_t stream) {
  return m02::launch<Tiles02<false, true>>(p, q, k, v, o, stream);
}
Status forward_02_no_trailing_barrier(const Problem& p, const float* q, const float* k,
                                      const float* v, float* o, cudaStream_t stream) {
  return m02::launch<Tiles02<true, false>>(p, q, k, v, o, stream);
}

// ---- Small kernels, one bug each -------------------------------------------------------------

__global__ void early_return(float* out) {
  if (threadIdx.x >= 16) return;  // threads without work leave...
  __syncthreads();                // PLANTED: barrier after return
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_barriers(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();  // PLANTED: barrier in if
  } else {
    __syncthreads();  // PLANTED: barrier in else
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void read_past_input(const float* in, float* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i + 1];  // PLANTED: read past the end
}

__global__ void write_past_output(float* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  out[i] = 1.0f;  // PLANTED: write past the end (no bounds check, grid rounded up)
  (void)n;
}

__global__ void shared_out_of_bounds(float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x + 1] = float(threadIdx.x);  // PLANTED: shared index past the end
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

__global__ void shared_race(float* out) {
  __shared__ float partial[64];
  partial[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  // Each thread adds its right neighbour's value into its own slot: the neighbour may already
  // have overwritten its slot with its own sum, or not yet.
  partial[threadIdx.x] += partial[(threadIdx.x + 1) % 64];  // PLANTED: neighbour race
  __syncthreads();
  out[threadIdx.x] = partial[threadIdx.x];
}

__global__ void misaligned_vector(const float* in, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(in + 1);  // PLANTED: misaligned float4
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

__global__ void same_output_twice(float* out) {
  out[threadIdx.x / 2] = float(threadIdx.x);  // PLANTED: two threads, one element
}

// Correct kernels: a warp sum with shuffles and a block sum through shared memory with
// barriers. Nothing to report; the sums must be right.
__global__ void warp_and_block_sums(const float* in, float* out) {
  __shared__ float warp_sums[4];
  float x = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = x;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = warp_sums[0] + warp_sums[1] + warp_sums[2] + warp_sums[3];
  out[1 + threadIdx.x] = x;  // every lane holds its warp's sum
  const unsigned ballot = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
  if (threadIdx.x == 0) out[129] = float(__popc(ballot));
}

namespace {

// Runs launch(in, out) on n-float device buffers (in holds 0, 1, 2, ...): the error report,
// or "" when the kernel ran without one; `result` gets out.
template <class Launch>
std::string run(int n, Launch launch, std::vector<float>* result = nullptr) {
  float* in = nullptr;
  float* out = nullptr;
  cudaMalloc(&in, size_t(n) * sizeof(float));
  cudaMalloc(&out, size_t(n) * sizeof(float));
  std::vector<float> host(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) host[size_t(i)] = float(i);
  cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(out, 0, host.size() * sizeof(float));
  launch(in, out);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  std::string report;
  if (err != cudaSuccess) report = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  if (result) {
    result->resize(size_t(n));
    cudaMemcpy(result->data(), out, result->size() * sizeof(float), cudaMemcpyDeviceToHost);
  }
  cudaFree(in);
  cudaFree(out);
  return report;
}

}  // namespace

std::string run_planted(const std::string& name, std::vector<float>* result) {
  if (name == "early return")
    return run(64, [](float*, float* out) { early_return<<<1, 64>>>(out); });
  if (name == "divergent barriers")
    return run(64, [](float*, float* out) { divergent_barriers<<<1, 64>>>(out); });
  if (name == "read past input")
    return run(100, [](float* in, float* out) { read_past_input<<<1, 128>>>(in, out, 100); });
  if (name == "write past output")
    return run(100, [](float*, float* out) { write_past_output<<<1, 128>>>(out, 100); });
  if (name == "shared out of bounds")
    return run(64, [](float*, float* out) { shared_out_of_bounds<<<1, 64>>>(out); });
  if (name == "shared race")
    return run(64, [](float*, float* out) { shared_race<<<1, 64>>>(out); });
  if (name == "misaligned vector")
    return run(64, [](float* in, float* out) { misaligned_vector<<<1, 32>>>(in, out); });
  if (name == "same output twice")
    return run(64, [](float*, float* out) { same_output_twice<<<1, 64>>>(out); });
  if (name == "grid.y past the limit")
    return run(64, [](float*, float* out) { early_return<<<dim3(1, 300), 64>>>(out); });
  if (name == "block of 2048 threads")
    return run(64, [](float*, float* out) { early_return<<<1, 2048>>>(out); });
  if (name == "sums")
    return run(130, [](float* in, float* out) { warp_and_block_sums<<<1, 128>>>(in, out); }, result);
  return "no planted kernel named " + name;
}

}  // namespace attn::planted
