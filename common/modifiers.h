// What real models add to attention (module 12): score modifiers, masks and rotary position
// embeddings (RoPE), on top of the dense Problem of common/problem.h.
//
// The score of query i and key j of head (b, h), in natural-log units, is
//     x = scale * q_i . k_j                      (q, k rotated first when RoPE is on)
//     x = score_mod(x, b, h, i, j)               (one score modifier, or none)
// and key j takes part in query i's softmax iff the mask says it is visible. A query that sees
// no key outputs 0 (never NaN), as in module 04. Positions are bottom-right aligned as the
// causal mask of module 04 is: query i sits at position  i' = i + seq_k - seq_q,  key j at j.
//
// Score modifiers (ModifierSpec::score):
//   alibi     x -= slope(h) * |i' - j|,  slope(h) = 2^(-8 (h + 1) / heads)   (Press et al.)
//   bias      x += bias[b][h][i][j], a tensor in p.dtype (16-bit, as PyTorch's attn_mask
//             must be the query's type) of shape [batch or 1, heads or 1, seq_q, seq_k]: a
//             size-1 axis is broadcast (stride 0); rows are dense (stride seq_k).
//   softcap   x = cap * tanh(x / cap)  (Gemma 2: logits stay in (-cap, cap))
//   relative  x += table[h][t5_bucket(j - i')]  (T5's relative position buckets; table is
//             [heads][rel_buckets] fp32)
// Masks, combined with AND (ModifierSpec + p.causal):
//   causal    j <= i'                                   (p.causal, module 04)
//   prefix    j <= i' or j < prefix   (prefix-LM: the first `prefix` keys are seen by every
//             query; needs p.causal)
//   window    j > i' - window  (with causal: a sliding window of `window` keys ending at i',
//             as Mistral's; needs p.causal)
//   documents seg_q[b][i] == seg_k[b][j]  (packed documents never see each other; segment
//             ids are int32 [batch][seq_q] and [batch][seq_k], never decreasing along a row)
// RoPE (ModifierSpec::rope), applied to q at position i' and to k at position j before the
// product: the pair (x_a, x_b) of frequency m (0 <= m < head_dim / 2) at position pos turns by
// the angle pos * base^(-2m / head_dim):
//   interleaved  pairs (2m, 2m + 1)                   (GPT-J, the RoFormer paper)
//   half         pairs (m, m + head_dim / 2)          (GPT-NeoX, Llama)
//   x_a' = x_a cos - x_b sin,   x_b' = x_a sin + x_b cos.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace attn {

enum class ScoreMod { none, alibi, bias, softcap, relative };
enum class RopeStyle { none, interleaved, half };

const char* score_mod_name(ScoreMod m);   // "none", "alibi", "bias", "softcap", "relative"
const char* rope_style_name(RopeStyle r); // "none", "interleaved", "half"

struct ModifierSpec {
  ScoreMod score = ScoreMod::none;
  // bias: which axes the bias tensor has (false: size 1, broadcast).
  bool bias_per_batch = false;
  bool bias_per_head = true;
  float softcap = 0.0f;  // softcap: the cap (> 0)
  // relative: T5's bucketing (t5_bucket below).
  int rel_buckets = 32;
  int rel_max_distance = 128;
  bool rel_bidirectional = true;

  int prefix = 0;          // > 0: prefix-LM (needs p.causal)
  int window = 0;          // > 0: sliding window (needs p.causal)
  bool documents = false;  // segment ids

  RopeStyle rope = RopeStyle::none;
  double rope_base = 10000.0;

  bool any() const {
    return score != ScoreMod::none || prefix > 0 || window > 0 || documents ||
           rope != RopeStyle::none;
  }
  // "alibi window=1024 rope=half"; "none" when nothing is on. The words, in this order: the
  // score modifier (alibi, bias[B,H] with 1 for a shared axis, softcap=50,
  // relative=32/128 with /unidirectional when one-way), prefix=P, window=W, documents,
  // rope=interleaved|half and rope_base=B when it is not 10000. The CLI prints it and the
  // bench JSON records it per row ("modifiers").
  std::string describe() const;
};

// ALiBi's slope of head h: 2^(-8 (h + 1) / heads).
double alibi_slope(int h, int heads);

// T5's relative position bucket of distance `rel` = j - i' (key position minus query
// position), as in the T5 paper's code (Raffel et al., mesh-tensorflow
// _relative_position_bucket): with `bidirectional`, half the buckets are for keys after the
// query; within each half, distances below max_exact = buckets_half / 2 get their own bucket,
// larger ones share logarithmically wider buckets up to max_distance, and everything beyond
// goes to the last bucket of its half. A large distance n gets bucket max_exact +
// floor(log(n / max_exact) / log(max_distance / max_exact) * (buckets_half - max_exact)),
// the floor of the exact value (where that is a whole number, double rounding is not allowed
// to land one bucket lower). Needs parameters that validate() accepts.
int t5_bucket(int rel, bool bidirectional, int num_buckets, int max_distance);

