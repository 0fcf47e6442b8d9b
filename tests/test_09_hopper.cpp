// Grader for module 09 (GPU, Hopper only): attention with wgmma, TMA and warp specialization,
// f16 and bf16. Built twice: grade_09 (exercise), check_09 (solution). Without a GPU it exits
// 77 (skipped); so it does on a GPU that is not compute capability 9.x, and in a build without
// sm_90a code (tests/support.h, require_gpu): skipped, never passed.
//
// The reference and the tolerance are module 07's: the double-precision CPU attention on the
// same 16-bit inputs, relative L2 error within default_tolerance(dtype) (2e-3 for f16, 1e-2
// for bf16). The shapes aim at what is new here: key lengths that make the K/V ring wrap
// around many times (every barrier phase flips), tiles that TMA fills past the end of the
// tensor, query blocks where a consumer warpgroup has no query, more tiles than SMs, and the
// tensors TMA cannot copy (rows not 16-byte aligned), which forward() must refuse in one line.
//
// A kernel whose barrier wait never ends stops waiting by itself: after 10 s the waiting thread
// writes down which barrier it waited on (m09::hang_report() reads it: "module 09: thread 0 of
// block 3 waited more than 10 s on the ..."), every other wait gives up too, and the kernel
// ends with a wrong output; the grader prints the report and the likely causes. A kernel that
// faults instead (an illegal address, a trap a learner added) loses the GPU context: the
// grader names the fault and ends the run after that case.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/cuda_check.h"
#include "common/half.h"
#include "common/random.h"
#include "common/reference.h"
#include "modules/09_hopper/hopper.h"
#include "tests/support.h"

using namespace attn;

namespace {

// ---- The GPU this grader needs --------------------------------------------------------------

std::string needs_hopper(const DeviceInfo& d) {
  if (d.cc_major != 9)
    return "needs a Hopper GPU (compute capability 9.x): module 09 runs wgmma and TMA, which "
           "only sm_90 has; this GPU is " + d.name + " (compute capability " +
           std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ")";
#ifdef ATTN_MODULE_ARCHITECTURES
  const std::string archs = ATTN_MODULE_ARCHITECTURES;
  if (archs.find("90a") == std::string::npos)
    return "needs a build with sm_90a code: module 09 was compiled for CUDA architectures " +
           archs + " only; configure with 90 in the list (-DCMAKE_CUDA_ARCHITECTURES=90, or "
           "leave it unset on this machine) and build again";
#endif
  return "";
}

const bool hopper_required = testing::require_gpu(needs_hopper);

}  // namespace

namespace {

const Kernel& kernel() { return testing::kernel_under_test(9, testing::impl_under_test()); }

const char* kDescriptors = "modules/09_hopper/README.md, section 2 (wgmma descriptors)";
const char* kTma = "modules/09_hopper/README.md, section 3 (TMA and mbarriers)";
const char* kProtocol =
    "modules/09_hopper/README.md, section 4 (the producer/consumer protocol)";
const char* kPitfalls = "modules/09_hopper/README.md, section 6 (pitfalls)";

constexpr DType kDtypes[] = {DType::bf16, DType::f16};
constexpr int kHeadDims[] = {64, 128};

// ---- Models of the classic bugs of this module --------------------------------------------

using testing::matches;  // tests/support.h

// Finite but wrong outputs: which missing piece reproduces them?
const char* kWaitCauses =
    "a wait never ends when: the phase parity is wrong (the parity a wait expects flips each "
    "time the ring comes back to the same slot); the byte count announced with "
    "arrive_expect_bytes differs from the bytes the TMA copies bring (a copy always brings its "
    "whole box, the rows past seq_k as zeros); or an arrive is missing (a consumer warp that "
    "does not release a slot on its empty barrier, a producer that skips a tile). Read section "
    "3 (TMA and mbarriers) and section 4 (the producer/consumer protocol)";

std::vector<std::string> hopper_hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> hints;
  if (const std::string report = m09::hang_report(); !report.empty()) {
    hints.push_back(report);
    hints.push_back(kWaitCauses);
    return hints;
  }
  if (!testing::models_affordable(p)) return hints;
  const bool all_zero =
      std::all_of(r.output.begin(), r.output.end(), [](float x) { return x == 0.0f; });
  if (all_zero) {
    hints.push_back("every output is 0: P V never reached O's accumulators (a wgmma result read "
                    "before wgmma.wait_group let it complete, or a V descriptor that addresses "
                    "an empty stage), or O was stored before the last P V landed: read section "
                    "2 (wgmma descriptors) and section 4 (the producer/consumer protocol)");
    return hints;
  }
  // S = 0 everywhere gives the softmax of zeros, i.e. the plain average of the visible V rows.
  const std::vector<float> zero_q(in.q.size(), 0.0f);
  if (matches(p, r, reference_attention(p, zero_q, in.k, in.v)))
    hints.push_back("the output is the plain average of V: every score was 0, so S = Q K^T read "
                    "zeros (the Q tile used before its TMA copy landed: wait on Q's barrier "
                    "first; or a Q or K descriptor that addresses an empty tile): read section 2 "
                    "(wgmma descriptors) and section 3 (TMA and mbarriers)");
  return hints;
}

bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// The kernel did not run: a fault inside it (the launch failed) or a refusal.
std::vector<std::string> fault_hints(const Problem&, const Status& s) {
  const std::string& m = s.message();
  std::vector<std::string> hints;
  if (has(m, "cudaErrorLaunchFailure")) {
    hints.push_back("the kernel stopped with a fault ('unspecified launch failure'): a trap, or "
                    "copies still in flight when the block exited (every TMA load must be "
                    "waited for before the consumers finish)");
    if (const std::string report = m09::hang_report(); !report.empty()) hints.push_back(report);
    hints.push_back(kWaitCauses);
  } else if (has(m, "cudaErrorIllegalAddress")) {
    hints.push_back(
        "an access outside the tensors: O's stores must skip the rows at or past seq_q, and each "
        "tensor map must describe its own tensor (pointer, sizes, strides); read section 3 (TMA "
        "and mbarriers)");
  } else if (has(m, "cudaErrorMisalignedAddress")) {
    hints.push_back(
        "a misaligned address: the shared-memory tiles that TMA writes and wgmma reads with "
        "the 128-byte swizzle must start on 1024-byte boundaries, the mbarriers on 8-byte ones; "
        "read section 2 (wgmma descriptors) and section 6 (pitfalls)");
  }
  return hints;
}

testing::CheckOptions lesson(const char* section, DType t) {
  testing::CheckOptions o;
  o.lesson = section;
  o.tolerance = default_tolerance(t);
  o.extra_hints = hopper_hints;
  o.error_hints = fault_hints;
  return o;
}

using testing::make_problem;  // Problem::make with the dtype set (tests/support.h)

// Fresh random inputs (rounded to p.dtype by random_inputs), run, compare.
bool check(const Problem& p, const char* section, float range = 1.0f) {
  testing::CheckOptions o = lesson(section, p.dtype);
  o.range = range;
  return testing::check_against_reference(kernel(), p, o);
}

void check_rising(const Problem& p) {
  const double step = std::min(0.05, 24.0 / p.seq_k);
  const Inputs in = testing::rising_inputs(p, testing::next_seed(), step);
  testing::check_inputs_against_reference(kernel(), p, in, lesson(kPitfalls, p.dtype));
}

bool check_packed(const testing::PackedQkv& c, DType t, const char* section) {
  return testing::check_packed_qkv(kernel(), c, t, lesson(section, t));
}

// ---- Tensors TMA cannot copy: forward() must refuse, launching nothing -----------------------

