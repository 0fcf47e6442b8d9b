// bench_10: module 10 measured. Decoding is memory-bound, so every decode row is reported in
// GB/s beside the GPU's HBM read bandwidth measured by this program in the same run (a
// kernel that only reads, 4 GiB). Rows:
//   decode                the solution (split plan from choose_splits), pages of --page-size
//                         tokens shuffled through the pool
//   decode_splits(_chosen) the same kernel with 1 ... 64 splits (the heuristic's choice
//                         marked): the time-versus-splits curve of README section 2
//   decode_one_split      one block per (sequence, K/V head)
//   decode_mha_cache      GQA not exploited: the same queries over a cache with one K/V head
//                         per query head (group times the bytes)
//   decode_head_major     the same bytes with each head's page rows contiguous
//   decode_pageN_*        page sizes 16, 64, 256, pages in order or shuffled
//   decode_stages2/4, decode_wW_sS  the ring depth and the warps per block
//   decode_varlen(_splits) batches of random lengths: the plan's choice, then other split
//                         counts
//   prefill_varlen_*      packed prefill (module 07's kernel over cu_seqlens) beside module 07
//                         (module07_dense_1024) on a dense batch with the same tokens
// Every kernel is first checked against the double reference on small shapes. Before every
// timed run a 256 MiB read evicts the 50 MiB L2, so no run reads K/V that the previous one
// left there (scripts/compare_torch_decode.py does the same for PyTorch).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "common/bench_json.h"
#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "common/registry.h"
#include "common/timing.h"
#include "bench/10_decoding/device_fill.cuh"
#include "solutions/10_decoding/decode_steps.cuh"

using namespace attn;

