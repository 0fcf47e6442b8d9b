#include "common/problem.h"

#include <cstdint>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

namespace attn {

const char* layout_name(Layout layout) { return layout == Layout::BHSD ? "BHSD" : "BSHD"; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: break;
  }
  return "f32";
}

int dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

bool parse_dtype(const std::string& text, DType* out) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  // The spellings people type: ours, CUDA/CUTLASS's (fp16), NumPy/PyTorch's (float16, half).
  const std::pair<const char*, DType> names[] = {
      {"f32", DType::f32},   {"fp32", DType::f32}, {"float32", DType::f32},
      {"f16", DType::f16},   {"fp16", DType::f16}, {"half", DType::f16}, {"float16", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16}};
  for (const auto& [name, dtype] : names)
    if (lower == name) {
      *out = dtype;
      return true;
    }
  return false;
}

namespace {

Strides dense_strides(Layout layout, int heads, int seq, int head_dim) {
  const int64_t d = head_dim;
  if (layout == Layout::BHSD) return {int64_t(heads) * seq * d, int64_t(seq) * d, d};
  return {int64_t(seq) * heads * d, d, int64_t(heads) * d};  // BSHD
}

int64_t span(const Strides& s, int batch, int heads, int seq, int head_dim) {
  return (batch - 1) * s.batch + (heads - 1) * s.head + (seq - 1) * s.seq + head_dim;
}

}  // namespace

Problem Problem::make(int batch, int heads, int seq_q, int seq_k, int head_dim, bool causal,
                      Layout layout, int kv_heads) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads == 0 ? heads : kv_heads;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.head_dim = head_dim;
  p.causal = causal;
  p.q = p.o = dense_strides(layout, heads, seq_q, head_dim);
  p.k = p.v = dense_strides(layout, p.kv_heads, seq_k, head_dim);
  return p;
}

float Problem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_dim));
}

int64_t Problem::q_elements() const { return span(q, batch, heads, seq_q, head_dim); }
int64_t Problem::kv_elements() const {
  return std::max(span(k, batch, kv_heads, seq_k, head_dim),
                  span(v, batch, kv_heads, seq_k, head_dim));
}
int64_t Problem::o_elements() const { return span(o, batch, heads, seq_q, head_dim); }

int Problem::first_masked_key(int query) const {
  if (!causal) return seq_k;
  const int64_t last = int64_t(query) + (seq_k - seq_q);  // last visible key, may be < 0
  return int(std::clamp<int64_t>(last + 1, 0, seq_k));
}

int64_t Problem::visible_pairs() const {
  if (!causal) return int64_t(seq_q) * seq_k;
  int64_t pairs = 0;
  for (int i = 0; i < seq_q; ++i) pairs += first_masked_key(i);
  return pairs;
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " H=" << heads;
  if (kv_heads != heads) s << " KVH=" << kv_heads;
  s << " Sq=" << seq_q << " Sk=" << seq_k
    << " D=" << head_dim << (causal ? " causal" : "");
  if (dtype != DType::f32) s << " " << dtype_name(dtype);
  return s.str();
}

