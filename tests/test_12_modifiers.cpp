// Grader for module 12 (GPU): score modifiers, masks with tile skipping and fused RoPE on
// module 07's kernel, and on Hopper score modifiers and masks on module 09's kernel as well.
// Built twice: grade_12 (exercise), check_12 (solution). Without a GPU it exits 77 (skipped).
//
// The reference is the double-precision attention with modifiers of common/modifiers.h on the
// same 16-bit inputs (and the same 16-bit bias); the tolerance is module 07's
// (default_tolerance: 2e-3 for f16, 1e-2 for bf16, relative L2). RoPE rotates Q and K in the
// kernel and rounds them to 16 bits before the product, one more rounding than the reference
// has: a correct kernel still measures well inside the tolerance (README, section 3).
// The shapes are the odd ones of the earlier modules: 1, 17, 65, 1000 and seq_q != seq_k,
// head dims 80 and 96, grouped K/V heads, BSHD strides; windows and documents that leave rows
// with no key at all (0, never NaN). The tile classification is checked on its own: a tile
// with a visible pair marked masked is a wrong answer even where the output happens to pass.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/compare.h"
#include "common/device.h"
#include "common/half.h"
#include "common/modifier_runner.h"
#include "common/modifiers.h"
#include "modules/12_modifiers/modifier_attention.h"
#include "tests/support.h"

using namespace attn;

namespace {

const Kernel& kernel() { return testing::kernel_under_test(12, testing::impl_under_test()); }

// The kernel under test with its forward() held to one engine (modifier_attention.h):
// forward() itself takes module 09's kernel where it runs and module 07's elsewhere.
const Kernel& kernel_on(m12::Engine e) {
  static const ModifierEntry on_mma{
      kernel().modifiers->supports,
      [](const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
         const void* k, const void* v, void* o, cudaStream_t s) {
        return m12::ATTN_IMPL::forward_on(m12::Engine::mma, p, m, t, q, k, v, o, s);
      }};
  static const ModifierEntry on_wgmma{
      kernel().modifiers->supports,
      [](const Problem& p, const ModifierSpec& m, const ModifierTensors& t, const void* q,
         const void* k, const void* v, void* o, cudaStream_t s) {
        return m12::ATTN_IMPL::forward_on(m12::Engine::wgmma, p, m, t, q, k, v, o, s);
      }};
  static Kernel mma = kernel(), wgmma = kernel();
  mma.modifiers = &on_mma;
  wgmma.modifiers = &on_wgmma;
  return e == m12::Engine::mma ? mma : e == m12::Engine::wgmma ? wgmma : kernel();
}

const char* kScores = "modules/12_modifiers/README.md, section 1 (score modifiers)";
const char* kMasks = "modules/12_modifiers/README.md, section 2 (masks and tile classification)";
const char* kRope = "modules/12_modifiers/README.md, section 3 (RoPE)";

Problem problem(int batch, int heads, int seq_q, int seq_k, int d, bool causal,
                DType t = DType::bf16, Layout layout = Layout::BHSD, int kv_heads = 0) {
  Problem p = Problem::make(batch, heads, seq_q, seq_k, d, causal, layout, kv_heads);
  p.dtype = t;
  return p;
}

// Fresh inputs, run, compare with the reference with modifiers; on failure the harness's
// hints (common/modifier_runner.h) and the lesson section.
bool check(const Problem& p, const ModifierSpec& m, const char* lesson, float range = 1.0f,
           m12::Engine engine = m12::Engine::automatic) {
  if (testing::run_stopped()) return false;
  const double flops = 4.0 * double(p.batch) * p.heads * p.seq_q * p.seq_k * p.head_dim;
  if (testing::sanitizer_light() && flops > testing::kSanitizerMaxFlops) {
    MESSAGE("skipped under the sanitizer (large): " << p.describe() << " " << m.describe());
    return true;
  }
  const uint64_t seed = testing::next_seed();
  INFO(p.describe() << " " << m.describe() << ", seed " << seed
                   << (engine == m12::Engine::mma     ? ", module 07's kernel"
                       : engine == m12::Engine::wgmma ? ", module 09's kernel"
                                                      : ""));
  const Inputs in = random_inputs(p, seed, range);
  const ModifierInputs mi = random_modifier_inputs(p, m, seed + 1);
  const ModifierCheck r = check_modified(kernel_on(engine), p, m, in, mi);
  if (r.passed()) return true;
  if (!r.status) {
    FAIL_CHECK("forward() failed: " << r.status.message() << "\n  read " << std::string(lesson));
    return false;
  }
  std::string hints;
  if (r.guard_writes > 0)
    hints += "\n  - " + std::to_string(r.guard_writes) + " values were written past the end of O";
  for (const std::string& h : diagnose_modified(p, m, mi, in, r)) hints += "\n  - " + h;
  FAIL_CHECK("wrong output: " << r.comparison.summary() << hints << "\n  read " << std::string(lesson));
  return false;
}

// Module 09's kernel runs here: a Hopper GPU, and sm_90a code in this build (module 12 is
// compiled for the course's architectures with 90 replaced by 90a).
bool hopper_kernel_runs() {
  const std::string archs = ATTN_MODULE_ARCHITECTURES;
  return query_device().cc_major == 9 && archs.find("90a") != std::string::npos;
}

ModifierSpec score_spec(ScoreMod s) {
  ModifierSpec m;
  m.score = s;
  if (s == ScoreMod::softcap) m.softcap = 5.0f;  // with range 2 the logits reach ~10: tanh bends
  return m;
}

}  // namespace