namespace {

void fill(DeviceBuffer<uint16_t>& b, uint32_t seed, DType t) {
  bench10::fill_random(b.get(), int64_t(b.size()), seed, t);
}

// ---- The HBM read ceiling --------------------------------------------------------------------

// Four independent 16-byte loads per thread per step: enough bytes in flight per SM to cover
// the DRAM latency.
__global__ void read_kernel(const uint4* __restrict__ x, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= x[i].x;
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; almost never stores
}

// Evicts the L2 before a timed run by reading 256 MiB (reading, not writing: a memset would
// leave dirty lines whose write-back then competes with the timed kernel).
struct Flusher {
  DeviceBuffer<uint4> buf{(size_t(256) << 20) / sizeof(uint4)};
  DeviceBuffer<uint32_t> sink{1};
  Flusher() { ATTN_CUDA_CHECK(cudaMemset(buf.get(), 0, buf.bytes())); }
  void operator()(cudaStream_t s) {
    read_kernel<<<1024, 512, 0, s>>>(buf.get(), int64_t(buf.size()), sink.get());
  }
};

double median_ms(Flusher& flush, const std::function<void(cudaStream_t)>& run, int warmup,
                 int iters) {
  cudaStream_t s = nullptr;
  for (int i = 0; i < warmup; ++i) flush(s), run(s);
  std::vector<cudaEvent_t> ev(2 * size_t(iters));
  for (auto& e : ev) ATTN_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    flush(s);
    ATTN_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    run(s);
    ATTN_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return summarize_times(ms).median_ms;
}

double measure_hbm_read(Flusher& flush, int iters) {
  const size_t bytes = size_t(4) << 30;
  DeviceBuffer<uint4> x(bytes / sizeof(uint4));
  DeviceBuffer<uint32_t> sink(1);
  ATTN_CUDA_CHECK(cudaMemset(x.get(), 1, bytes));
  const DeviceInfo dev = query_device(0);
  const double ms = median_ms(flush, [&](cudaStream_t s) {
    read_kernel<<<dev.sm_count * 8, 512, 0, s>>>(x.get(), int64_t(x.size()), sink.get());
  }, 2, iters);
  return double(bytes) / (ms * 1e-3) / 1e9;
}

// ---- Decode on device-filled inputs ------------------------------------------------------------

// The K and V caches of every shape live in one arena allocated once (the largest shape's
// size): fresh multi-GB allocations after freeing others measured up to 18% apart for the
// same kernel on the same shape, an effect of where the driver places them, not of the kernel.
struct Arena {
  DeviceBuffer<uint16_t> k, v;
  explicit Arena(int64_t elements) : k(size_t(elements)), v(size_t(elements)) {}
};

struct DecodeBuffers {
  DeviceBuffer<uint16_t> q, o;
  uint16_t* k;
  uint16_t* v;
  DeviceBuffer<int32_t> table, lens;
  DeviceBuffer<unsigned char> work;
  PagedDevicePtrs ptrs;
  DecodeBuffers(Arena& arena, const PagedProblem& p, size_t work_bytes, uint64_t seed,
                bool shuffle)
      : q(size_t(p.q_elements())), o(size_t(p.q_elements())), k(arena.k.get()),
        v(arena.v.get()), table(make_block_table(p, shuffle, seed)),
        lens(std::vector<int32_t>(p.seqlens_k.begin(), p.seqlens_k.end())), work(work_bytes) {
    if (p.cache_elements() > int64_t(arena.k.size()))
      throw std::runtime_error("bench_10: the arena is smaller than the cache of " + p.describe());
    fill(q, uint32_t(seed), p.dtype);
    bench10::fill_random(k, p.cache_elements(), uint32_t(seed) + 1, p.dtype);
    bench10::fill_random(v, p.cache_elements(), uint32_t(seed) + 2, p.dtype);
    ptrs.q = q.get(), ptrs.k_cache = k, ptrs.v_cache = v;
    ptrs.block_table = table.get(), ptrs.seqlens_k = lens.get(), ptrs.o = o.get();
    ptrs.workspace = work.get(), ptrs.workspace_bytes = work.size();
  }
};

using Steps = m10::ladder::DecodeSteps;

template <class A, class B>
struct Configs {
  using C64 = A;
  using C128 = B;
};
using Production = Configs<m10::Decode64, m10::Decode128>;
using TwoStages = Configs<m10::DecodeConfig<64, 4>, m10::DecodeConfig<128, 2>>;
using FourStages = Configs<m10::DecodeConfig<64, 8>, m10::DecodeConfig<128, 4>>;
using W2S3 = Configs<m10::DecodeConfig<64, 6, 2>, m10::DecodeConfig<128, 3, 2>>;
using W1S6 = Configs<m10::DecodeConfig<64, 12, 1>, m10::DecodeConfig<128, 6, 1>>;
using W8S2 = Configs<m10::DecodeConfig<64, 3, 8>, m10::DecodeConfig<128, 2, 8>>;

struct Options {
  bool quick = false, check_variants = false;
  int iters = 20, warmup = 3, page_size = 16;
  std::string out = "bench10.json";
};

// A variant's entry point, so that the harness checks it like the registered solution.
template <class Cs>
m10::SplitPlan variant_plan(const PagedProblem& p) {
  return m10::choose_splits(p, m10::sm_count(), Cs::C128::kBlocksPerSm);
}
template <class Cs>
size_t variant_workspace(const PagedProblem& p) {
  return m10::workspace_bytes(p, variant_plan<Cs>(p));
}
template <class Cs>
Status variant_decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t s) {
  return m10::decode_with<Steps, typename Cs::C64, typename Cs::C128>(p, t, s, variant_plan<Cs>(p));
}
template <class Cs>
Kernel variant_kernel(const Kernel& solution) {
  static InferenceEntry entry;
  entry = *solution.inference;
  entry.decode_workspace_bytes = variant_workspace<Cs>;
  entry.decode = variant_decode<Cs>;
  Kernel k = solution;
  k.inference = &entry;
  return k;
}

