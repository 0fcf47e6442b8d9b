// decode_loop_10: module 10 end to end. One attention layer with random weights generates
// tokens for a batch of sequences: the prompts are projected to K and V, appended to a paged
// cache and attended to by packed prefill; then each step projects the last hidden state to
// one query and one K/V row per sequence, appends the row (append_kv), attends over the whole
// cache (decode) and projects the output back to the next hidden state. Two steps are
// checked against the double-precision reference on the cache the GPU holds.
//
//   ./build/release/decode_loop_10 --impl exercise --prompts 100,37,5,260 --steps 32
//
// The projections are plain fp32 matrix products (one thread per output): the point is the
// data flow of a decode step, not their speed.
#include <CLI/CLI.hpp>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/half.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "common/registry.h"
#include "bench/10_decoding/device_fill.cuh"

using namespace attn;

namespace {

// y[r][o] = sum_i x[r][i] w[i][o], then rounded to bf16 (the tensors' type) into y16.
__global__ void project(const float* x, const float* w, float* y, int rows, int in, int out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(rows) * out) return;
  const int r = int(i / out), o = int(i % out);
  float acc = 0.f;
  for (int k = 0; k < in; ++k) acc = fmaf(x[int64_t(r) * in + k], w[int64_t(k) * out + o], acc);
  y[i] = acc;
}
__global__ void to_bf16(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
__global__ void from_bf16(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}

unsigned blocks(int64_t n) { return unsigned((n + 255) / 256); }

// x [rows, in] -> bf16 y16 [rows, out] through w [in, out] (device pointers).
void project16(const float* x, const DeviceBuffer<float>& w, DeviceBuffer<float>& tmp,
               uint16_t* y16, int rows, int in, int out) {
  project<<<blocks(int64_t(rows) * out), 256>>>(x, w.get(), tmp.get(), rows, in, out);
  to_bf16<<<blocks(int64_t(rows) * out), 256>>>(tmp.get(), y16, int64_t(rows) * out);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

std::vector<float> random_matrix(int rows, int cols, std::mt19937& gen) {
  // Entries of variance 1 / rows keep a product's outputs near unit variance.
  std::normal_distribution<float> dist(0.f, 1.f / std::sqrt(float(rows)));
  std::vector<float> m(size_t(rows) * cols);
  for (float& x : m) x = dist(gen);
  return m;
}

void check(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"decode_loop_10: a decoding loop of one attention layer on random weights"};
  std::string impl = "solution", prompts_text = "100,37,5,260";
  int heads = 8, kv_heads = 2, dim = 64, steps = 32, page_size = 16;
  unsigned seed = 7;
  app.add_option("--impl", impl, "exercise or solution");
  app.add_option("--prompts", prompts_text, "prompt length of each sequence (>= 1)");
  app.add_option("--steps", steps, "tokens to generate per sequence")->check(CLI::Range(1, 4096));
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "K/V heads (divides --heads)");
  app.add_option("--dim", dim, "head_dim");
  app.add_option("--page-size", page_size, "tokens per cache page");
  app.add_option("--seed", seed, "seed of the weights and the prompts");
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "decode_loop_10: %s\n", no_device_reason().c_str());
    return 1;
  }
  try {
    const Kernel* kernel =
        find_kernel(10, impl == "exercise" ? Impl::exercise : Impl::solution);
    if (!kernel || !kernel->inference) throw std::runtime_error("module 10 is not linked");
    const InferenceEntry& m10 = *kernel->inference;
    std::vector<int> prompts;
    check(parse_seqlens(prompts_text, &prompts));
    if (std::any_of(prompts.begin(), prompts.end(), [](int n) { return n < 1; }))
      throw std::runtime_error("every prompt needs at least one token");
    const int batch = int(prompts.size()), dm = heads * dim, kvd = kv_heads * dim;

    // The cache is sized and its pages reserved (shuffled) for the final lengths up front.
    std::vector<int> final_lens;
    for (int n : prompts) final_lens.push_back(n + steps);
    const PagedProblem full =
        PagedProblem::make(heads, kv_heads, dim, 1, final_lens, page_size, false, DType::bf16);
    check(m10.supports_paged(full));
    const std::vector<int32_t> table = make_block_table(full, true, seed);

    std::mt19937 gen(seed);
    const DeviceBuffer<float> wq(random_matrix(dm, dm, gen)), wk(random_matrix(dm, kvd, gen)),
        wv(random_matrix(dm, kvd, gen)), wo(random_matrix(dm, dm, gen));
    DeviceBuffer<uint16_t> k_cache(size_t(full.cache_elements())),
        v_cache(size_t(full.cache_elements()));
    // Random, not zeros, in every slot before anything is appended: a row that append_kv
    // misplaces, or that decode reads from the wrong place, then changes the output.
    bench10::fill_random(k_cache.get(), full.cache_elements(), seed + 1, DType::bf16);
    bench10::fill_random(v_cache.get(), full.cache_elements(), seed + 2, DType::bf16);
    DeviceBuffer<int32_t> table_d(table);

    // ---- Prefill: all prompt tokens packed, projected, appended, attended -------------------
    int64_t total = 0;
    for (int n : prompts) total += n;
    std::normal_distribution<float> unit(0.f, 1.f);
    std::vector<float> x(size_t(total) * dm);
    for (float& e : x) e = unit(gen);
    DeviceBuffer<float> x_d(x), tmp(size_t(total) * std::max(dm, kvd));
    DeviceBuffer<uint16_t> q16(size_t(total) * dm), k16(size_t(total) * kvd),
        v16(size_t(total) * kvd), o16(size_t(total) * dm);
    o16.poison();  // an output prefill does not write stays NaN, and so does what follows
    project16(x_d.get(), wq, tmp, q16.get(), int(total), dm, dm);
    project16(x_d.get(), wk, tmp, k16.get(), int(total), dm, kvd);
    project16(x_d.get(), wv, tmp, v16.get(), int(total), dm, kvd);
    // Append each prompt in chunks of up to 64 tokens (one sequence at a time: append_kv
    // writes the same number of new tokens for every sequence of its problem).
    int64_t row = 0;
    for (int b = 0; b < batch; ++b) {
      for (int done = 0; done < prompts[b];) {
        const int chunk = std::min(64, prompts[b] - done);
        PagedProblem one = PagedProblem::make(heads, kv_heads, dim, chunk, {done + chunk},
                                              page_size, false, DType::bf16);
        one.pages_per_seq = full.pages_per_seq, one.num_pages = full.num_pages;
        DeviceBuffer<int32_t> len(std::vector<int32_t>{done + chunk});
        check(m10.append_kv(one, k16.get() + (row + done) * kvd, v16.get() + (row + done) * kvd,
                            k_cache.get(), v_cache.get(),
                            table_d.get() + int64_t(b) * full.pages_per_seq, len.get(), nullptr));
        done += chunk;
      }
      row += prompts[b];
    }
    const VarlenProblem vp =
        VarlenProblem::make(heads, kv_heads, dim, prompts, prompts, true, DType::bf16);
    DeviceBuffer<int32_t> cu(vp.cu_seqlens_q());
    check(m10.prefill(vp, q16.get(), k16.get(), v16.get(), cu.get(), cu.get(), o16.get(), nullptr));
    // The hidden state that the first step starts from: O Wo at each prompt's last token.
    DeviceBuffer<float> o_f(size_t(total) * dm), h(size_t(batch) * dm);
    from_bf16<<<blocks(total * dm), 256>>>(o16.get(), o_f.get(), total * dm);
    row = 0;
    for (int b = 0; b < batch; ++b) {
      row += prompts[b];
      project<<<blocks(dm), 256>>>(o_f.get() + (row - 1) * dm, wo.get(), h.get() + int64_t(b) * dm,
                                   1, dm, dm);
    }
    ATTN_CUDA_CHECK(cudaGetLastError());

    // ---- Decode steps -----------------------------------------------------------------------
    PagedProblem p = full;
    for (int b = 0; b < batch; ++b) p.seqlens_k[b] = prompts[b];
    size_t work_bytes = 0;  // the largest workspace any step's split plan needs
    for (int s = 1; s <= steps; ++s) {
      PagedProblem ps = p;
      for (int b = 0; b < batch; ++b) ps.seqlens_k[b] += s;
      work_bytes = std::max(work_bytes, m10.decode_workspace_bytes(ps));
    }
    DeviceBuffer<unsigned char> work(work_bytes);
    DeviceBuffer<uint16_t> qs(size_t(batch) * dm), ks(size_t(batch) * kvd), vs(size_t(batch) * kvd),
        os(size_t(batch) * dm);
    DeviceBuffer<float> os_f(size_t(batch) * dm);
    DeviceBuffer<int32_t> lens_d{size_t(batch)};
    cudaEvent_t start, stop;
    ATTN_CUDA_CHECK(cudaEventCreate(&start));
    ATTN_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> step_ms;
    int failures = 0;
    for (int s = 0; s < steps; ++s) {
      for (int b = 0; b < batch; ++b) p.seqlens_k[b] += 1;  // the new token counts
      lens_d.copy_from(std::vector<int32_t>(p.seqlens_k.begin(), p.seqlens_k.end()));
      project16(h.get(), wq, tmp, qs.get(), batch, dm, dm);
      project16(h.get(), wk, tmp, ks.get(), batch, dm, kvd);
      project16(h.get(), wv, tmp, vs.get(), batch, dm, kvd);
      PagedDevicePtrs ptrs;
      ptrs.q = qs.get(), ptrs.k_cache = k_cache.get(), ptrs.v_cache = v_cache.get();
      ptrs.block_table = table_d.get(), ptrs.seqlens_k = lens_d.get(), ptrs.o = os.get();
      ptrs.workspace = work.get(), ptrs.workspace_bytes = work.size();
      ATTN_CUDA_CHECK(cudaEventRecord(start));
      check(m10.append_kv(p, ks.get(), vs.get(), k_cache.get(), v_cache.get(), table_d.get(),
                          lens_d.get(), nullptr));
      check(m10.decode(p, ptrs, nullptr));
      ATTN_CUDA_CHECK(cudaEventRecord(stop));
      ATTN_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      step_ms.push_back(ms);
      if (s == 0 || s == steps - 1) {  // the output against the reference on the GPU's cache
        PagedInputs in;
        in.q = from_bits16(qs.to_host(), p.dtype);
        in.k_cache = from_bits16(k_cache.to_host(), p.dtype);
        in.v_cache = from_bits16(v_cache.to_host(), p.dtype);
        in.block_table = table;
        const Comparison c = compare_output(output_shape(p), from_bits16(os.to_host(), p.dtype),
                                            paged_reference(p, in));
        std::printf("step %3d (%s): %s\n", s, p.describe().c_str(), c.summary().c_str());
        failures += !c.passed();
      }
      from_bf16<<<blocks(int64_t(batch) * dm), 256>>>(os.get(), os_f.get(), int64_t(batch) * dm);
      project<<<blocks(int64_t(batch) * dm), 256>>>(os_f.get(), wo.get(), h.get(), batch, dm, dm);
      ATTN_CUDA_CHECK(cudaGetLastError());
    }
    std::sort(step_ms.begin(), step_ms.end());
    std::printf("%d steps of %d sequences (%s): append_kv + decode median %.4f ms per step\n",
                steps, batch, impl.c_str(), step_ms[step_ms.size() / 2]);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_loop_10: %s\n", e.what());
    return 1;
  }
}
