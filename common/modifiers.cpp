#include "common/modifiers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "common/half.h"
#include "common/parallel.h"
#include "common/random.h"

namespace attn {

const char* score_mod_name(ScoreMod m) {
  switch (m) {
    case ScoreMod::alibi: return "alibi";
    case ScoreMod::bias: return "bias";
    case ScoreMod::softcap: return "softcap";
    case ScoreMod::relative: return "relative";
    case ScoreMod::none: break;
  }
  return "none";
}

const char* rope_style_name(RopeStyle r) {
  switch (r) {
    case RopeStyle::interleaved: return "interleaved";
    case RopeStyle::half: return "half";
    case RopeStyle::none: break;
  }
  return "none";
}

std::string ModifierSpec::describe() const {
  std::ostringstream s;
  const auto word = [&s](const std::string& w) { s << (s.tellp() > 0 ? " " : "") << w; };
  switch (score) {
    case ScoreMod::alibi: word("alibi"); break;
    case ScoreMod::bias:
      // The leading axes of the bias tensor: [B,H] per batch entry and head, 1 where shared.
      word(std::string("bias[") + (bias_per_batch ? "B" : "1") + "," + (bias_per_head ? "H" : "1") +
           "]");
      break;
    case ScoreMod::softcap: {
      std::ostringstream cap;
      cap << "softcap=" << softcap;
      word(cap.str());
      break;
    }
    case ScoreMod::relative:
      word("relative=" + std::to_string(rel_buckets) + "/" + std::to_string(rel_max_distance) +
           (rel_bidirectional ? "" : "/unidirectional"));
      break;
    case ScoreMod::none: break;
  }
  if (prefix > 0) word("prefix=" + std::to_string(prefix));
  if (window > 0) word("window=" + std::to_string(window));
  if (documents) word("documents");
  if (rope != RopeStyle::none) {
    word(std::string("rope=") + rope_style_name(rope));
    if (rope_base != 10000.0) {
      std::ostringstream base;
      base << "rope_base=" << rope_base;
      word(base.str());
    }
  }
  return s.tellp() > 0 ? s.str() : "none";
}

double alibi_slope(int h, int heads) { return std::exp2(-8.0 * (h + 1) / heads); }

int t5_bucket(int rel, bool bidirectional, int num_buckets, int max_distance) {
  // T5 measures n = i' - j, how far the key lies before the query.
  int64_t n = -int64_t(rel);
  int bucket = 0;
  int buckets = num_buckets;
  if (bidirectional) {
    buckets /= 2;
    if (n < 0) bucket = buckets;  // the key comes after the query: the upper half
    n = n < 0 ? -n : n;
  } else {
    n = std::max<int64_t>(n, 0);  // every key after the query shares bucket 0
  }
  const int max_exact = buckets / 2;
  if (n < max_exact) return bucket + int(n);
  if (max_exact < 1 || max_distance <= max_exact) return bucket + buckets - 1;  // see validate
  // Logarithmic buckets: max_exact + floor(log(n / max_exact) / log(max_distance / max_exact)
  // * (buckets - max_exact)). Where the exact value is a whole number (n = 16 of 8 exact
  // buckets up to 128: log 2 / log 16 * 8 = 2) rounding in double may land just below it;
  // such values are taken as the whole number, so the bucket is the exact formula's.
  double v = std::log(double(n) / max_exact) / std::log(double(max_distance) / max_exact) *
             (buckets - max_exact);
  if (std::fabs(v - std::nearbyint(v)) < 1e-9) v = std::nearbyint(v);
  v = std::clamp(v, 0.0, double(buckets));  // beyond max_distance: the last bucket (below)
  return bucket + std::min(max_exact + int(std::floor(v)), buckets - 1);
}

Status validate(const Problem& p, const ModifierSpec& m) {
  const auto error = [](const std::string& text) { return Status::error(text); };
  const std::string w = std::to_string(m.window), pre = std::to_string(m.prefix);
  if (m.window < 0) return error("--window must be >= 1 (got " + w + ")");
  if (m.prefix < 0) return error("--prefix must be >= 1 (got " + pre + ")");
  if (m.window > 0 && !p.causal)
    return error("--window needs --causal: the window is the last " + w +
                 " keys up to the query's position");
  if (m.prefix > 0 && !p.causal)
    return error("--prefix needs --causal: every query sees the first " + pre +
                 " keys, and the keys after them causally");
  if (m.window > 0 && m.prefix > 0)
    return error("--window and --prefix are two masks of the same kind: choose one");

  switch (m.score) {
    case ScoreMod::bias:
      if (p.dtype == DType::f32)
        return error("--bias needs --dtype f16 or bf16: the bias tensor has the type of Q, K "
                     "and V (as PyTorch's attn_mask must)");
      break;
    case ScoreMod::softcap:
      if (!std::isfinite(m.softcap) || m.softcap <= 0.0f) {
        std::ostringstream s;
        s << "--softcap must be a finite number > 0 (Gemma 2 uses 50), got " << m.softcap;
        return error(s.str());
      }
      break;
    case ScoreMod::relative: {
      const std::string nb = std::to_string(m.rel_buckets);
      if (m.rel_bidirectional && (m.rel_buckets < 4 || m.rel_buckets % 2 != 0))
        return error("--rel-buckets must be even and >= 4 (half of them for keys after the "
                     "query, half for keys before it; --rel-causal uses all for keys before), "
                     "got " + nb);
      if (!m.rel_bidirectional && m.rel_buckets < 2)
        return error("--rel-buckets must be >= 2 (some exact, some logarithmic), got " + nb);
      const int per_direction = m.rel_bidirectional ? m.rel_buckets / 2 : m.rel_buckets;
      const int exact = per_direction / 2;
      if (m.rel_max_distance <= exact)
        return error("--rel-max-distance must be > " + std::to_string(exact) + ": distances " +
                     "below " + std::to_string(exact) + " have a bucket each (half of the " +
                     std::to_string(per_direction) + " buckets per direction) and the others " +
                     "share logarithmic buckets up to it, got " +
                     std::to_string(m.rel_max_distance));
      break;
    }
    case ScoreMod::alibi:
    case ScoreMod::none: break;
  }

  if (m.rope != RopeStyle::none) {
    if (p.head_dim % 2 != 0)
      return error("--rope needs an even head_dim (pairs of features turn together), got " +
                   std::to_string(p.head_dim));
    if (m.rope == RopeStyle::half && p.head_dim % 16 != 0)
      return error("--rope half needs head_dim % 16 == 0 (feature m turns with m + head_dim/2, "
                   "and the kernel moves each half of a row in 16-byte chunks of 8 values), "
                   "got " + std::to_string(p.head_dim));
    if (!std::isfinite(m.rope_base) || m.rope_base <= 1.0) {
      std::ostringstream s;
      s << "--rope-base must be a finite number > 1 (10000 in RoFormer and Llama 2, 500000 in "
           "Llama 3), got " << m.rope_base;
      return error(s.str());
    }
  }

  // A kernel finds bias[i][j] of one head at i * seq_k + j in 32-bit arithmetic.
  if (m.score == ScoreMod::bias &&
      double(p.seq_q) * double(p.seq_k) > double(std::numeric_limits<int32_t>::max()))
    return error("the bias of one head has seq_q x seq_k = " + std::to_string(int64_t(p.seq_q) *
                 p.seq_k) + " values, more than the 2^31-1 a 32-bit offset reaches: use "
                 "shorter sequences");
  return Status::ok();
}

int64_t bias_elements(const Problem& p, const ModifierSpec& m) {
  if (m.score != ScoreMod::bias) return 0;
  return int64_t(m.bias_per_batch ? p.batch : 1) * (m.bias_per_head ? p.heads : 1) * p.seq_q *
         p.seq_k;
}

namespace {

// `tensor` names it with its verb: "the bias holds", "the query segment ids hold".
Status check_count(const char* tensor, size_t got, int64_t want, const std::string& product) {
  if (int64_t(got) == want) return Status::ok();
  return Status::error(std::string("the ") + tensor + " " + std::to_string(got) +
                       " values, expected " + product + " = " + std::to_string(want));
}

std::string times(std::initializer_list<int64_t> sizes) {
  std::string s;
  for (int64_t n : sizes) s += (s.empty() ? "" : " x ") + std::to_string(n);
  return s;
}

// Packed documents follow one another: the ids along a row never decrease. Kernels rely on it
// (a tile's keys span an interval of ids), and so does visible_key_range.
Status check_segments(const std::vector<int32_t>& ids, int batch, int seq, const char* name) {
  for (int b = 0; b < batch; ++b)
    for (int t = 1; t < seq; ++t) {
      const int32_t before = ids[size_t(b) * seq + t - 1], here = ids[size_t(b) * seq + t];
      if (here < before)
        return Status::error(std::string(name) + "[" + std::to_string(b) + "][" +
                             std::to_string(t) + "] = " + std::to_string(here) +
                             " is smaller than the id before it (" + std::to_string(before) +
                             "): documents are packed one after another, so segment ids "
                             "never decrease along a sequence");
    }
  return Status::ok();
}

}  // namespace

Status validate_inputs(const Problem& p, const ModifierSpec& m, const ModifierInputs& in) {
  const int64_t sq = p.seq_q, sk = p.seq_k;
  if (Status s = check_count(
          "bias holds", in.bias.size(), bias_elements(p, m),
          m.score == ScoreMod::bias
              ? times({m.bias_per_batch ? p.batch : 1, m.bias_per_head ? p.heads : 1, sq, sk})
              : std::string("none (the score modifier is ") + score_mod_name(m.score) + ")");
      !s)
    return s;
  const bool docs = m.documents;
  if (Status s = check_count("query segment ids hold", in.seg_q.size(), docs ? p.batch * sq : 0,
                             docs ? times({p.batch, sq}) : "none (no documents)");
      !s)
    return s;
  if (Status s = check_count("key segment ids hold", in.seg_k.size(), docs ? p.batch * sk : 0,
                             docs ? times({p.batch, sk}) : "none (no documents)");
      !s)
    return s;
  const bool rel = m.score == ScoreMod::relative;
  if (Status s = check_count("relative position table holds", in.rel_table.size(),
                             rel ? int64_t(p.heads) * m.rel_buckets : 0,
                             rel ? times({p.heads, m.rel_buckets}) : "none (not --relative)");
      !s)
    return s;
  const auto bad = std::find_if(in.bias.begin(), in.bias.end(),
                                [](float x) { return !std::isfinite(x); });
  if (bad != in.bias.end())
    return Status::error("bias element " + std::to_string(bad - in.bias.begin()) + " is " +
                         (std::isnan(*bad) ? "NaN" : "infinite") +
                         ": a bias must be finite (hide keys with a mask, or with a large "
                         "negative bias such as -10000)");
  const auto bad_rel = std::find_if(in.rel_table.begin(), in.rel_table.end(),
                                    [](float x) { return !std::isfinite(x); });
  if (bad_rel != in.rel_table.end())
    return Status::error("relative position table element " +
                         std::to_string(bad_rel - in.rel_table.begin()) + " is not finite");
  if (docs) {
    if (Status s = check_segments(in.seg_q, p.batch, p.seq_q, "seg_q"); !s) return s;
    if (Status s = check_segments(in.seg_k, p.batch, p.seq_k, "seg_k"); !s) return s;
  }
  return Status::ok();
}

ModifierInputs random_modifier_inputs(const Problem& p, const ModifierSpec& m, uint64_t seed,
                                      int documents_per_row) {
  ModifierInputs in;
  // Streams of their own: the same seed must not give the bias Q's numbers (random_inputs
  // draws Q, K, V from seed * 3 + 0, 1, 2).
  const uint64_t base = seed * 7 + 0x6d6f6469ull;
  if (m.score == ScoreMod::bias) {
    in.bias.resize(size_t(bias_elements(p, m)));
    fill_uniform(in.bias, base + 0, -2.0f, 2.0f);
    round_to_dtype(in.bias, p.dtype);
  }
  if (m.score == ScoreMod::relative) {
    in.rel_table.resize(size_t(p.heads) * m.rel_buckets);
    fill_uniform(in.rel_table, base + 1, -1.0f, 1.0f);
  }
  if (m.documents) {
    // Per batch entry, documents_per_row - 1 distinct cut points among key positions
    // 1 .. seq_k - 1: key j's id is the number of cuts at or before it.
    Rng rng(base + 2);
    in.seg_k.resize(size_t(p.batch) * p.seq_k);
    in.seg_q.resize(size_t(p.batch) * p.seq_q);
    const int cuts = std::max(0, std::min(documents_per_row - 1, p.seq_k - 1));
    std::vector<int> positions(size_t(std::max(p.seq_k - 1, 0)));
    for (int b = 0; b < p.batch; ++b) {
      std::iota(positions.begin(), positions.end(), 1);
      for (int c = 0; c < cuts; ++c) {  // the first `cuts` entries of a random shuffle
        const size_t pick = c + size_t(rng.next_u64() % uint64_t(positions.size() - c));
        std::swap(positions[size_t(c)], positions[pick]);
      }
      std::vector<int> chosen(positions.begin(), positions.begin() + cuts);
      std::sort(chosen.begin(), chosen.end());
      int32_t* key_ids = in.seg_k.data() + size_t(b) * p.seq_k;
      for (int j = 0, id = 0; j < p.seq_k; ++j) {
        while (id < cuts && chosen[size_t(id)] <= j) ++id;
        key_ids[j] = id;
      }
      // Query i sits at key position i' = i + seq_k - seq_q; one before the first key (seq_q
      // > seq_k) belongs to the first document.
      for (int i = 0; i < p.seq_q; ++i)
        in.seg_q[size_t(b) * p.seq_q + i] = key_ids[std::max(i + p.seq_k - p.seq_q, 0)];
    }
  }
  return in;
}

bool visible(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi, int b, int i,
             int j) {
  const int64_t pos = int64_t(i) + p.seq_k - p.seq_q;  // the query's position i'
  // causal, or prefix-LM: the first `prefix` keys are open to every query.
  if (p.causal && !(j <= pos || j < m.prefix)) return false;
  if (m.window > 0 && j <= pos - m.window) return false;  // older than the window
  if (m.documents &&
      mi.seg_q[size_t(b) * p.seq_q + i] != mi.seg_k[size_t(b) * p.seq_k + j])
    return false;
  return true;
}

KeyRange visible_key_range(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi,
                           int b, int i) {
  const int64_t pos = int64_t(i) + p.seq_k - p.seq_q;
  int64_t begin = 0, end = p.seq_k;
  // Causal keys are [0, pos]; a prefix adds [0, prefix): together [0, max(pos + 1, prefix)).
  if (p.causal) end = std::min(end, std::max<int64_t>(pos + 1, m.prefix));
  if (m.window > 0) begin = std::max(begin, pos - m.window + 1);
  if (m.documents) {
    // The ids never decrease (validate_inputs), so one document's keys are an interval.
    const int32_t* keys = mi.seg_k.data() + size_t(b) * p.seq_k;
    const auto [first, last] =
        std::equal_range(keys, keys + p.seq_k, mi.seg_q[size_t(b) * p.seq_q + i]);
    begin = std::max<int64_t>(begin, first - keys);
    end = std::min<int64_t>(end, last - keys);
  }
  end = std::clamp<int64_t>(end, 0, p.seq_k);
  begin = std::clamp<int64_t>(begin, 0, end);
  return {int(begin), int(end)};
}

int64_t visible_pairs(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi) {
  int64_t pairs = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.seq_q; ++i) pairs += visible_key_range(p, m, mi, b, i).count();
  return pairs;
}

