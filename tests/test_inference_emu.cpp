// The inference runner (common/paged_runner.h) and `attn run` on an inference module, end to
// end on the CPU emulation of the CUDA runtime (no GPU): uploads, poisoned outputs, the guard
// after O, downloads in 16 bits, the comparison, --verify / --out. Module 10's kernels are GPU
// only, so stand-ins written in host code play its entry points: one that computes the answer
// from the device buffers it is given (the harness's plumbing must make that pass), and
// planted bugs the checks must catch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/half.h"
#include "common/npy.h"
#include "common/paged.h"
#include "common/paged_runner.h"
#include "common/registry.h"
#include "tests/cli_checks.h"
#include "tests/emulated_device_io.h"

using namespace attn;
using testing::CliResult;
using testing::attn_cli;
using testing::download;
using testing::upload_output;

namespace {

// What the decode entry point was given, read back from the device.
PagedInputs read_back(const PagedProblem& p, const PagedDevicePtrs& t) {
  PagedInputs in;
  in.q = from_bits16(download<uint16_t>(t.q, p.q_elements()), p.dtype);
  in.k_cache = from_bits16(download<uint16_t>(t.k_cache, p.cache_elements()), p.dtype);
  in.v_cache = from_bits16(download<uint16_t>(t.v_cache, p.cache_elements()), p.dtype);
  in.block_table = download<int32_t>(t.block_table, p.table_elements());
  return in;
}

enum class Bug { none, pages_in_order, last_row_unwritten, past_the_end };
Bug planted = Bug::none;

// Decode on the CPU from the device buffers: right when the harness uploads the tensors, the
// table and the lengths where the pointers say, and reads O back in order.
Status stand_in_decode(const PagedProblem& p, const PagedDevicePtrs& t, cudaStream_t) {
  if (download<int32_t>(t.seqlens_k, p.batch) != std::vector<int32_t>(p.seqlens_k.begin(),
                                                                      p.seqlens_k.end()))
    return Status::error("seqlens_k on the device differ from the problem's");
  PagedInputs in = read_back(p, t);
  if (planted == Bug::pages_in_order) {  // ignores the table: sequences' pages one after another
    int next = 0;
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.pages_of(b); ++j) in.block_table[size_t(b) * p.pages_per_seq + j] = next++;
  }
  const std::vector<double> o = paged_reference(p, in);
  if (planted == Bug::last_row_unwritten) {
    std::vector<double> head(o.begin(), o.end() - p.head_dim);
    upload_output(head, p.dtype, t.o);
    return Status::ok();
  }
  upload_output(o, p.dtype, t.o);
  if (planted == Bug::past_the_end) {
    const uint16_t zero = 0;
    cudaMemcpy(static_cast<uint16_t*>(t.o) + p.q_elements() + 3, &zero, 2, cudaMemcpyHostToDevice);
  }
  return Status::ok();
}

Status stand_in_prefill(const VarlenProblem& p, const void* q, const void* k, const void* v,
                        const int32_t* cu_q, const int32_t* cu_k, void* o, cudaStream_t) {
  if (download<int32_t>(cu_q, p.batch() + 1) != p.cu_seqlens_q() ||
      download<int32_t>(cu_k, p.batch() + 1) != p.cu_seqlens_k())
    return Status::error("cu_seqlens on the device differ from the problem's");
  VarlenInputs in;
  in.q = from_bits16(download<uint16_t>(q, p.total_q() * p.heads * p.head_dim), p.dtype);
  in.k = from_bits16(download<uint16_t>(k, p.total_k() * p.kv_heads * p.head_dim), p.dtype);
  in.v = from_bits16(download<uint16_t>(v, p.total_k() * p.kv_heads * p.head_dim), p.dtype);
  upload_output(varlen_reference(p, in), p.dtype, o);
  return Status::ok();
}

size_t stand_in_workspace(const PagedProblem& p) { return size_t(p.batch) * 64; }

Status any_paged(const PagedProblem&) { return Status::ok(); }
Status any_varlen(const VarlenProblem&) { return Status::ok(); }

const InferenceEntry kStandIn{any_paged, any_varlen, stand_in_workspace, stand_in_decode,
                              stand_in_prefill, nullptr};
const bool registered = register_kernel(Kernel{96, "stand_in", "CPU stand-in (test only)",
                                               Backend::gpu, Impl::solution, refuse_dense_problem,
                                               nullptr, nullptr, &kStandIn});

const Kernel& stand_in() {
  REQUIRE(registered);
  return *find_kernel(96, Impl::solution);
}


}  // namespace

