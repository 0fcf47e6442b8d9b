// Tests of grouped K/V heads in the shared harness (CPU only): Problem::kv_heads and
// kv_head(), the strides and sizes of K/V, validation, the work and traffic counts, and the
// CPU reference, which must equal the ordinary multi-head reference run on K/V whose heads
// were repeated (copied) for every query head of their group -- the definition of GQA/MQA.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/problem.h"
#include "common/reference.h"
#include "common/runner.h"

using namespace attn;

namespace {

// The same problem with one K/V head per query head, and K/V copied so that head h holds
// what head p.kv_head(h) holds in `in`. Q is shared (same layout, same strides).
struct Repeated {
  Problem p;
  Inputs in;
};

Repeated repeat_kv_heads(const Problem& g, const Inputs& in, Layout layout) {
  Repeated r;
  r.p = Problem::make(g.batch, g.heads, g.seq_q, g.seq_k, g.head_dim, g.causal, layout);
  r.p.scale = g.scale;
  // Q and O are untouched by kv_heads: the same buffers serve both problems.
  REQUIRE(r.p.q.batch == g.q.batch);
  REQUIRE(r.p.q.head == g.q.head);
  REQUIRE(r.p.q.seq == g.q.seq);
  REQUIRE(r.p.o_elements() == g.o_elements());
  r.in.q = in.q;
  r.in.k.assign(size_t(r.p.kv_elements()), 0.0f);
  r.in.v.assign(size_t(r.p.kv_elements()), 0.0f);
  for (int b = 0; b < g.batch; ++b)
    for (int h = 0; h < g.heads; ++h)
      for (int j = 0; j < g.seq_k; ++j)
        for (int d = 0; d < g.head_dim; ++d) {
          const size_t dst = size_t(Problem::offset(r.p.k, b, h, j) + d);
          r.in.k[dst] = in.k[size_t(Problem::offset(g.k, b, g.kv_head(h), j) + d)];
          r.in.v[dst] = in.v[size_t(Problem::offset(g.v, b, g.kv_head(h), j) + d)];
        }
  return r;
}

void check_reference_equals_repeated(const Problem& g, Layout layout, uint64_t seed) {
  INFO(g.describe() << " " << layout_name(layout));
  REQUIRE(validate(g).is_ok());
  const Inputs in = random_inputs(g, seed);
  const Repeated r = repeat_kv_heads(g, in, layout);
  const std::vector<double> grouped = reference_attention(g, in.q, in.k, in.v);
  const std::vector<double> repeated = reference_attention(r.p, r.in.q, r.in.k, r.in.v);
  REQUIRE(grouped.size() == repeated.size());
  // Same numbers through the same double arithmetic: equal bit for bit, not just close.
  size_t differ = 0;
  for (size_t e = 0; e < grouped.size(); ++e) differ += grouped[e] != repeated[e];
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("grouped K/V: make() defaults kv_heads to heads; K/V strides use kv_heads") {
  const Problem mha = Problem::make(2, 8, 5, 7, 4);
  CHECK(mha.kv_heads == 8);
  CHECK(Problem().kv_heads == 1);  // a default Problem has 1 head and 1 K/V head

  const Problem bhsd = Problem::make(2, 8, 5, 7, 4, false, Layout::BHSD, 2);
  CHECK(bhsd.kv_heads == 2);
  CHECK(bhsd.q.batch == 8 * 5 * 4);  // Q and O keep all 8 heads
  CHECK(bhsd.o.batch == 8 * 5 * 4);
  CHECK(bhsd.k.seq == 4);
  CHECK(bhsd.k.head == 7 * 4);
  CHECK(bhsd.k.batch == 2 * 7 * 4);  // K/V hold 2 heads per batch
  CHECK(bhsd.v.batch == 2 * 7 * 4);
  CHECK(bhsd.q_elements() == 2 * 8 * 5 * 4);
  CHECK(bhsd.kv_elements() == 2 * 2 * 7 * 4);
  CHECK(bhsd.o_elements() == 2 * 8 * 5 * 4);

  const Problem bshd = Problem::make(2, 8, 5, 7, 4, false, Layout::BSHD, 2);
  CHECK(bshd.q.seq == 8 * 4);
  CHECK(bshd.k.seq == 2 * 4);  // a token's K row holds kv_heads heads
  CHECK(bshd.k.head == 4);
  CHECK(bshd.k.batch == 7 * 2 * 4);
  CHECK(bshd.kv_elements() == 2 * 7 * 2 * 4);

  const Problem mqa = Problem::make(3, 6, 5, 7, 4, true, Layout::BSHD, 1);
  CHECK(mqa.kv_elements() == 3 * 7 * 4);
  CHECK(mqa.k.seq == 4);
}

TEST_CASE("grouped K/V: kv_head(h) maps consecutive groups of query heads to one K/V head") {
  const Problem gqa = Problem::make(1, 8, 1, 1, 16, false, Layout::BHSD, 2);
  for (int h = 0; h < 8; ++h) CHECK(gqa.kv_head(h) == (h < 4 ? 0 : 1));  // not h % 2
  const Problem gqa4 = Problem::make(1, 8, 1, 1, 16, false, Layout::BHSD, 4);
  for (int h = 0; h < 8; ++h) CHECK(gqa4.kv_head(h) == h / 2);
  const Problem mqa = Problem::make(1, 8, 1, 1, 16, false, Layout::BHSD, 1);
  for (int h = 0; h < 8; ++h) CHECK(mqa.kv_head(h) == 0);
  const Problem mha = Problem::make(1, 8, 1, 1, 16);
  for (int h = 0; h < 8; ++h) CHECK(mha.kv_head(h) == h);
}

TEST_CASE("grouped K/V: validation gives one clear reason") {
  CHECK(validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 8)).is_ok());
  CHECK(validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 2)).is_ok());
  CHECK(validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 1)).is_ok());

  const Status not_divisor = validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 3));
  CHECK_FALSE(not_divisor.is_ok());
  CHECK(not_divisor.message().find("kv_heads must divide heads") != std::string::npos);
  CHECK(not_divisor.message().find("heads=8, kv_heads=3") != std::string::npos);
  CHECK(not_divisor.message().find('\n') == std::string::npos);
  CHECK_FALSE(validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 16)).is_ok());

  Problem zero = Problem::make(1, 8, 4, 4, 16);
  zero.kv_heads = 0;  // set by hand (make() reads 0 as "= heads")
  CHECK(validate(zero).message().find("kv_heads must be >= 1") != std::string::npos);
  CHECK(validate(Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, -2))
            .message()
            .find("kv_heads must be >= 1") != std::string::npos);

  // K/V strides are checked against kv_heads: with one K/V head its head stride is unused
  // (0 is fine), with two it must step over whole rows.
  Problem mqa = Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 1);
  mqa.k.head = mqa.v.head = 0;
  CHECK(validate(mqa).is_ok());
  Problem gqa = Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 2);
  gqa.k.head = 8;
  CHECK(validate(gqa).message().find("k head/batch strides overlap") != std::string::npos);
}