// Q, K, V (`shift` elements into their buffers) and a poisoned O; forward16 must return an
// error of one line that says "aligned", leave O as it was and the GPU without an error.
void expect_alignment_refusal(const char* what, const Problem& p, int64_t q_shift,
                              int64_t k_shift, int64_t v_shift) {
  if (testing::run_stopped()) return;
  INFO(what << ": " << p.describe() << ", Q, K, V " << q_shift << ", " << k_shift << ", "
            << v_shift << " elements into their buffers");
  DeviceBuffer<uint16_t> q(size_t(q_shift + p.q_elements()));
  DeviceBuffer<uint16_t> k(size_t(k_shift + p.kv_elements()));
  DeviceBuffer<uint16_t> v(size_t(v_shift + p.kv_elements()));
  DeviceBuffer<uint16_t> o(size_t(p.o_elements()));
  for (DeviceBuffer<uint16_t>* b : {&q, &k, &v}) ATTN_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
  o.poison();
  REQUIRE(validate(p).is_ok());
  REQUIRE(kernel().supports(p).is_ok());  // the shape is fine: only the addresses are not
  const Status s = kernel().forward16(p, q.get() + q_shift, k.get() + k_shift,
                                      v.get() + v_shift, o.get(), nullptr);
  const cudaError_t err = cudaDeviceSynchronize();
  CHECK_MESSAGE(err == cudaSuccess, "the GPU reports " << cudaGetErrorName(err)
                                        << " after forward(): a kernel ran on tensors TMA "
                                           "cannot copy, and faulted");
  if (err != cudaSuccess) return;
  CHECK_MESSAGE(!s.is_ok(), "forward() accepted tensors whose rows are not 16-byte aligned: TMA "
                            "cannot copy them, so forward() must refuse (read "
                            << kPitfalls << ")");
  if (s.is_ok()) return;
  std::string lower = s.message();
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  CHECK_MESSAGE(lower.find("aligned") != std::string::npos,
                "the refusal should say what is not aligned; it says: " << s.message());
  CHECK_MESSAGE(s.message().find('\n') == std::string::npos,
                "the refusal should be one line; it is: " << s.message());
  const std::vector<uint16_t> out = o.to_host();
  const auto written = std::count_if(out.begin(), out.end(),
                                     [](uint16_t x) { return x != kPoisonBits16; });
  CHECK_MESSAGE(written == 0, written << " elements of O were written although forward() "
                                         "refused: refuse before launching anything");
}

}  // namespace

// ---- Shapes --------------------------------------------------------------------------------

TEST_CASE("one small head, head dims 64 and 128, f16 and bf16") {
  for (DType t : kDtypes)
    for (int d : kHeadDims) check(make_problem(1, 1, 64, 64, d, false, t), kDescriptors);
}

TEST_CASE("sequence lengths 1, 2, 17, 63, 64, 65, 127, 128, 129, 1000, causal and not") {
  for (DType t : kDtypes)
    for (int d : kHeadDims)
      for (bool causal : {false, true})
        for (int n : {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000})
          check(make_problem(1, 2, n, n, d, causal, t), kDescriptors);
}

TEST_CASE("a long sequence: 4097, causal and not") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int d : kHeadDims) check(make_problem(1, 1, 4097, 4097, d, causal, t), kProtocol);
}

TEST_CASE("key lengths 16 to 1121: the K/V ring wraps around and every barrier phase flips") {
  // Each length n and n + 1: whole tiles only, then a last tile that TMA fills past seq_k
  // with zeros (its copy still brings the whole box). With a few ring stages, these lengths
  // take every number of trips around the ring from 0 to 8 and more.
  for (DType t : kDtypes) {
    for (int n = 16; n <= 1120; n += 16)
      for (int sk : {n, n + 1}) check(make_problem(1, 1, 130, sk, 64, false, t), kTma);
    for (int n = 64; n <= 1088; n += 64)
      for (int sk : {n, n + 1}) check(make_problem(1, 1, 130, sk, 128, false, t), kTma);
  }
}

TEST_CASE("seq_q != seq_k, both ways, causal and not") {
  for (DType t : kDtypes)
    for (int d : kHeadDims)
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair{1, 4097}, {4097, 1}, {17, 1000}, {1000, 17}, {64, 65},
                              {65, 64}, {100, 129}, {129, 100}, {128, 384}, {384, 128}})
          check(make_problem(1, 2, sq, sk, d, causal, t), causal ? kPitfalls : kTma);
}

TEST_CASE("causal with seq_q > seq_k: the first seq_q - seq_k rows see no key and are 0") {
  // The mask is bottom-right aligned: query i sees keys j <= i + seq_k - seq_q. A row that
  // sees no key has l = 0: its output must be written, and be 0, not 0/0 (NaN). With 140
  // queries over 100 keys the first query block holds both kinds of rows.
  for (DType t : kDtypes)
    for (int d : kHeadDims)
      for (auto [sq, sk] : {std::pair{1000, 17}, {65, 2}, {4097, 1}, {300, 100}, {140, 100}})
        check(make_problem(2, 2, sq, sk, d, true, t), kPitfalls);
}