TEST_CASE("check_decode: the stand-in passes through shuffled tables, in f16 and bf16") {
  planted = Bug::none;
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const int page_size : {1, 16})
      for (const bool shuffle : {false, true}) {
        const PagedProblem p = PagedProblem::make(4, 2, 16, 3, {0, 1, 17, 40}, page_size, true,
                                                  dtype);
        INFO(p.describe() << (shuffle ? " shuffled" : ""));
        const InferenceCheck r = check_decode(stand_in(), p, random_paged_inputs(p, 7, shuffle));
        INFO(r.status.message());
        CHECK(r.passed());
        CHECK(r.comparison.rel_l2_error < 1e-3);  // only the rounding of O to 16 bits
        CHECK(r.output.size() == size_t(p.q_elements()));
      }
}

TEST_CASE("check_decode catches a kernel that ignores the table, skips a row, writes past O") {
  const PagedProblem p = PagedProblem::make(4, 2, 16, 1, {5, 40, 33}, 16);
  const PagedInputs shuffled = random_paged_inputs(p, 3, true);
  planted = Bug::pages_in_order;
  CHECK(check_decode(stand_in(), p, random_paged_inputs(p, 3, false)).passed());
  CHECK_FALSE(check_decode(stand_in(), p, shuffled).passed());
  planted = Bug::last_row_unwritten;
  InferenceCheck r = check_decode(stand_in(), p, shuffled);
  CHECK_FALSE(r.passed());
  CHECK(r.comparison.unwritten == p.head_dim);
  CHECK(r.comparison.first_bad.b == 2);  // the last sequence's last head
  CHECK(r.comparison.first_bad.h == 3);
  planted = Bug::past_the_end;
  r = check_decode(stand_in(), p, shuffled);
  CHECK(r.comparison.passed());
  CHECK(r.guard_writes == 1);
  CHECK_FALSE(r.passed());
  planted = Bug::none;
}

TEST_CASE("check_prefill: the stand-in passes; run_decode returns O in Q's layout") {
  const VarlenProblem v = VarlenProblem::make(4, 1, 16, {3, 0, 9}, {3, 5, 20}, true, DType::f16);
  const InferenceCheck r = check_prefill(stand_in(), v, random_varlen_inputs(v, 2));
  INFO(r.status.message());
  CHECK(r.passed());
  CHECK(r.output.size() == size_t(v.total_q() * v.heads * v.head_dim));

  planted = Bug::none;
  const PagedProblem p = PagedProblem::make(2, 2, 8, 2, {3, 9}, 4, false, DType::bf16);
  const PagedInputs in = random_paged_inputs(p, 4, true);
  std::vector<float> out;
  int64_t guard = -1;
  REQUIRE(run_decode(stand_in(), p, in, out, &guard).is_ok());
  CHECK(guard == 0);
  const std::vector<double> want = paged_reference(p, in);
  REQUIRE(out.size() == want.size());
  for (size_t i = 0; i < out.size(); ++i)
    REQUIRE(out[i] == round_to_dtype(float(want[i]), DType::bf16));
}

TEST_CASE("attn run on an inference module, emulated: --verify, --out, --time") {
  planted = Bug::none;
  const std::string o = "/tmp/attn_emu_decode_o.npy";
  CliResult r = attn_cli({"run", "-m", "96", "--seqlens-k", "1,17,100", "--heads", "4", "--kv-heads",
                       "2", "--dim", "16", "--seq-q", "2", "--causal", "--shuffle-pages",
                       "--page-size", "8", "--seed", "3", "--verify", "--out", o, "--time"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("decode B=3 H=4 KVH=2 D=16 Sq=2 Sk=[1,17,100] page=8 causal bf16  pages "
                   "shuffled  seed 3") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(r.out.find("time: not measured (emulated") != std::string::npos);
  CHECK(read_npy(o).shape == std::vector<int64_t>{3, 2, 4, 16});

  planted = Bug::pages_in_order;
  r = attn_cli({"run", "-m", "96", "--seqlens-k", "40,40", "--heads", "2", "--dim", "16",
                "--shuffle-pages", "--seed", "5", "--verify"});
  CHECK(r.code == 1);
  CHECK(r.out.find("FAIL") != std::string::npos);
  CHECK(r.out.find("hint: first wrong element: sequence ") != std::string::npos);
  planted = Bug::none;

  r = attn_cli({"run", "-m", "96", "--varlen", "--seqlens-q", "3,0,7", "--seqlens-k", "3,4,20",
                "--heads", "4", "--dim", "16", "--causal", "--dtype", "f16", "--verify", "--out", o});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("prefill B=3 H=4 D=16 Sq=[3,0,7] Sk=[3,4,20] causal f16") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  CHECK(read_npy(o).shape == std::vector<int64_t>{10, 4, 16});
  std::remove(o.c_str());
}