// Without modifiers forward() runs module 07's own kernel, or on Hopper module 09's with the
// hooks: the causal mask is then your visible_keys and classify.
TEST_CASE("no modifier: plain problems, the causal one through the mask steps on Hopper") {
  for (DType t : {DType::bf16, DType::f16}) {
    CHECK(check(problem(1, 1, 17, 17, 64, false, t), {}, kScores));
    CHECK(check(problem(2, 4, 65, 1000, 128, true, t, Layout::BSHD, 2), {}, kMasks));
  }
}

TEST_CASE("ALiBi: a slope per head times the distance") {
  const ModifierSpec m = score_spec(ScoreMod::alibi);
  CHECK(check(problem(1, 8, 64, 64, 64, false), m, kScores));
  CHECK(check(problem(2, 8, 65, 1000, 128, true, DType::bf16, Layout::BSHD, 2), m, kScores));
  CHECK(check(problem(1, 5, 1000, 17, 80, false, DType::f16), m, kScores));
  CHECK(check(problem(1, 4, 333, 4097, 96, true), m, kScores, 3.0f));  // large logits
}

TEST_CASE("soft-capping: cap * tanh(x / cap)") {
  const ModifierSpec m = score_spec(ScoreMod::softcap);
  CHECK(check(problem(1, 2, 64, 64, 64, false), m, kScores, 2.0f));
  CHECK(check(problem(2, 4, 65, 1000, 128, true, DType::f16, Layout::BSHD, 1), m, kScores, 2.0f));
  CHECK(check(problem(1, 3, 17, 333, 96, false), m, kScores, 4.0f));
}

TEST_CASE("additive bias: per head, broadcast, rows that do not move in 16-byte pieces") {
  ModifierSpec m = score_spec(ScoreMod::bias);
  CHECK(check(problem(1, 4, 64, 128, 64, false), m, kScores));
  CHECK(check(problem(2, 4, 65, 17, 128, true, DType::f16), m, kScores));  // seq_k % 8 != 0
  m.bias_per_head = false;
  m.bias_per_batch = true;
  CHECK(check(problem(3, 2, 200, 333, 80, false, DType::bf16, Layout::BSHD, 1), m, kScores));
  m.bias_per_batch = false;
  CHECK(check(problem(2, 4, 1000, 1000, 64, true), m, kScores));
}

TEST_CASE("T5 relative position buckets") {
  ModifierSpec m = score_spec(ScoreMod::relative);
  CHECK(check(problem(1, 4, 64, 64, 64, false), m, kScores));
  CHECK(check(problem(2, 4, 65, 1000, 128, true, DType::bf16, Layout::BSHD, 2), m, kScores));
  m.rel_bidirectional = false;
  m.rel_buckets = 16;
  m.rel_max_distance = 300;
  CHECK(check(problem(1, 3, 1000, 777, 96, true, DType::f16), m, kScores));
}

TEST_CASE("sliding window: rows see the last `window` keys, some rows see none") {
  for (int w : {1, 17, 100, 5000}) {
    ModifierSpec m;
    m.window = w;
    CHECK(check(problem(1, 2, 333, 333, 64, true), m, kMasks));
    CHECK(check(problem(2, 4, 65, 1000, 128, true, DType::f16, Layout::BSHD, 2), m, kMasks));
    CHECK(check(problem(1, 2, 1000, 65, 80, true), m, kMasks));  // the first 935 rows: no key
  }
}