TEST_CASE("query blocks with one query, and consumer warpgroups without any") {
  // A block holds 128 queries, 64 per consumer warpgroup. With 65 queries the second
  // warpgroup of the block has one, with 1 or 129 the last block has one query and its
  // second warpgroup none: that warpgroup must still release every stage it is handed, or
  // the producer waits forever.
  for (DType t : kDtypes)
    for (int sq : {1, 65, 129, 193, 257})
      for (bool causal : {false, true})
        for (int d : kHeadDims) check(make_problem(2, 2, sq, 300, d, causal, t), kProtocol);
}

TEST_CASE("several batches and heads in one launch, more query blocks than SMs") {
  for (DType t : kDtypes) {
    check(make_problem(3, 5, 100, 90, 64, false, t), kProtocol);
    check(make_problem(3, 5, 300, 280, 128, true, t), kProtocol);
    check(make_problem(4, 33, 300, 200, 64, true, t), kProtocol);  // 4 * 33 * 3 = 396 query blocks
    check(make_problem(2, 40, 257, 513, 128, false, t), kProtocol);
  }
}

TEST_CASE("the tile scheduler: uneven causal work tiles, launch after launch") {
  // With the causal mask the work tiles differ in length, and a persistent block draws its
  // next one from a counter that every launch must leave at zero for the next. Launches of
  // different grid sizes (fewer work tiles than SMs, then many more) follow one another, each
  // twice; a counter left behind would skip work tiles of the next launch (their rows poisoned).
  for (int round = 0; round < 2; ++round)
    for (DType t : kDtypes) {
      check(make_problem(4, 40, 1000, 1000, 64, true, t), kProtocol);   // 8 query blocks a head
      check(make_problem(1, 1, 100, 100, 64, true, t), kProtocol);      // one work tile
      check(make_problem(2, 12, 3000, 3000, 64, true, t), kProtocol);   // 16 query blocks a head
      check(make_problem(3, 20, 2000, 2000, 128, true, t), kProtocol);  // 16 query blocks a head
      check(make_problem(2, 8, 1500, 1500, 64, false, t), kProtocol);
    }
}

// ---- Numerics ------------------------------------------------------------------------------

TEST_CASE("large logits: scores in the hundreds") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (int d : kHeadDims) {
        check(make_problem(1, 2, 128, 300, d, causal, t), kPitfalls, 30.0f);
        check(make_problem(1, 2, 300, 128, d, causal, t), kPitfalls, 30.0f);
      }
}

TEST_CASE("rising scores: the running max moves at every key tile") {
  for (DType t : kDtypes) {
    for (int n : {129, 1000, 4097}) check_rising(make_problem(1, 2, n, n, 64, false, t));
    check_rising(make_problem(1, 2, 200, 1000, 128, false, t));
    check_rising(make_problem(1, 2, 1000, 1000, 128, true, t));
    check_rising(make_problem(1, 8, 300, 700, 64, false, t, Layout::BSHD, 2));
  }
}

TEST_CASE("a custom softmax scale") {
  for (DType t : kDtypes)
    for (int d : kHeadDims) {
      Problem p = make_problem(1, 2, 50, 260, d, false, t);
      p.scale = 0.37f;
      check(p, kPitfalls);
    }
}

// ---- Layouts and strides -------------------------------------------------------------------

TEST_CASE("BSHD layout (heads interleaved per token), causal and not") {
  for (DType t : kDtypes)
    for (bool causal : {false, true})
      for (auto [sq, sk] : {std::pair{65, 33}, {33, 65}, {200, 200}, {130, 1000}})
        for (int d : kHeadDims) check(make_problem(2, 4, sq, sk, d, causal, t, Layout::BSHD), kTma);
}

TEST_CASE("strided rows that stay 16-byte aligned; padding between O's rows stays untouched") {
  for (DType t : kDtypes)
    for (bool causal : {false, true}) {
      // Rows 72, 80 and 64 + 8 elements apart: 144, 160 and 144 bytes, multiples of 16.
      Problem p = make_problem(2, 3, 37, 141, 64, causal, t);
      p.q = {3 * 37 * 72, 37 * 72, 72};
      p.k = {3 * 141 * 80, 141 * 80, 80};
      p.o = {3 * (37 * 72 + 8), 37 * 72 + 8, 72};  // 8 unused elements after every row
      check(p, kTma);
      Problem q = make_problem(2, 4, 130, 70, 128, causal, t, Layout::BSHD);
      q.o = {130 * 4 * 136, 136, 4 * 136};  // BSHD with 8 elements after every row
      check(q, kTma);
    }
}

