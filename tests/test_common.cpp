// Tests of the shared harness (CPU only): problem shapes and strides, the CPU reference on
// cases whose answer is known by hand, the comparison and its NaN/poison rules, .npy I/O,
// the seeded generator and timing statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/npy.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/runner.h"
#include "common/timing.h"
#include "tests/support.h"

using namespace attn;

namespace {
std::string temp_path(const std::string& name) {
  return (std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp")) + "/attn_test_" + name;
}
}  // namespace

TEST_CASE("problem: dense strides for BHSD and BSHD") {
  const Problem bhsd = Problem::make(2, 3, 5, 7, 4);
  CHECK(bhsd.q.seq == 4);
  CHECK(bhsd.q.head == 5 * 4);
  CHECK(bhsd.q.batch == 3 * 5 * 4);
  CHECK(bhsd.k.head == 7 * 4);
  CHECK(bhsd.q_elements() == 2 * 3 * 5 * 4);
  CHECK(bhsd.kv_elements() == 2 * 3 * 7 * 4);
  const Problem bshd = Problem::make(2, 3, 5, 7, 4, false, Layout::BSHD);
  CHECK(bshd.q.seq == 3 * 4);
  CHECK(bshd.q.head == 4);
  CHECK(bshd.q.batch == 5 * 3 * 4);
  CHECK(bshd.o_elements() == 2 * 3 * 5 * 4);
  // The same logical element (b=1, h=2, i=3) lands where each layout says.
  CHECK(Problem::offset(bhsd.q, 1, 2, 3) == ((1 * 3 + 2) * 5 + 3) * 4);
  CHECK(Problem::offset(bshd.q, 1, 2, 3) == ((1 * 5 + 3) * 3 + 2) * 4);
}

TEST_CASE("problem: rows_aligned16 needs an aligned base and strides of whole float4s") {
  alignas(16) static float buffer[8];
  const Problem p = Problem::make(2, 3, 5, 5, 64);
  CHECK(rows_aligned16(buffer, p.q));
  CHECK_FALSE(rows_aligned16(buffer + 1, p.q));  // base 4 bytes off
  Strides odd = p.q;
  odd.seq = 65;  // rows 4-byte aligned only
  CHECK_FALSE(rows_aligned16(buffer, odd));
  odd = p.q;
  odd.head = 6 * 64 + 2;
  CHECK_FALSE(rows_aligned16(buffer, odd));
  odd = p.q;
  odd.batch = 7;
  CHECK_FALSE(rows_aligned16(buffer, odd));
}

TEST_CASE("problem: the default scale is 1/sqrt(head_dim)") {
  Problem p = Problem::make(1, 1, 1, 1, 64);
  CHECK(p.softmax_scale() == doctest::Approx(0.125));
  p.scale = 0.3f;
  CHECK(p.softmax_scale() == doctest::Approx(0.3));
}

TEST_CASE("problem: causal mask is bottom-right aligned") {
  const Problem square = Problem::make(1, 1, 4, 4, 8, true);
  CHECK(square.first_masked_key(0) == 1);  // query 0 sees key 0
  CHECK(square.first_masked_key(3) == 4);  // the last query sees everything
  CHECK(square.visible_pairs() == 1 + 2 + 3 + 4);
  const Problem wide = Problem::make(1, 1, 2, 5, 8, true);  // seq_k > seq_q: offset 3
  CHECK(wide.first_masked_key(0) == 4);
  CHECK(wide.first_masked_key(1) == 5);
  const Problem tall = Problem::make(1, 1, 5, 2, 8, true);  // seq_q > seq_k: offset -3
  CHECK(tall.first_masked_key(0) == 0);  // queries 0..2 see no key
  CHECK(tall.first_masked_key(2) == 0);
  CHECK(tall.first_masked_key(3) == 1);
  CHECK(tall.first_masked_key(4) == 2);
  CHECK(tall.visible_pairs() == 3);
  CHECK(Problem::make(1, 1, 5, 2, 8, false).first_masked_key(0) == 2);
}

TEST_CASE("problem: flops and bytes") {
  const Problem p = Problem::make(2, 4, 128, 256, 64);
  CHECK(attention_flops(p) == doctest::Approx(4.0 * 2 * 4 * 128 * 256 * 64));
  CHECK(attention_bytes_fused(p) == doctest::Approx(4.0 * 2 * 4 * 64 * (2 * 128 + 2 * 256)));
  CHECK(attention_bytes_unfused(p) - attention_bytes_fused(p) ==
        doctest::Approx(4.0 * 2 * 4 * 4 * 128 * 256));
  const Problem causal = Problem::make(1, 1, 4, 4, 8, true);
  CHECK(attention_flops(causal) == doctest::Approx(4.0 * 10 * 8));
}

TEST_CASE("problem: validation gives one clear reason") {
  CHECK(validate(Problem::make(1, 1, 1, 1, 1)).is_ok());
  CHECK(validate(Problem::make(1, 1, 1, 1, kMaxHeadDim)).is_ok());
  const Status zero = validate(Problem::make(1, 1, 0, 4, 64));
  CHECK_FALSE(zero.is_ok());
  CHECK(zero.message().find("seq_q") != std::string::npos);
  CHECK(validate(Problem::make(-1, 1, 4, 4, 64)).message().find("batch") != std::string::npos);
  CHECK(validate(Problem::make(1, 1, 4, 4, 300)).message().find("300") != std::string::npos);
  Problem overlapping = Problem::make(1, 1, 4, 4, 64);
  overlapping.q.seq = 32;
  CHECK(validate(overlapping).message().find("overlap") != std::string::npos);
  Problem bad_scale = Problem::make(1, 1, 4, 4, 64);
  bad_scale.scale = NAN;
  CHECK_FALSE(validate(bad_scale).is_ok());
  CHECK_FALSE(validate(Problem::make(1 << 16, 1 << 10, 1 << 10, 1, 64)).is_ok());  // > 2^31 rows
}

TEST_CASE("reference: one key gives that key's value") {
  Problem p = Problem::make(1, 1, 3, 1, 4);
  Inputs in = random_inputs(p, 1);
  const std::vector<double> o = reference_attention(p, in.q, in.k, in.v);
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 4; ++d) CHECK(o[size_t(i * 4 + d)] == doctest::Approx(in.v[size_t(d)]));
}