TEST_CASE("prefix-LM: the prefix is seen by every query") {
  for (int prefix : {1, 64, 300, 5000}) {
    ModifierSpec m;
    m.prefix = prefix;
    CHECK(check(problem(1, 2, 333, 333, 64, true), m, kMasks));
    CHECK(check(problem(2, 2, 100, 1000, 128, true, DType::bf16, Layout::BSHD, 1), m, kMasks));
  }
}

TEST_CASE("documents: packed sequences never see each other") {
  ModifierSpec m;
  m.documents = true;
  CHECK(check(problem(2, 2, 333, 333, 64, false), m, kMasks));
  CHECK(check(problem(2, 2, 333, 333, 64, true), m, kMasks));
  CHECK(check(problem(1, 4, 1000, 4097, 128, true, DType::f16, Layout::BSHD, 2), m, kMasks));
  CHECK(check(problem(3, 2, 65, 17, 96, false), m, kMasks));
  m.window = 50;  // documents and a window together (AND)
  CHECK(check(problem(1, 2, 1000, 1000, 64, true), m, kMasks));
}

TEST_CASE("RoPE: interleaved and half-split, on Q and K as they arrive") {
  for (RopeStyle r : {RopeStyle::interleaved, RopeStyle::half}) {
    ModifierSpec m;
    m.rope = r;
    CHECK(check(problem(1, 2, 64, 64, 64, false), m, kRope));
    CHECK(check(problem(2, 4, 65, 1000, 128, true, DType::bf16, Layout::BSHD, 2), m, kRope));
    CHECK(check(problem(1, 3, 1000, 333, 96, false, DType::f16), m, kRope));
    CHECK(check(problem(1, 2, 17, 4097, 80, true), m, kRope));
    m.rope_base = 500000.0;  // Llama 3's base: longer wavelengths
    CHECK(check(problem(1, 2, 333, 333, 128, true), m, kRope));
  }
}

TEST_CASE("modifiers together: softcap + window + RoPE, ALiBi + documents, bias + prefix") {
  ModifierSpec gemma = score_spec(ScoreMod::softcap);
  gemma.window = 100;
  gemma.rope = RopeStyle::half;
  CHECK(check(problem(2, 4, 333, 333, 128, true, DType::bf16, Layout::BSHD, 2), gemma, kMasks, 2.0f));
  ModifierSpec packed = score_spec(ScoreMod::alibi);
  packed.documents = true;
  CHECK(check(problem(2, 4, 1000, 1000, 64, true), packed, kMasks));
  ModifierSpec prefix_bias = score_spec(ScoreMod::bias);
  prefix_bias.prefix = 100;
  CHECK(check(problem(1, 2, 333, 333, 64, true, DType::f16), prefix_bias, kMasks));
}

TEST_CASE("both kernels: module 07's everywhere, module 09's on Hopper") {
  // forward() runs each call on one of them; here every case runs on both. Module 09's kernel
  // classifies a tile for a warpgroup's 64 rows and stages the bias and T5's values per warp:
  // the shapes put tiles across a warpgroup's rows, seq_k % 8 != 0 and rows past seq_q.
  std::vector<std::pair<Problem, ModifierSpec>> cases;
  ModifierSpec m = score_spec(ScoreMod::alibi);
  cases.push_back({problem(2, 4, 65, 1000, 128, true, DType::bf16, Layout::BSHD, 2), m});
  m = score_spec(ScoreMod::bias);
  cases.push_back({problem(2, 4, 65, 17, 128, true, DType::f16), m});
  m.bias_per_head = false;
  cases.push_back({problem(1, 2, 1000, 1000, 64, false), m});
  m = score_spec(ScoreMod::softcap);
  m.window = 100;
  cases.push_back({problem(1, 4, 333, 4097, 64, true, DType::f16), m});
  m = score_spec(ScoreMod::relative);
  m.prefix = 200;
  cases.push_back({problem(1, 3, 1000, 777, 128, true), m});
  m = {};
  m.window = 17;
  cases.push_back({problem(1, 2, 1000, 65, 64, true), m});  // the first 935 rows: no key
  m = {};
  m.documents = true;  // module 09's kernel: the range of tiles searched by a warp
  cases.push_back({problem(2, 4, 1000, 1000, 128, true), m});
  cases.push_back({problem(1, 2, 333, 4097, 64, false, DType::f16), m});
  m.window = 100;
  cases.push_back({problem(2, 3, 777, 1000, 64, true), m});
  // RoPE (module 09's kernel: K turned by the pass, Q by each consumer warpgroup in shared
  // memory): positions i + seq_k - seq_q below 0, rows past seq_q, 17-row tiles.
  m = {};
  m.rope = RopeStyle::half;
  m.window = 100;
  cases.push_back({problem(2, 3, 1000, 333, 128, true, DType::f16), m});
  m = {};
  m.rope = RopeStyle::interleaved;
  cases.push_back({problem(1, 4, 17, 4097, 64, false), m});
  cases.push_back({problem(2, 2, 333, 1000, 128, true, DType::bf16, Layout::BSHD, 2), m});
  for (m12::Engine e : {m12::Engine::mma, m12::Engine::wgmma}) {
    if (e == m12::Engine::wgmma && !hopper_kernel_runs()) {
      MESSAGE("module 09's kernel not checked: it needs a Hopper GPU and a build with sm_90a "
              "code (this build: " ATTN_MODULE_ARCHITECTURES ")");
      continue;
    }
    for (const auto& [p, spec] : cases)
      CHECK(check(p, spec, kScores, spec.score == ScoreMod::softcap ? 2.0f : 1.0f, e));
  }
}