TEST_CASE("Q, K, V as views into one packed QKV buffer; O with padded rows") {
  for (DType t : kDtypes) {
    check_packed({2, 4, 4, 77, 64}, t, kTma);
    check_packed({2, 4, 4, 77, 64, true, 0, 0, 8}, t, kTma);
    check_packed({1, 3, 3, 130, 128, true}, t, kTma);
    check_packed({2, 8, 2, 70, 64, false}, t, kTma);  // GQA-packed [B, S, H + 2*KVH, D]
    check_packed({1, 8, 1, 129, 128, true, 0, 0, 8}, t, kTma);
  }
}

// ---- Grouped K/V heads ---------------------------------------------------------------------

TEST_CASE("grouped K/V heads: GQA with 8 query heads over 4 and 2 K/V heads, and MQA") {
  for (DType t : kDtypes) {
    for (int kv : {4, 2, 1})
      for (bool causal : {false, true})
        for (Layout layout : {Layout::BHSD, Layout::BSHD}) {
          check(make_problem(2, 8, 100, 130, 64, causal, t, layout, kv), kTma);
          check(make_problem(1, 8, 130, 65, 128, causal, t, layout, kv), kTma);
        }
    check(make_problem(1, 32, 1, 4097, 128, false, t, Layout::BSHD, 1), kTma);  // MQA decoding
  }
}

// ---- Grid limits ---------------------------------------------------------------------------

TEST_CASE("grid limits: batch*heads = 70000 > 65535") {
  if (testing::skip_grid_limits_under_racecheck()) return;  // 70000 pairs of a few queries
  for (DType t : kDtypes) {
    check(make_problem(7, 10000, 3, 5, 64, true, t), kProtocol);
    check(make_problem(70000, 1, 2, 3, 128, false, t), kProtocol);
  }
}

TEST_CASE("grid limits: more than 65535 query blocks in one head") {
  if (testing::sanitizer_light()) {
    MESSAGE("not run under ATTN_SANITIZER_LIGHT: 8.4M queries are too many for a sanitizer");
    return;
  }
  // 128 * 65535 + 1 queries: more than 65535 blocks of 128 queries (two warpgroups of 64).
  check(make_problem(1, 1, 128 * 65535 + 1, 3, 64, false, DType::bf16), kProtocol);
}

// ---- What the module accepts ---------------------------------------------------------------

TEST_CASE("supports f16/bf16, causal, GQA, head_dim 64 and 128; refuses the rest in one line") {
  for (DType t : kDtypes) {
    for (int d : kHeadDims) {
      CHECK(kernel().supports(make_problem(1, 1, 4, 4, d, false, t)).is_ok());
      CHECK(kernel().supports(make_problem(1, 8, 4, 4, d, true, t, Layout::BSHD, 2)).is_ok());
    }
    for (int d : {32, 96, 256}) {
      const Status s = kernel().supports(make_problem(1, 1, 4, 4, d, false, t));
      INFO("head_dim " << d << ": " << s.message());
      CHECK_FALSE(s.is_ok());
      CHECK(s.message().find("head_dim") != std::string::npos);
      CHECK(s.message().find('\n') == std::string::npos);
    }
  }
  // fp32 runs forward_3xtf32 (the fp32 cases below), with the same head dims.
  CHECK(kernel().supports(make_problem(1, 1, 4, 4, 64, false, DType::f32)).is_ok());
  const Status f32 = kernel().supports(make_problem(1, 1, 4, 4, 96, false, DType::f32));
  CHECK_FALSE(f32.is_ok());
  CHECK(f32.message().find("head_dim") != std::string::npos);
  CHECK(f32.message().find('\n') == std::string::npos);
}