TEST_CASE("grouped K/V: describe() shows KVH only when K/V heads are grouped") {
  CHECK(Problem::make(2, 8, 1024, 512, 64, true).describe() ==
        "B=2 H=8 Sq=1024 Sk=512 D=64 causal");
  CHECK(Problem::make(2, 8, 1024, 512, 64, false, Layout::BHSD, 2).describe() ==
        "B=2 H=8 KVH=2 Sq=1024 Sk=512 D=64");
  CHECK(Problem::make(1, 4, 3, 3, 8, false, Layout::BSHD, 1).describe() ==
        "B=1 H=4 KVH=1 Sq=3 Sk=3 D=8");
}

TEST_CASE("grouped K/V: flops per query head, K/V bytes per K/V head") {
  const Problem mha = Problem::make(2, 8, 128, 256, 64);
  const Problem gqa = Problem::make(2, 8, 128, 256, 64, false, Layout::BHSD, 2);
  CHECK(attention_flops(gqa) == attention_flops(mha));  // every query head does the same work
  CHECK(attention_bytes_fused(gqa) ==
        doctest::Approx(4.0 * 64 * (2.0 * 2 * 8 * 128 + 2.0 * 2 * 2 * 256)));
  CHECK(attention_bytes_fused(mha) == doctest::Approx(4.0 * 2 * 8 * 64 * (2 * 128 + 2 * 256)));
  // The unfused version's extra traffic is the score matrix of every query head.
  CHECK(attention_bytes_unfused(gqa) - attention_bytes_fused(gqa) ==
        doctest::Approx(attention_bytes_unfused(mha) - attention_bytes_fused(mha)));
  CHECK(attention_buffer_bytes(gqa) ==
        doctest::Approx(4.0 * (2.0 * 8 * 128 * 64 * 2 + 2.0 * 2 * 2 * 256 * 64)));
}

TEST_CASE("grouped K/V: random inputs are sized by kv_elements") {
  const Problem p = Problem::make(2, 6, 9, 11, 8, false, Layout::BSHD, 3);
  const Inputs in = random_inputs(p, 5);
  CHECK(in.q.size() == size_t(p.q_elements()));
  CHECK(in.k.size() == size_t(p.kv_elements()));
  CHECK(in.v.size() == size_t(2 * 11 * 3 * 8));
}

TEST_CASE("grouped K/V: the reference equals the reference on K/V repeated per query head") {
  uint64_t seed = 100;
  for (Layout layout : {Layout::BHSD, Layout::BSHD})
    for (bool causal : {false, true})
      for (int kv_heads : {1, 2, 4, 8}) {  // MQA, GQA, GQA, and MHA as the control
        check_reference_equals_repeated(
            Problem::make(2, 8, 9, 13, 8, causal, layout, kv_heads), layout, ++seed);
        check_reference_equals_repeated(  // Sq > Sk: causal rows that see no key
            Problem::make(1, 8, 13, 5, 7, causal, layout, kv_heads), layout, ++seed);
      }
}

TEST_CASE("grouped K/V: modules that read one K/V head per query head refuse, in one line") {
  const Problem mha = Problem::make(1, 8, 4, 4, 16);
  const Problem gqa = Problem::make(1, 8, 4, 4, 16, false, Layout::BHSD, 2);
  CHECK(require_one_kv_head_per_head(mha, "module 03").is_ok());
  const Status s = require_one_kv_head_per_head(gqa, "module 03");
  CHECK_FALSE(s.is_ok());
  CHECK(s.message() ==
        "module 03 reads one K/V head per query head (got heads=8, kv_heads=2); grouped K/V "
        "heads (--kv-heads) come in module 06 (module 05 runs them unfused)");
}