TEST_CASE("grid: more than 65535 blocks with a window") {
  ModifierSpec m;
  m.window = 2;
  CHECK(check(problem(300, 256, 3, 5, 64, true), m, kMasks));
}

namespace {

// The class a tile has under the rules, by visiting every pair.
int brute_class(const m12::RulesQuestion& r, const m12::TileQuestion& t) {
  bool any = false, all = true;
  for (int pos = t.pos_lo; pos <= t.pos_hi; ++pos)
    for (int j = t.key_lo; j <= t.key_hi; ++j) {
      bool seen;
      if (r.documents) {
        seen = pos == j;  // ids: the rows hold ids pos_lo..pos_hi, the keys key_lo..key_hi
      } else {
        seen = (!r.causal || j <= pos || j < r.prefix) && (r.window == 0 || j > pos - r.window);
      }
      any = any || seen;
      all = all && seen;
    }
  return !any ? m12::kTileMasked : all ? m12::kTileFull : m12::kTilePartial;
}

const char* class_name(int c) {
  return c == m12::kTileMasked ? "masked" : c == m12::kTileFull ? "full" : "partial";
}

}  // namespace

TEST_CASE("tile classification on its own: sound, and exact where the corners decide") {
  std::mt19937 rng(uint32_t(testing::next_seed()));
  std::vector<m12::RulesQuestion> rules = {{1, 0, 0, false},   {1, 0, 64, false},
                                           {1, 100, 0, false}, {1, 0, 1, false},
                                           {0, 0, 0, true}};
  for (const m12::RulesQuestion& r : rules) {
    std::vector<m12::TileQuestion> tiles;
    for (int n = 0; n < 400; ++n) {
      const int pos_lo = int(rng() % 400), key_lo = int(rng() % 400);
      if (r.documents) {  // id ranges of a few documents on each side
        tiles.push_back({pos_lo % 8, pos_lo % 8 + int(rng() % 3), key_lo % 8,
                         key_lo % 8 + int(rng() % 3)});
      } else {
        tiles.push_back({pos_lo, pos_lo + int(rng() % 40), key_lo, key_lo + int(rng() % 70)});
      }
    }
    std::vector<int> got;
    const Status s = m12::ATTN_IMPL::classify_tiles(r, tiles, got);
    REQUIRE_MESSAGE(s.is_ok(), "classify_tiles failed: " << s.message());
    int reported = 0;
    for (size_t n = 0; n < tiles.size() && reported < 3; ++n) {
      const m12::TileQuestion& t = tiles[n];
      const int want = brute_class(r, t);
      // Only a tile that straddles the prefix may be full and still be called partial: the
      // corners do not decide it (some keys are seen for being in the prefix, the others for
      // being behind every position).
      const bool straddles = !r.documents && r.prefix > 0 && t.key_lo < r.prefix &&
                             t.key_hi >= r.prefix;
      const bool ok = got[n] == want ||
                      (want == m12::kTileFull && got[n] == m12::kTilePartial && straddles);
      if (ok) continue;
      ++reported;
      const bool wrong = (got[n] == m12::kTileMasked && want != m12::kTileMasked) ||
                         (got[n] == m12::kTileFull && want != m12::kTileFull);
      FAIL_CHECK((r.documents ? "classify_documents" : "classify")
                 << " of rows " << t.pos_lo << ".." << t.pos_hi << " x keys " << t.key_lo
                 << ".." << t.key_hi << " (causal " << r.causal << ", prefix " << r.prefix
                 << ", window " << r.window << ") gave " << class_name(got[n]) << ", expected "
                 << class_name(want)
                 << (wrong ? ": a wrong answer (visible pairs skipped, or masked pairs left in)"
                           : ": correct but slow (the tile could be skipped or run unmasked)")
                 << "\n  read " << std::string(kMasks));
    }
  }
}