TEST_CASE("rows not 16-byte aligned: forward() refuses in one line and launches nothing") {
  // TMA copies rows whose addresses and strides are multiples of 16 bytes (8 elements), for
  // Q, K and V into shared memory and for O out of it.
  for (DType t : kDtypes) {
    Problem p = make_problem(1, 2, 70, 100, 64, false, t);
    p.k = {2 * 100 * 68, 100 * 68, 68};  // K rows 136 bytes apart: every other row 8 bytes off
    p.v = {2 * 100 * 66, 100 * 66, 66};  // V rows 132 bytes apart
    expect_alignment_refusal("K and V rows", p, 0, 0, 0);

    Problem v_only = make_problem(1, 2, 70, 100, 128, true, t);
    v_only.v = {2 * 100 * 132, 100 * 132, 132};  // V rows 264 bytes apart, Q and K aligned
    expect_alignment_refusal("V rows only", v_only, 0, 0, 0);

    Problem q_rows = make_problem(1, 2, 70, 100, 64, false, t, Layout::BSHD);
    q_rows.q = {70 * 2 * 68, 68, 2 * 68};  // BSHD Q, tokens 272 bytes apart, heads 136 bytes
    expect_alignment_refusal("Q rows (BSHD)", q_rows, 0, 0, 0);

    Problem o_rows = make_problem(1, 2, 70, 100, 64, false, t);
    o_rows.o = {2 * 70 * 68, 70 * 68, 68};  // O rows 136 bytes apart: TMA stores O too
    expect_alignment_refusal("O rows", o_rows, 0, 0, 0);

    Problem heads = make_problem(2, 2, 70, 100, 64, false, t);
    heads.k = {2 * (100 * 64 + 4), 100 * 64 + 4, 64};  // K's second head starts 8 bytes off
    expect_alignment_refusal("K's head stride", heads, 0, 0, 0);

    // Every stride a multiple of 8 elements, a pointer one element (2 bytes) off.
    const Problem aligned = make_problem(1, 2, 70, 100, 64, true, t);
    expect_alignment_refusal("Q's pointer", aligned, 1, 0, 0);
    expect_alignment_refusal("K's pointer", aligned, 0, 1, 0);
    expect_alignment_refusal("V's pointer", aligned, 0, 0, 3);
  }
}

// ---- fp32 as 3xTF32 (README, section 11) ---------------------------------------------------
// forward_3xtf32 is the module's fp32 entry point (Kernel::forward). It must meet the course's
// fp32 tolerance, default_tolerance(f32) = 1e-4, against the double reference on the same fp32
// inputs. Plain TF32 (only the big x big products: the starter's TODO 7 and 8 as given) lands
// near 3e-4 on unit-range inputs and above 1e-3 with larger logits, so it fails these checks.

namespace {

const char* kTf32 = "modules/09_hopper/README.md, section 11 (fp32 as 3xTF32)";

std::vector<std::string> tf32_hints(const Problem& p, const Inputs& in, const CheckResult& r) {
  std::vector<std::string> found = hopper_hints(p, in, r);
  if (!found.empty()) return found;
  const double e = r.comparison.rel_l2_error;
  if (e > kFp32Tolerance && e < 3e-2)
    found.push_back(
        "the error has TF32's size (10 mantissa bits), not fp32's: the products that carry the "
        "small parts are missing or read the wrong plane. Per k step S needs Q big x K small "
        "(a_smem, K small kPlaneBytes after K big) and Q small x K big (a_regs with q_small[kk]) "
        "besides big x big (TODO 7); O needs P small x V big and P big x V small (TODO 8)");
  return found;
}

bool check_f32(const Problem& p, float range = 1.0f) {
  testing::CheckOptions o;
  o.lesson = kTf32;
  o.tolerance = kFp32Tolerance;
  o.range = range;
  o.extra_hints = tf32_hints;
  o.error_hints = fault_hints;
  return testing::check_against_reference(kernel(), p, o);
}

Problem f32(int batch, int heads, int seq_q, int seq_k, int head_dim, bool causal,
            Layout layout = Layout::BHSD, int kv_heads = 0) {
  return make_problem(batch, heads, seq_q, seq_k, head_dim, causal, DType::f32, layout, kv_heads);
}

}  // namespace

TEST_CASE("fp32 (3xTF32): sequence lengths 1, 2, 17, 64, 65, 1000, causal and not") {
  for (int n : {1, 2, 17, 64, 65, 1000})
    for (bool causal : {false, true})
      for (int d : kHeadDims) check_f32(f32(1, 2, n, n, d, causal));
}