std::string check_row(const PagedProblem& small, const Kernel& kern, double* err) {
  const InferenceCheck r = check_decode(kern, small, random_paged_inputs(small, 11, true));
  *err = r.status ? r.comparison.rel_l2_error : -1;
  if (!r.passed()) return "FAILED " + (r.status ? r.comparison.summary() : r.status.message());
  return "ok";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_10: module 10 (decoding, paged KV cache, packed prefill) measured"};
  Options opt;
  app.add_flag("--quick", opt.quick, "fewer shapes");
  app.add_flag("--check-variants", opt.check_variants,
               "only check every variant configuration against the reference, then exit");
  app.add_option("--iters", opt.iters, "timed runs per shape");
  app.add_option("--page-size", opt.page_size, "tokens per page (power of two)");
  app.add_option("--out", opt.out, "JSON file to write");
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_10: %s\n", no_device_reason().c_str());
    return 1;
  }
  try {
    const DeviceInfo dev = query_device(0);
    const Kernel* m10 = find_kernel(10, Impl::solution);
    const Kernel* m07 = find_kernel(7, Impl::solution);
    if (!m10 || !m10->inference || !m07) {
      std::fprintf(stderr, "bench_10: modules 07 and 10 must be linked\n");
      return 1;
    }
    Flusher flush;
    // The largest cache of the sweep: 32 x 131072 tokens x 8 K/V heads x 128 (as large as
    // 32 x 32768 tokens x 32 K/V heads, the cache without GQA): 8.6 GB each for K and V.
    Arena arena(int64_t(32) * 131072 * 8 * 128);
    const double hbm = measure_hbm_read(flush, opt.iters);
    std::printf("%s: HBM read %.0f GB/s (measured), %.0f GB/s (spec sheet)\n", dev.name.c_str(),
                hbm, dev.peak_bandwidth_gbs);

    // Checks first: the kernel every row times, on shapes with the same paths.
    std::vector<json::Object> checks;
    for (auto [lens, seq_q, causal] :
         {std::tuple{std::vector<int>{0, 1, 17, 1000, 20000}, 1, false},
          std::tuple{std::vector<int>{5, 3000}, 4, true}}) {
      const PagedProblem small =
          PagedProblem::make(32, 8, 128, seq_q, lens, opt.page_size, causal, DType::bf16);
      double err = 0;
      const std::string status = check_row(small, *m10, &err);
      std::printf("check %s: %s (rel L2 %.2e)\n", small.describe().c_str(), status.c_str(), err);
      checks.push_back(json::Object().add("shape", small.describe()).add("status", status)
                           .add("rel_l2", err));
      if (status != "ok") return 1;
    }

    std::vector<json::Object> rows;
    std::printf("\n%-18s %5s %4s %4s %7s %6s %9s %8s %6s\n", "kernel", "batch", "H", "KVH",
                "seq_k", "splits", "ms", "GB/s", "of HBM");
    auto report = [&](const char* name, const PagedProblem& p, const m10::SplitPlan& plan,
                      double ms, bool shuffled) {
      const double gbs = paged_bytes(p) / (ms * 1e-3) / 1e9;
      std::printf("%-18s %5d %4d %4d %7d %6d %9.4f %8.0f %5.0f%%\n", name, p.batch, p.heads,
                  p.kv_heads, p.max_seqlen_k(), plan.splits, ms, gbs, 100 * gbs / hbm);
      rows.push_back(json::Object().add("kernel", name).add("batch", p.batch)
                         .add("heads", p.heads).add("kv_heads", p.kv_heads)
                         .add("head_dim", p.head_dim).add("seq_q", p.seq_q)
                         .add("seq_k", p.max_seqlen_k()).add("page_size", p.page_size)
                         .add("pages_shuffled", shuffled)
                         .add("dtype", dtype_name(p.dtype)).add("splits", plan.splits)
                         .add("keys_per_split", plan.keys_per_split).add("median_ms", ms)
                         .add("bytes", paged_bytes(p)).add("gbs", gbs)
                         .add("fraction_of_hbm_read", gbs / hbm));
    };
    // Times decode with a plan and the configurations C64, C128 (default: production).
    auto time_decode = [&](const char* name, const PagedProblem& p, const m10::SplitPlan& plan,
                           auto configs, bool shuffle = true) {
      using Configs = decltype(configs);
      DecodeBuffers buf(arena, p, m10::workspace_bytes(p, plan), 5, shuffle);
      const double ms = median_ms(flush, [&](cudaStream_t s) {
        const Status st = m10::decode_with<Steps, typename Configs::C64, typename Configs::C128>(
            p, buf.ptrs, s, plan);
        if (!st) throw std::runtime_error(st.message());
      }, opt.warmup, opt.iters);
      report(name, p, plan, ms, shuffle);
    };

    // A variant configuration against the reference before it is timed: both head dims,
    // causal with several tokens, lengths 0 to 20000 (the solution's checks, harder).
    auto check_variant = [&](const char* name, auto configs) {
      const Kernel variant = variant_kernel<decltype(configs)>(*m10);
      for (int d : {64, 128}) {
        const PagedProblem small = PagedProblem::make(32, 8, d, 3, {0, 1, 17, 1000, 20000},
                                                      opt.page_size, true, DType::bf16);
        double err = 0;
        const std::string status = check_row(small, variant, &err);
        std::printf("check %-16s D=%3d: %s (rel L2 %.2e)\n", name, d, status.c_str(), err);
        if (status != "ok") return false;
      }
      return true;
    };
    if (opt.check_variants) {
      const bool ok = check_variant("decode_stages2", TwoStages{}) &&
                      check_variant("decode_stages4", FourStages{}) &&
                      check_variant("decode_w2_s3", W2S3{}) &&
                      check_variant("decode_w1_s6", W1S6{}) &&
                      check_variant("decode_w8_s2", W8S2{});
      return ok ? 0 : 1;
    }

    // Warps per block (16 keys each per tile) and ring stages: how many blocks share an SM.
    auto warps_sweep = [&](const PagedProblem& p) {
      auto one = [&](const char* name, auto configs) {
        if (check_variant(name, configs)) time_decode(name, p, variant_plan<decltype(configs)>(p), configs);
      };
      if (opt.quick) return;
      one("decode_w2_s3", W2S3{});
      one("decode_w1_s6", W1S6{});
      one("decode_w8_s2", W8S2{});
    };

    // The decode shapes of the lesson: 32 query heads over 8 K/V heads, d = 128, one token.
    std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
    std::vector<int> batches = {1, 4, 16, 32, 64, 128};
    if (opt.quick) seqs = {4096, 32768}, batches = {1, 32};
    for (int n : seqs) {
      const PagedProblem p = PagedProblem::make(32, 8, 128, 1, std::vector<int>(32, n),
                                                opt.page_size, false, DType::bf16);
      time_decode("decode", p, m10::choose_splits(p, dev.sm_count), Production{});
    }
    for (int b : batches)
      for (int n : {4096, 32768}) {
        if (int64_t(b) * n > int64_t(32) * 131072) continue;  // 17 GB of cache at most
        const PagedProblem p = PagedProblem::make(32, 8, 128, 1, std::vector<int>(b, n),
                                                  opt.page_size, false, DType::bf16);
        time_decode("decode", p, m10::choose_splits(p, dev.sm_count), Production{});
      }
    for (int n : {4096, 32768}) {
      const PagedProblem p = PagedProblem::make(32, 8, 128, 1, std::vector<int>(32, n),
                                                opt.page_size, false, DType::bf16);
      time_decode("decode_one_split", p, m10::plan_with_splits(p, 1), Production{});
      const PagedProblem mha = PagedProblem::make(32, 32, 128, 1, std::vector<int>(32, n),
                                                  opt.page_size, false, DType::bf16);
      time_decode("decode_mha_cache", mha, m10::choose_splits(mha, dev.sm_count), Production{});
    }
    // Time against the number of splits, the heuristic's choice among them (README section 2).
    for (auto [b, n] : {std::pair{32, 4096}, {32, 32768}, {1, 32768}, {4, 32768}, {16, 4096},
                        {128, 4096}}) {
      if (opt.quick && b != 32) continue;
      const PagedProblem p = PagedProblem::make(32, 8, 128, 1, std::vector<int>(b, n),
                                                opt.page_size, false, DType::bf16);
      const m10::SplitPlan chosen = m10::choose_splits(p, dev.sm_count);
      for (int s : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
        const m10::SplitPlan plan = m10::plan_with_splits(p, s);
        if (plan.splits != s) continue;
        time_decode(s == chosen.splits ? "decode_splits_chosen" : "decode_splits", p, plan,
                    Production{});
      }
    }
    // The ring depth, the grid order, the page size and order, and the same row again on
    // fresh buffers (how much two measurements of one kernel differ).
    for (int n : {4096, 32768}) {
      const PagedProblem p = PagedProblem::make(32, 8, 128, 1, std::vector<int>(32, n),
                                                opt.page_size, false, DType::bf16);
      const m10::SplitPlan plan = m10::choose_splits(p, dev.sm_count);
      if (check_variant("decode_stages2", TwoStages{}))
        time_decode("decode_stages2", p, plan, TwoStages{});
      if (check_variant("decode_stages4", FourStages{}))
        time_decode("decode_stages4", p, plan, FourStages{});
      warps_sweep(p);
      if (n == 4096) {  // and the small batches, where per-block costs weigh most
        for (int b : {1, 16}) {
          const PagedProblem small = PagedProblem::make(32, 8, 128, 1, std::vector<int>(b, n * (b == 1 ? 8 : 1)),
                                                        opt.page_size, false, DType::bf16);
          time_decode("decode", small, m10::choose_splits(small, dev.sm_count), Production{});
          warps_sweep(small);
        }
      }
      // The same bytes with each K/V head's page rows contiguous (a head-major page layout):
      // one sequence per (sequence, K/V head), one K/V head of `group` query heads.
      const PagedProblem hm = PagedProblem::make(4, 1, 128, 1, std::vector<int>(32 * 8, n),
                                                 opt.page_size, false, DType::bf16);
      time_decode("decode_head_major", hm, m10::choose_splits(hm, dev.sm_count), Production{});
      for (int r = 0; r < 3; ++r) time_decode("decode_repeat", p, plan, Production{});
      for (int page : {16, 64, 256})
        for (bool shuffle : {false, true}) {
          const PagedProblem q = PagedProblem::make(32, 8, 128, 1, std::vector<int>(32, n), page,
                                                    false, DType::bf16);
          const std::string name = std::string("decode_page") + std::to_string(page) +
                                   (shuffle ? "_shuffled" : "_in_order");
          time_decode(name.c_str(), q, m10::choose_splits(q, dev.sm_count), Production{},
                      shuffle);
        }
    }
    // Variable lengths: 32 sequences of random lengths up to 32768 (and 8 up to 131072, 128
    // up to 4096), the plan's choice, then the same batch against the split count (the plan
    // counts only the blocks that get keys: README section 2).
    for (auto [b, n] : {std::pair{32, 32768}, {8, 131072}, {128, 4096}}) {
      if (opt.quick && b != 32) continue;
      const PagedProblem p = PagedProblem::make(32, 8, 128, 1, random_seqlens(b, n, 3),
                                                opt.page_size, false, DType::bf16);
      const m10::SplitPlan chosen = m10::choose_splits(p, dev.sm_count);
      time_decode("decode_varlen", p, chosen, Production{});
      for (int s : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
        const m10::SplitPlan plan = m10::plan_with_splits(p, s);
        if (plan.splits != s || s == chosen.splits) continue;
        time_decode("decode_varlen_splits", p, plan, Production{});
      }
    }

    // Packed prefill beside module 07 on the same tokens.
    std::vector<json::Object> prefill_rows;
    std::printf("\n%-22s %6s %4s %4s %7s %9s %8s\n", "kernel", "seqs", "H", "D", "causal", "ms",
                "TFLOP/s");
    for (auto [heads, d] : {std::pair{32, 64}, {16, 128}})
      for (bool causal : {false, true})
        for (bool random_lengths : {false, true}) {
          std::vector<int> lens(16, 1024);
          if (random_lengths) {
            std::mt19937 gen(9);
            int total = 0;
            lens.clear();
            while (total < 16384) {
              const int n = std::min(16384 - total, int(gen() % 2047) + 1);
              lens.push_back(n), total += n;
            }
          }
          const VarlenProblem vp = VarlenProblem::make(heads, heads, d, lens, lens, causal);
          const int64_t tq = vp.total_q();
          DeviceBuffer<uint16_t> q(size_t(tq * heads * d)), k(size_t(tq * heads * d)),
              v(size_t(tq * heads * d)), o(size_t(tq * heads * d));
          fill(q, 1, vp.dtype), fill(k, 2, vp.dtype), fill(v, 3, vp.dtype);
          DeviceBuffer<int32_t> cu_q(vp.cu_seqlens_q()), cu_k(vp.cu_seqlens_k());
          const double ms_var = median_ms(flush, [&](cudaStream_t s) {
            const Status st = m10->inference->prefill(vp, q.get(), k.get(), v.get(), cu_q.get(),
                                                      cu_k.get(), o.get(), s);
            if (!st) throw std::runtime_error(st.message());
          }, opt.warmup, opt.iters);
          const double tf_var = varlen_flops(vp) / (ms_var * 1e-3) / 1e12;
          std::printf("%-22s %6d %4d %4d %7s %9.4f %8.1f\n",
                      random_lengths ? "prefill_varlen_random" : "prefill_varlen_1024",
                      vp.batch(), heads, d, causal ? "yes" : "no", ms_var, tf_var);
          prefill_rows.push_back(json::Object().add("kernel", random_lengths ? "prefill_varlen_random" : "prefill_varlen_1024")
                                     .add("sequences", vp.batch()).add("total_tokens", tq)
                                     .add("heads", heads).add("head_dim", d).add("causal", causal)
                                     .add("median_ms", ms_var).add("flops", varlen_flops(vp))
                                     .add("tflops", tf_var));
          if (random_lengths) continue;
          // Module 07 on the dense batch of the same 16 x 1024 tokens.
          Problem dp = Problem::make(16, heads, 1024, 1024, d, causal, Layout::BSHD);
          dp.dtype = vp.dtype;
          const double ms_07 = median_ms(flush, [&](cudaStream_t s) {
            const Status st = m07->forward16(dp, q.get(), k.get(), v.get(), o.get(), s);
            if (!st) throw std::runtime_error(st.message());
          }, opt.warmup, opt.iters);
          const double tf_07 = attention_flops(dp) / (ms_07 * 1e-3) / 1e12;
          std::printf("%-22s %6d %4d %4d %7s %9.4f %8.1f   (varlen / dense time %.3f)\n",
                      "module07_dense_1024", 16, heads, d, causal ? "yes" : "no", ms_07, tf_07,
                      ms_var / ms_07);
          prefill_rows.push_back(json::Object().add("kernel", "module07_dense_1024")
                                     .add("sequences", 16).add("total_tokens", tq)
                                     .add("heads", heads).add("head_dim", d).add("causal", causal)
                                     .add("median_ms", ms_07).add("flops", attention_flops(dp))
                                     .add("tflops", tf_07).add("varlen_over_dense_time", ms_var / ms_07));
        }

    json::Document doc("attn-decode-bench/1");
    doc.field("device", json::device(dev).add("measured_hbm_read_gbs", hbm));
    doc.field("created", "\"" + json::utc_now() + "\"");
    doc.field("timing", "\"median of event-timed runs after warm-up, L2 evicted before each\"");
    doc.list("checks", checks).list("decode", rows).list("prefill", prefill_rows);
    if (Status s = doc.write(opt.out); !s) {
      std::fprintf(stderr, "bench_10: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", opt.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_10: %s\n", e.what());
    return 1;
  }
  return 0;
}