double modifier_flops(const Problem& p, const ModifierSpec& m, const ModifierInputs& mi) {
  return 4.0 * p.heads * double(visible_pairs(p, m, mi)) * p.head_dim;
}

double modifier_bytes_fused(const Problem& p, const ModifierSpec& m) {
  double bytes = attention_bytes_fused(p) + double(dtype_bytes(p.dtype)) * bias_elements(p, m);
  if (m.documents) bytes += 4.0 * p.batch * (double(p.seq_q) + p.seq_k);
  if (m.score == ScoreMod::relative) bytes += 4.0 * p.heads * (double(p.seq_q) + p.seq_k - 1);
  return bytes;
}

namespace {

// Turns the pairs of one row of head_dim features (the feature pairs of `style`) by the
// angles pos * base^(-2f / head_dim), in double; `out` gets the rotated row.
void rotate_row(const float* x, int d, double pos, RopeStyle style, double base, double* out) {
  for (int c = 0; c < d; ++c) out[c] = x[c];
  for (int f = 0; f < d / 2; ++f) {
    const int a = style == RopeStyle::interleaved ? 2 * f : f;
    const int b = style == RopeStyle::interleaved ? 2 * f + 1 : f + d / 2;
    const double angle = pos * std::pow(base, -2.0 * f / d);
    const double c = std::cos(angle), s = std::sin(angle);
    out[a] = double(x[a]) * c - double(x[b]) * s;
    out[b] = double(x[a]) * s + double(x[b]) * c;
  }
}

}  // namespace