TEST_CASE("fp32 (3xTF32): a long sequence, 4097, causal and not") {
  for (bool causal : {false, true})
    for (int d : kHeadDims) check_f32(f32(1, 1, 4097, 4097, d, causal));
}

TEST_CASE("fp32 (3xTF32): more than 2048 keys: K split by the pass instead of the kernel") {
  for (bool causal : {false, true})
    for (int d : kHeadDims) {
      check_f32(f32(1, 2, 65, 4500, d, causal));
      check_f32(f32(2, 4, 200, 5000, d, causal, Layout::BSHD, 2));
    }
}

TEST_CASE("fp32 (3xTF32): seq_q != seq_k both ways; rows that see no key are 0") {
  for (auto [sq, sk] : {std::pair{65, 1000}, {1000, 65}, {1, 300}, {300, 1}, {200, 17}})
    for (bool causal : {false, true})
      for (int d : kHeadDims) check_f32(f32(2, 2, sq, sk, d, causal));
}

TEST_CASE("fp32 (3xTF32): large logits (Q and K entries up to 3 and 4) stay within 1e-4") {
  for (float range : {3.0f, 4.0f})
    for (bool causal : {false, true})
      for (int d : kHeadDims) {
        check_f32(f32(1, 2, 300, 128, d, causal), range);
        check_f32(f32(1, 2, 1000, 1000, d, causal), range);
      }
}

TEST_CASE("fp32 (3xTF32): rising scores: the running max moves at every key tile") {
  for (int d : kHeadDims)
    for (bool causal : {false, true}) {
      const Problem p = f32(1, 2, 300, 1000, d, causal);
      const Inputs in =
          testing::rising_inputs(p, testing::next_seed(), std::min(0.05, 24.0 / p.seq_k));
      testing::CheckOptions o;
      o.lesson = kTf32;
      o.tolerance = kFp32Tolerance;
      o.extra_hints = tf32_hints;
      o.error_hints = fault_hints;
      testing::check_inputs_against_reference(kernel(), p, in, o);
    }
}

TEST_CASE("fp32 (3xTF32): GQA and MQA, BSHD, several batches and heads, more blocks than SMs") {
  for (int kv : {4, 2, 1})
    for (int d : kHeadDims) {
      check_f32(f32(2, 8, 130, 300, d, true, Layout::BHSD, kv));
      check_f32(f32(1, 8, 200, 77, d, false, Layout::BSHD, kv));
    }
  check_f32(f32(3, 5, 100, 90, 64, false));
  check_f32(f32(4, 40, 256, 256, 128, true));  // 160 heads x 2 query blocks
  testing::CheckOptions o;
  o.lesson = kTf32;
  o.tolerance = kFp32Tolerance;
  o.extra_hints = tf32_hints;
  o.error_hints = fault_hints;
  testing::check_packed_qkv(kernel(), {2, 4, 4, 77, 64}, DType::f32, o);
  testing::check_packed_qkv(kernel(), {1, 8, 2, 130, 128, true, 4, 4, 4}, DType::f32, o);
}

TEST_CASE("fp32 (3xTF32): grid limits: batch*heads = 70000 > 65535 (the split pass too)") {
  check_f32(f32(2, 35000, 3, 5, 64, false));
  check_f32(f32(1, 70000, 2, 9, 128, true));
}

TEST_CASE("fp32 (3xTF32): rows not 16-byte aligned are refused in one line, nothing launched") {
  Problem p = f32(1, 2, 70, 100, 64, false);
  p.k = {2 * 100 * 66, 100 * 66, 66};  // K rows 264 bytes apart: every other row 8 bytes off
  DeviceBuffer<float> q(size_t(p.q_elements())), k(size_t(p.kv_elements())),
      v(size_t(p.kv_elements())), o(size_t(p.o_elements()));
  for (DeviceBuffer<float>* b : {&q, &k, &v}) ATTN_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
  ATTN_CUDA_CHECK(cudaMemset(o.get(), 0xFF, o.bytes()));
  REQUIRE(validate(p).is_ok());
  const Status s = kernel().forward(p, q.get(), k.get(), v.get(), o.get(), nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("aligned") != std::string::npos);
  CHECK(s.message().find('\n') == std::string::npos);
  const std::vector<float> out = o.to_host();
  CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
}
