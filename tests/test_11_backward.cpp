// Grader for module 11 (GPU): the forward with its log-sum-exp and the backward, dQ, dK, dV.
// Built twice: grade_11 (exercise), check_11 (solution). Without a GPU it exits 77 (skipped).
//
// Every case runs the module's forward (O and lse) and backward on poisoned buffers and
// compares O, lse, dQ, dK and dV with the double reference of common/backward.h on the same
// rounded inputs, each gradient by its relative L2 error: backward_tolerance(dtype), 1e-4 for
// f32, 1e-2 for f16, 4e-2 for bf16 (common/backward_runner.h says why).
// f32 problems run the readable kernels (your dkdv_for_key and dq_for_query), f16/bf16 the
// tensor-core kernels (your probability and score_gradient inside the given pipelines): the
// mma.sync kernel and, on a Hopper GPU, the wgmma kernel, each on every case.
// The shapes are the odd ones of the earlier modules: 1, 17, 65, 1000, 4097 and seq_q !=
// seq_k, head dims 59, 80 and 96, grouped K/V heads, BSHD strides, large logits, rows that see
// no key (zero gradients, never NaN) and more than 65535 batch x heads.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/backward_runner.h"
#include "modules/11_backward/backward_attention.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(11, testing::impl_under_test()); }

// The module's entry runs the kernel fastest for the shape (entry_points.cuh, fastest_path);
// the tensor-core cases run on each kernel this GPU can run, through backward_on: the mma.sync
// kernel everywhere, the wgmma kernel on a Hopper GPU built with sm_90a code.
template <m11::Path kPath>
Status backward_on(const Problem& p, const void* q, const void* k, const void* v, const void* o,
                   const void* dout, const float* lse, void* dq, void* dk, void* dv,
                   cudaStream_t stream) {
  return m11::ATTN_IMPL::backward_on(kPath, p, q, k, v, o, dout, lse, dq, dk, dv, stream);
}
const BackwardEntry mma_sync_entry{m11::ATTN_IMPL::forward_lse,
                                   backward_on<m11::Path::tensor_cores>};
const BackwardEntry wgmma_entry{m11::ATTN_IMPL::forward_lse, backward_on<m11::Path::hopper>};
const std::vector<std::pair<const char*, const Kernel*>>& tensor_core_kernels() {
  static const std::vector<std::pair<const char*, const Kernel*>> kernels = [] {
    static Kernel mma_sync = kernel(), wgmma = kernel();
    mma_sync.backward = &mma_sync_entry;
    wgmma.backward = &wgmma_entry;
    std::vector<std::pair<const char*, const Kernel*>> k = {{"mma.sync kernel", &mma_sync}};
    if (m11::ATTN_IMPL::hopper_kernel_available()) k.push_back({"wgmma kernel", &wgmma});
    return k;
  }();
  return kernels;
}

const char* kMath = "modules/11_backward/README.md, section 1 (the math)";
const char* kRows = "modules/11_backward/README.md, section 2 (the readable kernels)";
const char* kTensorCores = "modules/11_backward/README.md, section 3 (FlashAttention-2 backward)";

Problem problem(int batch, int heads, int seq_q, int seq_k, int d, bool causal, DType t,
                Layout layout = Layout::BHSD, int kv_heads = 0) {
  Problem p = Problem::make(batch, heads, seq_q, seq_k, d, causal, layout, kv_heads);
  p.dtype = t;
  return p;
}

// Fresh inputs, forward + backward, every result compared; on failure the harness's hints.
bool check(const Problem& p, const char* lesson, float range = 1.0f,
           const Kernel& kern = kernel(), const char* which = "") {
  if (testing::run_stopped()) return false;
  // Backward: 2.5x the forward's 4 B H Sq Sk d.
  const double flops = 14.0 * double(p.batch) * p.heads * p.seq_q * p.seq_k * p.head_dim;
  if (testing::sanitizer_light() && flops > testing::kSanitizerMaxFlops) {
    MESSAGE("skipped under the sanitizer (large): " << p.describe());
    return true;
  }
  const uint64_t seed = testing::next_seed();
  INFO(p.describe() << ", seed " << seed << " " << std::string(which));
  const BackwardInputs in = random_backward_inputs(p, seed, range);
  const BackwardCheck r = check_backward(kern, p, in);
  if (r.passed()) return true;
  if (!r.status) {
    FAIL_CHECK("forward or backward failed: " << r.status.message() << "\n  read " << std::string(lesson));
    return false;
  }
  std::string hints;
  for (const std::string& h : diagnose_backward(p, in, r)) hints += "\n  - " + h;
  FAIL_CHECK("wrong result:\n    O  " << r.o.summary() << "\n    dQ " << r.dq.summary()
                                     << "\n    dK " << r.dk.summary() << "\n    dV "
                                     << r.dv.summary() << "\n    lse: " << r.lse_bad
                                     << " rows off" << hints << "\n  read " << std::string(lesson));
  return false;
}

}  // namespace