void apply_rope(const Problem& p, const ModifierSpec& m, std::vector<float>& q,
                std::vector<float>& k) {
  if (m.rope == RopeStyle::none) return;
  std::vector<double> row(size_t(p.head_dim));
  const auto rotate = [&](std::vector<float>& t, const Strides& s, int heads, int seq, int shift) {
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < seq; ++i) {
          float* x = t.data() + Problem::offset(s, b, h, i);
          rotate_row(x, p.head_dim, double(i) + shift, m.rope, m.rope_base, row.data());
          for (int c = 0; c < p.head_dim; ++c) x[c] = round_to_dtype(float(row[c]), p.dtype);
        }
  };
  rotate(q, p.q, p.heads, p.seq_q, p.seq_k - p.seq_q);  // queries at i' = i + seq_k - seq_q
  rotate(k, p.k, p.kv_heads, p.seq_k, 0);               // keys at j
}

std::vector<double> reference_attention(const Problem& p, const ModifierSpec& m,
                                        const ModifierInputs& mi, const std::vector<float>& q,
                                        const std::vector<float>& k,
                                        const std::vector<float>& v) {
  if (Status s = validate_inputs(p, m, mi); !s)
    throw std::invalid_argument("reference_attention: " + s.message());
  const int d = p.head_dim;
  const int shift = p.seq_k - p.seq_q;  // query i sits at position i + shift
  const double scale = p.softmax_scale();

  // With RoPE, every key row turned once, in double (the products below use these values).
  std::vector<double> k_turned;
  if (m.rope != RopeStyle::none) {
    k_turned.assign(size_t(p.kv_elements()), 0.0);
    const int64_t key_rows = int64_t(p.batch) * p.kv_heads * p.seq_k;
    parallel_rows(key_rows, d, [&](int64_t first, int64_t stride) {
      for (int64_t r = first; r < key_rows; r += stride) {
        const int j = int(r % p.seq_k), kvh = int((r / p.seq_k) % p.kv_heads);
        const int b = int(r / (int64_t(p.seq_k) * p.kv_heads));
        const int64_t at = Problem::offset(p.k, b, kvh, j);
        rotate_row(k.data() + at, d, j, m.rope, m.rope_base, k_turned.data() + at);
      }
    });
  }
  // T5's bucket of each distance j - i', from -(seq_k - 1) to seq_q - 1.
  std::vector<int> bucket_of;
  if (m.score == ScoreMod::relative)
    for (int rel = -(p.seq_k - 1); rel <= p.seq_q - 1; ++rel)
      bucket_of.push_back(t5_bucket(rel, m.rel_bidirectional, m.rel_buckets, m.rel_max_distance));
  const int64_t bias_head_stride = int64_t(p.seq_q) * p.seq_k;
  const int64_t bias_batch_stride = (m.bias_per_head ? p.heads : 1) * bias_head_stride;

  std::vector<double> o(size_t(p.o_elements()), 0.0);
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  parallel_rows(rows, int64_t(p.seq_k) * d, [&](int64_t first, int64_t stride) {
    std::vector<double> scores(static_cast<size_t>(p.seq_k)), qi(static_cast<size_t>(d));
    std::vector<int> keys;  // the visible keys of the row
    for (int64_t r = first; r < rows; r += stride) {
      const int i = int(r % p.seq_q), h = int((r / p.seq_q) % p.heads);
      const int b = int(r / (int64_t(p.seq_q) * p.heads));
      const int kvh = p.kv_head(h);
      const int64_t pos = int64_t(i) + shift;
      const float* q_row = q.data() + Problem::offset(p.q, b, h, i);
      if (m.rope != RopeStyle::none)
        rotate_row(q_row, d, double(pos), m.rope, m.rope_base, qi.data());
      else
        std::copy(q_row, q_row + d, qi.begin());
      double* out = o.data() + Problem::offset(p.o, b, h, i);

      keys.clear();
      double row_max = -INFINITY;
      for (int j = 0; j < p.seq_k; ++j) {
        if (!visible(p, m, mi, b, i, j)) continue;
        const int64_t at = Problem::offset(p.k, b, kvh, j);
        double dot = 0.0;
        if (m.rope != RopeStyle::none)
          for (int c = 0; c < d; ++c) dot += qi[c] * k_turned[size_t(at + c)];
        else
          for (int c = 0; c < d; ++c) dot += qi[c] * double(k[size_t(at + c)]);
        double x = scale * dot;
        switch (m.score) {
          case ScoreMod::alibi:
            x -= alibi_slope(h, p.heads) * double(std::llabs(pos - j));
            break;
          case ScoreMod::bias:
            x += mi.bias[size_t((m.bias_per_batch ? b : 0) * bias_batch_stride +
                                (m.bias_per_head ? h : 0) * bias_head_stride +
                                int64_t(i) * p.seq_k + j)];
            break;
          case ScoreMod::softcap:
            x = m.softcap * std::tanh(x / m.softcap);
            break;
          case ScoreMod::relative:
            x += mi.rel_table[size_t(h) * m.rel_buckets +
                              bucket_of[size_t(j - pos + (p.seq_k - 1))]];
            break;
          case ScoreMod::none: break;
        }
        keys.push_back(j);
        scores[size_t(j)] = x;
        row_max = std::max(row_max, x);
      }
      if (keys.empty()) continue;  // sees no key: exactly 0 (o starts as 0)
      double sum = 0.0;
      for (int j : keys) {
        scores[size_t(j)] = std::exp(scores[size_t(j)] - row_max);  // <= 1: never overflows
        sum += scores[size_t(j)];
      }
      for (int j : keys) {
        const float* vj = v.data() + Problem::offset(p.v, b, kvh, j);
        const double weight = scores[size_t(j)] / sum;
        for (int c = 0; c < d; ++c) out[c] += weight * double(vj[c]);
      }
    }
  });
  return o;
}

std::vector<float> relative_bias_by_distance(const Problem& p, const ModifierSpec& m,
                                             const std::vector<float>& rel_table) {
  if (m.score != ScoreMod::relative) return {};
  if (int64_t(rel_table.size()) != int64_t(p.heads) * m.rel_buckets)
    throw std::invalid_argument("relative_bias_by_distance: the table holds " +
                                std::to_string(rel_table.size()) + " values, expected heads x "
                                "rel_buckets = " + std::to_string(int64_t(p.heads) * m.rel_buckets));
  const int distances = p.seq_q + p.seq_k - 1;
  std::vector<float> by_distance(size_t(p.heads) * distances);
  for (int h = 0; h < p.heads; ++h)
    for (int at = 0; at < distances; ++at) {
      const int rel = at - (p.seq_k - 1);  // j - i'
      by_distance[size_t(h) * distances + at] =
          rel_table[size_t(h) * m.rel_buckets +
                    t5_bucket(rel, m.rel_bidirectional, m.rel_buckets, m.rel_max_distance)];
    }
  return by_distance;
}

}  // namespace attn