Status validate(const Problem& p) {
  const auto positive = [](const char* name, int value) -> Status {
    if (value >= 1) return Status::ok();
    return Status::error(std::string(name) + " must be >= 1 (got " + std::to_string(value) + ")");
  };
  for (auto [name, value] : {std::pair{"batch", p.batch}, {"heads", p.heads},
                             {"kv_heads", p.kv_heads}, {"seq_q", p.seq_q}, {"seq_k", p.seq_k},
                             {"head_dim", p.head_dim}})
    if (Status s = positive(name, value); !s) return s;
  if (p.heads % p.kv_heads != 0)
    return Status::error("kv_heads must divide heads (got heads=" + std::to_string(p.heads) +
                         ", kv_heads=" + std::to_string(p.kv_heads) +
                         "): each K/V head serves heads / kv_heads query heads");
  if (p.head_dim > kMaxHeadDim)
    return Status::error("head_dim " + std::to_string(p.head_dim) + " is larger than the " +
                         std::to_string(kMaxHeadDim) + " this course supports");
  if (!std::isfinite(p.scale) || p.scale < 0.0f)
    return Status::error("scale must be a finite number > 0 (or 0 for 1/sqrt(head_dim))");

  // Rows must not overlap: a kernel writes O rows in parallel, and reading overlapping
  // Q/K/V rows would silently change the problem. Row stride >= head_dim, and the head and
  // batch strides must step over whole rows (checked only where that axis has > 1 entry).
  struct Named { const char* name; const Strides& s; int heads, seq; };
  for (const Named& t : {Named{"q", p.q, p.heads, p.seq_q}, Named{"k", p.k, p.kv_heads, p.seq_k},
                         Named{"v", p.v, p.kv_heads, p.seq_k}, Named{"o", p.o, p.heads, p.seq_q}}) {
    if (t.s.seq < p.head_dim && t.seq > 1)
      return Status::error(std::string(t.name) + " sequence stride " + std::to_string(t.s.seq) +
                           " is smaller than head_dim: rows would overlap");
    if ((t.heads > 1 && t.s.head < p.head_dim) || (p.batch > 1 && t.s.batch < p.head_dim) ||
        t.s.seq < 0 || t.s.head < 0 || t.s.batch < 0)
      return Status::error(std::string(t.name) + " head/batch strides overlap rows");
  }

  // Kernels index rows with 32-bit ints (one query per thread, seq < 2^31) and grids with
  // up to 2^31-1 blocks; element offsets are 64-bit. The product is formed in double: with
  // sizes near 2^31 each, batch * heads * seq overflows even 64-bit integers.
  const double rows = double(p.batch) * double(p.heads) * double(std::max(p.seq_q, p.seq_k));
  if (rows > double(std::numeric_limits<int32_t>::max())) {
    std::ostringstream s;
    s.precision(3);
    s << "batch*heads*seq = " << rows << " rows is more than the 2^31-1 (2147483647) a kernel "
      << "can index; split the problem";
    return Status::error(s.str());
  }
  return Status::ok();
}

bool rows_aligned16(const void* base, const Strides& s, int element_bytes) {
  // Row (b, h, i) starts at base + (b*s.batch + h*s.head + i*s.seq) * element_bytes: on a
  // 16-byte boundary for every b, h, i exactly when the base and each stride in bytes are.
  const auto whole = [element_bytes](int64_t stride) { return stride * element_bytes % 16 == 0; };
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && whole(s.seq) && whole(s.head) &&
         whole(s.batch);
}

bool rows_aligned16(const float* base, const Strides& s) {
  return rows_aligned16(static_cast<const void*>(base), s, 4);
}

double attention_flops(const Problem& p) {
  return 4.0 * p.batch * p.heads * double(p.visible_pairs()) * p.head_dim;
}

double attention_bytes_fused(const Problem& p) {
  const double q_rows = double(p.batch) * p.heads * p.seq_q;      // Q read, O written
  const double kv_rows = double(p.batch) * p.kv_heads * p.seq_k;  // K and V read
  return dtype_bytes(p.dtype) * double(p.head_dim) * (2.0 * q_rows + 2.0 * kv_rows);
}

double attention_buffer_bytes(const Problem& p) {
  return dtype_bytes(p.dtype) *
         (double(p.q_elements()) + 2.0 * double(p.kv_elements()) + double(p.o_elements()));
}

double attention_bytes_unfused(const Problem& p) {
  const double bh = double(p.batch) * p.heads;
  const double score_bytes = 4.0;  // S and P in fp32 whatever p.dtype is (see problem.h)
  return attention_bytes_fused(p) + score_bytes * bh * 4.0 * p.seq_q * p.seq_k;
}

Status require_head_dim_at_most(const Problem& p, int max, const char* module, const char* what) {
  if (p.head_dim <= max) return Status::ok();
  return Status::error(std::string(module) + " keeps " + what + " in registers and supports " +
                       "head_dim <= " + std::to_string(max) + " (got " +
                       std::to_string(p.head_dim) + ")");
}

Status require_one_kv_head_per_head(const Problem& p, const char* module) {
  if (p.kv_heads == p.heads) return Status::ok();
  return Status::error(std::string(module) + " reads one K/V head per query head (got heads=" +
                       std::to_string(p.heads) + ", kv_heads=" + std::to_string(p.kv_heads) +
                       "); grouped K/V heads (--kv-heads) come in module 06 (module 05 runs "
                       "them unfused)");
}

}  // namespace attn