TEST_CASE("reference: equal scores average the values") {
  Problem p = Problem::make(1, 1, 1, 3, 2);
  std::vector<float> q = {0.0f, 0.0f}, k = {1, 2, 3, 4, 5, 6}, v = {1, 10, 2, 20, 6, 60};
  const std::vector<double> o = reference_attention(p, q, k, v);  // q = 0: all scores 0
  CHECK(o[0] == doctest::Approx(3.0));
  CHECK(o[1] == doctest::Approx(30.0));
}

TEST_CASE("reference: a hand-computed two-key softmax with scale") {
  // d = 1, q = 2, k = (1, 3), scale 0.5: scores 1 and 3, weights e^1/(e^1+e^3), e^3/(...).
  Problem p = Problem::make(1, 1, 1, 2, 1);
  p.scale = 0.5f;
  const std::vector<double> o = reference_attention(p, {2.0f}, {1.0f, 3.0f}, {10.0f, -4.0f});
  const double w0 = std::exp(1.0) / (std::exp(1.0) + std::exp(3.0));
  CHECK(o[0] == doctest::Approx(w0 * 10.0 + (1 - w0) * -4.0).epsilon(1e-12));
}

TEST_CASE("reference: large logits stay finite and pick the max") {
  Problem p = Problem::make(1, 1, 1, 2, 1);
  p.scale = 1.0f;
  const std::vector<double> o = reference_attention(p, {1000.0f}, {1.0f, 2.0f}, {5.0f, 7.0f});
  CHECK(std::isfinite(o[0]));
  CHECK(o[0] == doctest::Approx(7.0));  // exp(1000) vs exp(2000): the second key wins fully
}

TEST_CASE("reference: causal rows, fully masked rows are 0, and the BSHD layout agrees") {
  Problem tall = Problem::make(1, 1, 4, 2, 3, true);  // queries 0 and 1 see no key
  Inputs in = random_inputs(tall, 7);
  std::vector<double> o = reference_attention(tall, in.q, in.k, in.v);
  for (int d = 0; d < 3; ++d) {
    CHECK(o[size_t(0 * 3 + d)] == 0.0);
    CHECK(o[size_t(1 * 3 + d)] == 0.0);
    CHECK(o[size_t(2 * 3 + d)] == doctest::Approx(in.v[size_t(d)]));  // sees key 0 only
  }
  // BSHD: the same numbers permuted give the same attention, permuted.
  const int B = 2, H = 3, S = 5, D = 4;
  Problem a = Problem::make(B, H, S, S, D, true), b = Problem::make(B, H, S, S, D, true, Layout::BSHD);
  Inputs x = random_inputs(a, 11), y = x;
  for (int bi = 0; bi < B; ++bi)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i)
        for (int d = 0; d < D; ++d) {
          const size_t src = size_t(Problem::offset(a.q, bi, h, i) + d);
          const size_t dst = size_t(Problem::offset(b.q, bi, h, i) + d);
          y.q[dst] = x.q[src];
          y.k[dst] = x.k[src];
          y.v[dst] = x.v[src];
        }
  const std::vector<double> oa = reference_attention(a, x.q, x.k, x.v);
  const std::vector<double> ob = reference_attention(b, y.q, y.k, y.v);
  for (int bi = 0; bi < B; ++bi)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i)
        for (int d = 0; d < D; ++d)
          CHECK(oa[size_t(Problem::offset(a.o, bi, h, i) + d)] ==
                ob[size_t(Problem::offset(b.o, bi, h, i) + d)]);
}