// One line on a bad combination or value, in the words of the CLI flags, e.g.
//   "--window needs --causal: the window is the last 1024 keys up to the query's position",
//   "--window and --prefix are two masks of the same kind: choose one",
//   "--rope needs an even head_dim (pairs of features turn together), got 59",
//   "--rope half needs head_dim % 16 == 0 (...), got 40", "--softcap must be a finite number
//   > 0 (...), got 0", "--bias needs --dtype f16 or bf16: ...", "--rel-buckets must be even
//   and >= 4 (...)", "--rel-max-distance must be > 8: ...", "--rope-base must be ... > 1".
// The rules: window and prefix need p.causal and exclude each other; documents combine with
// any of them (AND); one score modifier at a time (the enum says so); the problem itself is
// checked by validate(const Problem&).
Status validate(const Problem& p, const ModifierSpec& m);

// The tensors some modifiers read, host side. bias: p.dtype values (rounded) as floats,
// [bias_per_batch ? batch : 1][bias_per_head ? heads : 1][seq_q][seq_k], finite; seg_q/seg_k:
// [batch][seq_q] / [batch][seq_k], never decreasing along a row (packed documents follow one
// another, so a document's keys are an interval: kernels skip tiles by it); rel_table:
// [heads][rel_buckets] fp32. Empty when unused.
struct ModifierInputs {
  std::vector<float> bias;
  std::vector<int32_t> seg_q, seg_k;
  std::vector<float> rel_table;
};
int64_t bias_elements(const Problem& p, const ModifierSpec& m);
// Sizes match what m uses ("the bias holds 10 values, expected 1 x 8 x 64 x 64 = 32768"; a
// tensor m does not use must be empty), bias and table values are finite, segment ids never
// decrease along a row.
Status validate_inputs(const Problem& p, const ModifierSpec& m, const ModifierInputs& in);

// Random inputs for the modifiers m uses, from `seed`: bias uniform in [-2, 2) rounded to
// p.dtype; segment ids nondecreasing, `documents_per_row` documents of random lengths per
// batch entry (the same cut points for queries and keys, bottom-right aligned: query i's
// document is the one holding key position i', the first document for a query before the
// first key); T5 table uniform in [-1, 1). Streams of their own: not Q's, K's or V's numbers.
ModifierInputs random_modifier_inputs(const Problem& p, const ModifierSpec& m, uint64_t seed,
                                      int documents_per_row = 3);

// The double-precision reference with the modifiers: RoPE on q and k (in double), the scores,
// the score modifier, the mask, the stable softmax; fully masked rows give exactly 0. Returns
// O laid out as reference_attention does (p.o strides). Rotated q and k stay in double (not
// rounded). Rows are spread over the CPU's cores. Throws std::invalid_argument when
// validate_inputs(p, m, mi) fails.
std::vector<double> reference_attention(const Problem& p, const ModifierSpec& m,
                                        const ModifierInputs& mi, const std::vector<float>& q,
                                        const std::vector<float>& k,
                                        const std::vector<float>& v);

// Whether key j is visible to query i of batch entry b (the mask rules above): the reference
// and the grader's check of the kernels' tile classification use it.
bool visible(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi, int b, int i,
             int j);

// The keys query i of batch entry b sees, [begin, end): every mask above gives an interval
// (causal or prefix an end, window a beginning, documents the query's document, whose ids are
// contiguous), so the visible keys are one interval, empty when begin == end. The same set as
// visible() (tests/test_modifiers.cpp checks it); kernels classify tiles with such ranges.
struct KeyRange {
  int begin = 0, end = 0;
  int count() const { return end - begin; }
};
KeyRange visible_key_range(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi,
                           int b, int i);

// RoPE applied beforehand (the unfused way): rotates q (positions i') and k (positions j) of
// a problem in double and rounds the result to p.dtype, in place.
void apply_rope(const Problem& p, const ModifierSpec& m, std::vector<float>& q,
                std::vector<float>& k);

// The visible (query, key) pairs per head summed over the batch, for TFLOP/s: what a kernel
// that skips masked work computes.
int64_t visible_pairs(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi);
// 4 * heads * head_dim * visible_pairs: attention_flops (common/problem.h) over the visible
// pairs only. The score modifier and RoPE add a few operations per score or row; they are not
// counted, as the softmax's are not.
double modifier_flops(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi);
// attention_bytes_fused plus what the modifiers read once: the bias (p.dtype), the segment ids
// (int32) and the distance table of the relative modifier (fp32).
double modifier_bytes_fused(const Problem& p, const ModifierSpec& m);

// Device pointers a modifier kernel reads (null when unused), and the per-head distance table
// the relative modifier uses inside the kernel: rel_bias[h][(j - i') + seq_k - 1] =
// table[h][t5_bucket(j - i')], seq_q + seq_k - 1 entries per head (built on the host from
// ModifierInputs::rel_table by relative_bias_by_distance).
struct ModifierTensors {
  const void* bias = nullptr;  // p.dtype
  int64_t bias_batch_stride = 0, bias_head_stride = 0;  // elements; 0 = broadcast
  const int32_t* seg_q = nullptr;
  const int32_t* seg_k = nullptr;
  const float* rel_bias = nullptr;
};
// Empty unless m.score is relative; throws std::invalid_argument when rel_table does not hold
// heads x rel_buckets values.
std::vector<float> relative_bias_by_distance(const Problem& p, const ModifierSpec& m,
                                             const std::vector<float>& rel_table);

}  // namespace attn