TEST_CASE("fp32: the readable kernels, odd shapes") {
  const DType t = DType::f32;
  CHECK(check(problem(1, 1, 1, 1, 16, false, t), kRows));
  CHECK(check(problem(1, 2, 17, 17, 64, false, t), kRows));
  CHECK(check(problem(2, 3, 65, 33, 80, false, t), kRows));
  CHECK(check(problem(1, 2, 33, 65, 59, false, t, Layout::BSHD), kRows));
  CHECK(check(problem(1, 2, 200, 1000, 128, false, t), kRows));
}

TEST_CASE("fp32: causal, rows that see no key, grouped heads, large logits") {
  const DType t = DType::f32;
  CHECK(check(problem(1, 2, 65, 65, 64, true, t), kRows));
  CHECK(check(problem(2, 2, 100, 17, 96, true, t), kRows));  // 83 rows see no key
  CHECK(check(problem(1, 8, 65, 130, 64, true, t, Layout::BSHD, 2), kRows));
  CHECK(check(problem(1, 4, 50, 50, 32, false, t, Layout::BHSD, 1), kRows));  // MQA
  CHECK(check(problem(1, 2, 64, 64, 64, true, t), kMath, 4.0f));
}

TEST_CASE("tensor cores: odd shapes in f16 and bf16") {
  for (const auto& [which, kern] : tensor_core_kernels())
    for (DType t : {DType::bf16, DType::f16}) {
      auto ok = [&, kern = kern, which = which](const Problem& p) {
        return check(p, kTensorCores, 1.0f, *kern, which);
      };
      CHECK(ok(problem(1, 1, 1, 1, 64, false, t)));
      CHECK(ok(problem(1, 2, 17, 65, 64, false, t)));
      CHECK(ok(problem(2, 3, 65, 17, 128, false, t)));
      CHECK(ok(problem(1, 2, 1000, 1000, 80, false, t, Layout::BSHD)));
      CHECK(ok(problem(1, 2, 129, 200, 59, false, t)));  // no 16-byte rows
    }
}

TEST_CASE("tensor cores: causal, rows that see no key, grouped heads") {
  for (const auto& [which, kern] : tensor_core_kernels())
    for (DType t : {DType::bf16, DType::f16}) {
      auto ok = [&, kern = kern, which = which](const Problem& p) {
        return check(p, kTensorCores, 1.0f, *kern, which);
      };
      CHECK(ok(problem(1, 2, 1000, 1000, 128, true, t)));
      CHECK(ok(problem(2, 2, 300, 65, 64, true, t)));  // 235 rows see no key
      CHECK(ok(problem(1, 8, 65, 4097, 96, true, t, Layout::BSHD, 2)));
      CHECK(ok(problem(2, 4, 333, 333, 128, false, t, Layout::BHSD, 1)));  // MQA
      // More key blocks than SMs, of unequal work (the causal grid's groups of heads, with
      // seq_k > seq_q and grouped heads).
      CHECK(ok(problem(2, 24, 129, 257, 128, true, t)));
      CHECK(ok(problem(3, 24, 200, 257, 64, true, t, Layout::BSHD, 8)));
    }
}

TEST_CASE("tensor cores: long sequences and large logits") {
  for (const auto& [which, kern] : tensor_core_kernels()) {
    CHECK(check(problem(1, 2, 4097, 4097, 128, true, DType::bf16), kTensorCores, 1.0f, *kern, which));
    CHECK(check(problem(1, 2, 1000, 1000, 64, false, DType::f16), kMath, 3.0f, *kern, which));
    CHECK(check(problem(1, 2, 1000, 1000, 128, true, DType::bf16), kMath, 3.0f, *kern, which));
  }
}

TEST_CASE("the module's entry point: the kernel it picks for the shape") {
  CHECK(check(problem(1, 2, 4096, 4096, 128, false, DType::bf16), kTensorCores));
  CHECK(check(problem(2, 2, 333, 1000, 64, true, DType::f16, Layout::BSHD), kTensorCores));
}

TEST_CASE("more than 65535 batch x heads: one flat grid") {
  if (testing::skip_grid_limits_under_racecheck()) return;
  for (const auto& [which, kern] : tensor_core_kernels())
    CHECK(check(problem(2, 33000, 1, 3, 16, false, DType::bf16), kTensorCores, 1.0f, *kern, which));
  CHECK(check(problem(3, 22000, 2, 1, 8, true, DType::f32), kRows));
}

TEST_CASE("shapes the module does not take get one clear line") {
  const Problem p = problem(1, 1, 16, 16, 160, false, DType::bf16);
  const Status s = m11::supports(p);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("head_dim") != std::string::npos);
}