TEST_CASE("compare: exact output passes, NaN never passes, poison counts as unwritten") {
  Problem p = Problem::make(1, 2, 3, 3, 4);
  Inputs in = random_inputs(p, 3);
  const std::vector<double> want = reference_attention(p, in.q, in.k, in.v);
  std::vector<float> got(want.begin(), want.end());
  Comparison ok = compare_output(p, got, want);
  CHECK(ok.passed());
  CHECK(ok.rel_l2_error < 1e-7);

  std::vector<float> one_nan = got;
  one_nan[5] = NAN;
  Comparison c = compare_output(p, one_nan, want, /*tolerance=*/1e30);  // even with any tolerance
  CHECK_FALSE(c.passed());
  CHECK(c.nan_count == 1);
  CHECK(c.unwritten == 0);
  CHECK(c.first_bad.i == 1);  // element 5 = row 1, d = 1
  CHECK(c.first_bad.d == 1);

  std::vector<float> unwritten = got;
  for (size_t e = 12; e < 24; ++e) unwritten[e] = poison_value();  // head 1 never written
  Comparison u = compare_output(p, unwritten, want);
  CHECK_FALSE(u.passed());
  CHECK(u.unwritten == 12);
  CHECK(u.first_bad.h == 1);
  CHECK(u.bad_rows == 3);
  CHECK(u.summary().find("never written: 12") != std::string::npos);
}

TEST_CASE("compare: a small error passes, a 1% error fails and is located") {
  Problem p = Problem::make(1, 1, 10, 10, 8);
  Inputs in = random_inputs(p, 5);
  const std::vector<double> want = reference_attention(p, in.q, in.k, in.v);
  std::vector<float> got(want.begin(), want.end());
  for (float& x : got) x *= 1.0f + 1e-6f;
  CHECK(compare_output(p, got, want).passed());
  std::vector<float> wrong(want.begin(), want.end());
  wrong[8 * 7 + 3] += 10.0f;
  const Comparison c = compare_output(p, wrong, want);
  CHECK_FALSE(c.passed());
  CHECK(c.first_bad.i == 7);
  CHECK(c.first_bad.d == 3);
  CHECK(c.first_bad_query == 7);
  CHECK(c.last_bad_query == 7);
}

TEST_CASE("npy: round trip of a 4-D float32 tensor") {
  const std::string path = temp_path("roundtrip.npy");
  std::vector<float> data(2 * 3 * 5 * 7);
  fill_uniform(data, 9);
  write_npy(path, {2, 3, 5, 7}, data);
  const NpyArray a = read_npy(path);
  CHECK(a.shape == std::vector<int64_t>{2, 3, 5, 7});
  CHECK(a.data == data);
  // The header is padded so the data starts on a 64-byte boundary, as NumPy writes it.
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  CHECK((int64_t(f.tellg()) - int64_t(data.size() * 4)) % 64 == 0);
  std::remove(path.c_str());
}