// The layer around attention (README, section 4): one GEMM from the hidden states to Q, K, V
// with RoPE in its epilogue. The reference: the product in double on the same 16-bit inputs,
// then common/modifiers.h's apply_rope (RoPE in double, rounded once to 16 bits, as the fused
// epilogue rounds once).
TEST_CASE("QKV projection with RoPE in the GEMM's epilogue") {
  struct Case {
    int batch, seq, hidden, heads, head_dim;
    RopeStyle style;
  };
  // Odd token counts (partial 128-row tiles), hidden sizes that are not multiples of the
  // 64-wide K slice, one and two heads per 128-column tile, both conventions and none.
  for (const Case c : {Case{3, 17, 72, 3, 64, RopeStyle::interleaved},
                       Case{2, 65, 136, 2, 128, RopeStyle::half},
                       Case{1, 1000, 256, 4, 32, RopeStyle::half},
                       Case{1, 1, 8, 1, 128, RopeStyle::interleaved},
                       Case{4, 33, 64, 5, 64, RopeStyle::none}}) {
    if (testing::run_stopped()) return;
    m12::LayerShape s;
    s.tokens = c.batch * c.seq, s.seq = c.seq, s.hidden = c.hidden, s.heads = c.heads;
    s.head_dim = c.head_dim;
    const int width = c.heads * c.head_dim;
    INFO("tokens " << s.tokens << " (seq " << c.seq << ") hidden " << c.hidden << " heads "
                   << c.heads << " head_dim " << c.head_dim << " rope "
                   << rope_style_name(c.style));
    std::mt19937 rng(uint32_t(testing::next_seed()));
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    const float w_scale = 1.0f / std::sqrt(float(c.hidden));
    std::vector<uint16_t> x(size_t(s.tokens) * c.hidden), w(size_t(3) * width * c.hidden);
    for (auto& e : x) e = to_bits16(unit(rng), s.dtype);
    for (auto& e : w) e = to_bits16(unit(rng) * w_scale, s.dtype);

    // Reference: q, k, v [tokens, heads, head_dim] in double, then RoPE on q and k.
    Problem p = Problem::make(c.batch, c.heads, c.seq, c.seq, c.head_dim, false, Layout::BSHD);
    p.dtype = s.dtype;
    std::vector<float> want[3];
    for (auto& t : want) t.assign(size_t(s.tokens) * width, 0.0f);
    for (int m = 0; m < s.tokens; ++m)
      for (int n = 0; n < 3 * width; ++n) {
        double acc = 0;
        for (int i = 0; i < c.hidden; ++i)
          acc += double(from_bits16(x[size_t(m) * c.hidden + i], s.dtype)) *
                 from_bits16(w[size_t(n) * c.hidden + i], s.dtype);
        want[n / width][size_t(m) * width + n % width] = float(acc);
      }
    ModifierSpec spec;
    spec.rope = c.style;
    apply_rope(p, spec, want[0], want[1]);  // also rounds q and k to 16 bits

    DeviceBuffer<uint16_t> dx(x), dw(w), out[3];
    for (auto& o : out) {
      o = DeviceBuffer<uint16_t>(size_t(s.tokens) * width);
      o.poison();
    }
    const Status st = m12::ATTN_IMPL::qkv_projection(s, c.style, spec.rope_base, dx.get(), dw.get(),
                                                     out[0].get(), out[1].get(), out[2].get(),
                                                     nullptr);
    REQUIRE_MESSAGE(st.is_ok(), "qkv_projection failed: " << st.message());
    const char* names[3] = {"Q", "K", "V"};
    for (int t = 0; t < 3; ++t) {
      std::vector<float> got;
      for (uint16_t b : out[t].to_host()) got.push_back(from_bits16(b, s.dtype));
      const std::vector<double> want_t(want[t].begin(), want[t].end());
      const Comparison r = compare_output(p, got, want_t);
      CHECK_MESSAGE(r.passed(), names[t] << " of the projection: " << r.summary()
                                         << (t < 2 && c.style != RopeStyle::none
                                                 ? "\n  RoPE here uses your rope_pair and "
                                                   "rope_frequency (TODO 5) in the GEMM's epilogue"
                                                 : "")
                                         << "\n  read " << std::string(kRope));
    }
  }
}