TEST_CASE("npy: clear errors for what we do not read") {
  auto write_raw = [](const std::string& path, const std::string& header, size_t data_bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    std::string h = header;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    const char len[2] = {char(h.size() & 0xFF), char(h.size() >> 8)};
    f.write(len, 2);
    f.write(h.data(), std::streamsize(h.size()));
    f.write(std::string(data_bytes, '\0').data(), std::streamsize(data_bytes));
  };
  auto error_of = [](const std::string& path) -> std::string {
    try {
      read_npy(path);
    } catch (const NpyError& e) {
      return e.what();
    }
    return "";
  };
  const std::string f64 = temp_path("f64.npy");
  write_raw(f64, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", 32);
  CHECK(error_of(f64).find("float64") != std::string::npos);
  CHECK(error_of(f64).find("astype(np.float32)") != std::string::npos);
  const std::string fortran = temp_path("fortran.npy");
  write_raw(fortran, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
  CHECK(error_of(fortran).find("Fortran") != std::string::npos);
  const std::string truncated = temp_path("truncated.npy");
  write_raw(truncated, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", 20);
  CHECK(error_of(truncated).find("ends before") != std::string::npos);
  const std::string text = temp_path("text.npy");
  std::ofstream(text) << "not numpy";
  CHECK(error_of(text).find("not a .npy file") != std::string::npos);
  CHECK(error_of(temp_path("missing.npy")).find("cannot open") != std::string::npos);
  for (const std::string& path : {f64, fortran, truncated, text}) std::remove(path.c_str());
}

TEST_CASE("npy: integer arrays (int32 and int64) for block tables and lengths") {
  // The raw bytes of a version-1 .npy file: what np.save writes for an integer array.
  auto write_ints = [](const std::string& path, const char* descr, const std::string& shape,
                       const void* data, size_t bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                    shape + ", }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    const char len[2] = {char(h.size() & 0xFF), char(h.size() >> 8)};
    f.write(len, 2);
    f.write(h.data(), std::streamsize(h.size()));
    f.write(static_cast<const char*>(data), std::streamsize(bytes));
  };
  auto error_of = [](const std::string& path) -> std::string {
    try {
      read_npy_int32(path);
    } catch (const NpyError& e) {
      return e.what();
    }
    return "";
  };
  const std::string i4 = temp_path("table_i4.npy"), i8 = temp_path("table_i8.npy");
  const std::vector<int32_t> table = {3, 0, -1, 7, 2, 2147483647};
  write_npy_int32(i4, {2, 3}, table);
  NpyIntArray a = read_npy_int32(i4);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.data == table);
  const std::vector<int64_t> wide = {5, -1, 4096, -2147483648LL};
  write_ints(i8, "<i8", "(4,)", wide.data(), wide.size() * 8);
  a = read_npy_int32(i8);
  CHECK(a.shape == std::vector<int64_t>{4});
  CHECK(a.data == std::vector<int32_t>{5, -1, 4096, INT32_MIN});

  const std::vector<int64_t> huge = {1, 3000000000LL};
  write_ints(i8, "<i8", "(2,)", huge.data(), huge.size() * 8);
  CHECK(error_of(i8).find("element 1 is 3000000000, outside the int32 range") != std::string::npos);
  write_ints(i8, "<i8", "(3,)", huge.data(), huge.size() * 8);  // one value short
  CHECK(error_of(i8).find("ends before the 3 int64 values") != std::string::npos);
  const std::string f4 = temp_path("table_f4.npy");
  write_npy(f4, {2}, {1.0f, 2.0f});
  CHECK(error_of(f4).find("expected an integer array (int32 '<i4' or int64 '<i8')") !=
        std::string::npos);
  CHECK(error_of(f4).find("astype(np.int32)") != std::string::npos);
  const uint16_t shorts[2] = {1, 2};
  write_ints(i8, "<i2", "(2,)", shorts, 4);
  CHECK(error_of(i8).find("'<i2'") != std::string::npos);
  // The float reader still refuses integer files, naming what it expects.
  try {
    read_npy(i4);
    FAIL("read_npy accepted an int32 file");
  } catch (const NpyError& e) {
    CHECK(std::string(e.what()).find("expected float32") != std::string::npos);
  }
  for (const std::string& path : {i4, i8, f4}) std::remove(path.c_str());
}

TEST_CASE("random: same seed same numbers, different seeds differ, range respected") {
  std::vector<float> a(1000), b(1000), c(1000);
  fill_uniform(a, 42, -2.0f, 3.0f);
  fill_uniform(b, 42, -2.0f, 3.0f);
  fill_uniform(c, 43, -2.0f, 3.0f);
  CHECK(a == b);
  CHECK(a != c);
  double mean = 0.0;
  for (float x : a) {
    CHECK(x >= -2.0f);
    CHECK(x < 3.0f);
    mean += x / 1000.0;
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.1));
  Problem p = Problem::make(1, 1, 4, 4, 4);
  Inputs in = random_inputs(p, 1);
  CHECK(in.q != in.k);  // tensors come from different streams
}

TEST_CASE("timing: the median of the samples") {
  const Timing odd = summarize_times({5.0, 1.0, 3.0});
  CHECK(odd.median_ms == 3.0);
  CHECK(odd.min_ms == 1.0);
  CHECK(odd.max_ms == 5.0);
  CHECK(summarize_times({4.0, 1.0, 2.0, 100.0}).median_ms == 3.0);
}
