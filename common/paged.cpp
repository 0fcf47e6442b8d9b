#include "common/paged.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/half.h"
#include "common/parallel.h"
#include "common/random.h"

namespace attn {

namespace {

constexpr double kInt32Max = double(std::numeric_limits<int32_t>::max());

// Keys [0, this) of a sequence with seq_q queries and seq_k keys are visible to query i.
// Causal attention aligns the last query with the last key (bottom-right, module 04): query i
// sits at position seq_k - seq_q + i and sees the keys up to it. A query whose position is
// before the first key sees none.
int visible_of(int seq_q, int seq_k, int i, bool causal) {
  if (!causal) return std::max(seq_k, 0);
  const int64_t last = int64_t(seq_k) - seq_q + i;  // last visible key, may be < 0
  return int(std::clamp<int64_t>(last + 1, 0, std::max(seq_k, 0)));
}

std::string lengths_text(const std::vector<int>& lengths) {
  std::ostringstream s;
  if (lengths.size() <= 8) {
    s << "[";
    for (size_t i = 0; i < lengths.size(); ++i) s << (i ? "," : "") << lengths[i];
    s << "]";
    return s.str();
  }
  const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
  const double mean =
      std::accumulate(lengths.begin(), lengths.end(), 0.0) / double(lengths.size());
  s << "[min " << *lo << " mean " << std::llround(mean) << " max " << *hi << "]";
  return s.str();
}

// The checks dense problems share (problem.cpp's validate says the same things).
Status check_heads(int heads, int kv_heads, int head_dim, float scale) {
  for (auto [name, value] :
       {std::pair{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", head_dim}})
    if (value < 1)
      return Status::error(std::string(name) + " must be >= 1 (got " + std::to_string(value) +
                           ")");
  if (heads % kv_heads != 0)
    return Status::error("kv_heads must divide heads (got heads=" + std::to_string(heads) +
                         ", kv_heads=" + std::to_string(kv_heads) +
                         "): each K/V head serves heads / kv_heads query heads");
  if (head_dim > kMaxHeadDim)
    return Status::error("head_dim " + std::to_string(head_dim) + " is out of range: use 1 to " +
                         std::to_string(kMaxHeadDim));
  if (!std::isfinite(scale) || scale < 0.0f)
    return Status::error("scale must be a finite number > 0 (or 0 for 1/sqrt(head_dim))");
  return Status::ok();
}

Status check_lengths(const std::vector<int>& lengths, const char* what) {
  for (size_t b = 0; b < lengths.size(); ++b)
    if (lengths[b] < 0)
      return Status::error("sequence " + std::to_string(b) + " has a negative " + what +
                           " length (" + std::to_string(lengths[b]) +
                           "): lengths are >= 0 (0 is an empty sequence)");
  return Status::ok();
}

// Kernels index elements with 32-bit ints (a page's offset, a packed row's offset), so every
// tensor must have fewer than 2^31 elements. The count is formed in double: the product of
// sizes near 2^31 overflows even 64-bit integers.
Status check_elements(const char* tensor, double elements, const char* product, const char* fix) {
  if (elements <= kInt32Max) return Status::ok();
  std::ostringstream s;
  s.precision(3);
  s << tensor << " has " << elements << " elements (" << product
    << "), more than the 2^31-1 a 32-bit element offset reaches: " << fix;
  return Status::error(s.str());
}

Status check_size(const char* tensor, size_t got, int64_t want, const std::string& product) {
  if (int64_t(got) == want) return Status::ok();
  return Status::error(std::string(tensor) + " holds " + std::to_string(got) +
                       " values, expected " + product + " = " + std::to_string(want));
}

// One output row in double precision, from first principles: scores s_j = scale * q . k_j over
// the visible keys, the softmax with the row max subtracted (every exp is then <= 1, so no
// overflow however large the logits), and the weighted sum of the value rows. key(j) and
// value(j) point at row j of the sequence wherever it lives (a cache page, a packed tensor).
// A row that sees no key is 0: the softmax over nothing is defined so.
template <class KeyRow, class ValueRow>
void attend_row(const float* q, int visible, int d, double scale, KeyRow key, ValueRow value,
                std::vector<double>& scores, double* out) {
  std::fill(out, out + d, 0.0);
  if (visible <= 0) return;
  scores.resize(size_t(visible));
  double row_max = -INFINITY;
  for (int j = 0; j < visible; ++j) {
    const float* kj = key(j);
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += double(q[c]) * double(kj[c]);
    scores[j] = scale * dot;
    row_max = std::max(row_max, scores[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < visible; ++j) {
    scores[j] = std::exp(scores[j] - row_max);
    sum += scores[j];
  }
  for (int j = 0; j < visible; ++j) {
    const float* vj = value(j);
    const double weight = scores[j] / sum;
    for (int c = 0; c < d; ++c) out[c] += weight * double(vj[c]);
  }
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// PagedProblem

PagedProblem PagedProblem::make(int heads, int kv_heads, int head_dim, int seq_q,
                                std::vector<int> seqlens_k, int page_size, bool causal,
                                DType dtype) {
  PagedProblem p;
  p.batch = int(seqlens_k.size());
  p.heads = heads;
  p.kv_heads = kv_heads == 0 ? heads : kv_heads;
  p.head_dim = head_dim;
  p.seq_q = seq_q;
  p.seqlens_k = std::move(seqlens_k);
  p.page_size = page_size;
  p.causal = causal;
  p.dtype = dtype;
  // The pool holds exactly the pages the sequences use; the table is as wide as the longest
  // sequence needs. validate() reports a bad page size or a negative length.
  int64_t pages = 0;
  for (int b = 0; b < p.batch; ++b) {
    p.pages_per_seq = std::max(p.pages_per_seq, p.pages_of(b));
    pages += p.pages_of(b);
  }
  p.num_pages = int(std::min<int64_t>(pages, std::numeric_limits<int>::max()));
  return p;
}

float PagedProblem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_dim));
}

int PagedProblem::max_seqlen_k() const {
  return seqlens_k.empty() ? 0 : *std::max_element(seqlens_k.begin(), seqlens_k.end());
}

int64_t PagedProblem::total_keys() const {
  return std::accumulate(seqlens_k.begin(), seqlens_k.end(), int64_t(0));
}

int PagedProblem::pages_of(int b) const {
  const int length = seqlens_k[size_t(b)];
  if (length <= 0 || page_size <= 0) return 0;
  return int((int64_t(length) + page_size - 1) / page_size);
}

int PagedProblem::visible_keys(int b, int i) const {
  return visible_of(seq_q, seqlens_k[size_t(b)], i, causal);
}

int64_t PagedProblem::q_elements() const { return int64_t(batch) * seq_q * heads * head_dim; }
int64_t PagedProblem::cache_elements() const {
  return int64_t(num_pages) * page_size * kv_heads * head_dim;
}
int64_t PagedProblem::table_elements() const { return int64_t(batch) * pages_per_seq; }

std::string PagedProblem::describe() const {
  std::ostringstream s;
  s << "decode B=" << batch << " H=" << heads;
  if (kv_heads != heads) s << " KVH=" << kv_heads;
  s << " D=" << head_dim << " Sq=" << seq_q << " Sk=" << lengths_text(seqlens_k)
    << " page=" << page_size << (causal ? " causal" : "") << " " << dtype_name(dtype);
  return s.str();
}

Status validate(const PagedProblem& p) {
  if (p.batch < 1 || p.seqlens_k.empty())
    return Status::error("a decode batch needs at least one sequence: give its lengths "
                         "(e.g. --seqlens-k 1,17,4096)");
  if (int64_t(p.seqlens_k.size()) != p.batch)
    return Status::error("seqlens_k has " + std::to_string(p.seqlens_k.size()) +
                         " lengths for batch " + std::to_string(p.batch) +
                         ": give one length per sequence");
  if (Status s = check_heads(p.heads, p.kv_heads, p.head_dim, p.scale); !s) return s;
  if (p.seq_q < 1)
    return Status::error("seq_q (new query tokens per sequence) must be >= 1 (got " +
                         std::to_string(p.seq_q) + ")");
  if (!is_power_of_two(p.page_size) || p.page_size > PagedProblem::kMaxPageSize)
    return Status::error("page size " + std::to_string(p.page_size) +
                         " is not supported: use a power of two from 1 to " +
                         std::to_string(PagedProblem::kMaxPageSize));
  if (Status s = check_lengths(p.seqlens_k, "key"); !s) return s;
  if (p.pages_per_seq < 0 || p.num_pages < 0)
    return Status::error("the block table width and the pool size must be >= 0 (got " +
                         std::to_string(p.pages_per_seq) + " and " +
                         std::to_string(p.num_pages) + " pages)");
  for (int b = 0; b < p.batch; ++b) {
    if (p.pages_of(b) > p.pages_per_seq)
      return Status::error("sequence " + std::to_string(b) + " has " +
                           std::to_string(p.seqlens_k[size_t(b)]) +
                           " keys, more than its table row of " +
                           std::to_string(p.pages_per_seq) + " pages x " +
                           std::to_string(p.page_size) +
                           " tokens holds: widen the block table or use larger pages");
    // A sequence's pages are distinct (two positions never share a row), so the pool holds
    // at least the longest sequence's pages; sequences may share pages (a common prefix).
    if (p.pages_of(b) > p.num_pages)
      return Status::error("sequence " + std::to_string(b) + " needs " +
                           std::to_string(p.pages_of(b)) + " pages of " +
                           std::to_string(p.page_size) + " tokens, more than the " +
                           std::to_string(p.num_pages) + " pages of the cache pool");
  }
  const double d = p.head_dim;
  if (Status s = check_elements("Q", double(p.batch) * p.seq_q * p.heads * d,
                                "batch x seq_q x heads x head_dim", "use a smaller batch");
      !s)
    return s;
  // A cache of many GB passes 2^31 elements: kernels address it with 64-bit offsets from a
  // 32-bit page number (num_pages <= 2^31 - 1 holds by its type); each sequence's key
  // positions stay 32-bit.
  return check_elements("the block table", double(p.batch) * p.pages_per_seq,
                        "batch x pages_per_seq", "use a smaller batch or larger pages");
}

Status validate_block_table(const PagedProblem& p, const std::vector<int32_t>& table) {
  if (int64_t(table.size()) != p.table_elements())
    return Status::error("the block table has " + std::to_string(table.size()) +
                         " entries, expected batch x pages_per_seq = " +
                         std::to_string(p.batch) + " x " + std::to_string(p.pages_per_seq) +
                         " = " + std::to_string(p.table_elements()));
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.pages_of(b); ++j) {
      const int32_t page = table[size_t(int64_t(b) * p.pages_per_seq + j)];
      const std::string entry = "block_table[" + std::to_string(b) + "][" + std::to_string(j) +
                                "] = " + std::to_string(page);
      if (page >= p.num_pages)
        return Status::error(entry + " points past the cache (" + std::to_string(p.num_pages) +
                             " pages)");
      if (page < 0)
        return Status::error(entry + " is not a page, yet sequence " + std::to_string(b) +
                             "'s " + std::to_string(p.seqlens_k[size_t(b)]) + " keys use " +
                             std::to_string(p.pages_of(b)) +
                             " entries: entries in use must be pages in [0, " +
                             std::to_string(p.num_pages) + ")");
    }
  return Status::ok();
}

Status validate_inputs(const PagedProblem& p, const PagedInputs& in) {
  if (Status s = check_size("Q", in.q.size(), p.q_elements(), "batch x seq_q x heads x head_dim");
      !s)
    return s;
  for (auto [name, cache] : {std::pair{"the K cache", &in.k_cache}, {"the V cache", &in.v_cache}})
    if (Status s = check_size(name, cache->size(), p.cache_elements(),
                              "pages x page_size x kv_heads x head_dim");
        !s)
      return s;
  return validate_block_table(p, in.block_table);
}

void round_inputs(PagedInputs& in, DType t) {
  round_to_dtype(in.q, t);
  round_to_dtype(in.k_cache, t);
  round_to_dtype(in.v_cache, t);
}

double paged_bytes(const PagedProblem& p) {
  // K/V rows a sequence's queries see between them: the last query sees the most (all of
  // them, causal or not), so every visible row is read once.
  double kv_rows = 0.0;
  for (int b = 0; b < p.batch; ++b) kv_rows += p.visible_keys(b, p.seq_q - 1);
  const double q_rows = double(p.batch) * p.seq_q * p.heads;  // Q read, O written
  return dtype_bytes(p.dtype) * double(p.head_dim) *
         (2.0 * q_rows + 2.0 * kv_rows * p.kv_heads);
}

double paged_flops(const PagedProblem& p) {
  double pairs = 0.0;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.seq_q; ++i) pairs += p.visible_keys(b, i);
  return 4.0 * p.heads * pairs * p.head_dim;
}

std::vector<int32_t> make_block_table(const PagedProblem& p, bool shuffle, uint64_t seed) {
  // The pool's pages in the order they are handed out: 0, 1, 2, ... or a random permutation
  // (Fisher-Yates), so that a sequence's pages are scattered over the pool as they are in a
  // serving engine after many sequences came and went.
  std::vector<int32_t> pool(size_t(std::max(p.num_pages, 0)));
  std::iota(pool.begin(), pool.end(), 0);
  if (shuffle) {
    Rng rng(seed ^ 0x7AB1E5EEDull);  // a stream of its own: not the one Q is drawn from
    for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng.next_u64() % i]);
  }
  std::vector<int32_t> table(size_t(std::max<int64_t>(p.table_elements(), 0)), -1);
  // Handed out in turn; a pool smaller than all sequences' pages together wraps around, so
  // that sequences share pages but every entry stays in range and a sequence's own pages stay
  // distinct (validate() guarantees each sequence fits in the pool).
  size_t next = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.pages_of(b) && !pool.empty(); ++j)
      table[size_t(int64_t(b) * p.pages_per_seq + j)] = pool[next++ % pool.size()];
  return table;
}

std::vector<int> random_seqlens(int count, int max_len, uint64_t seed) {
  if (count < 0 || max_len < 0)
    throw std::invalid_argument("random_seqlens: count and max_len must be >= 0");
  Rng rng(seed);
  std::vector<int> lengths(static_cast<size_t>(count));
  for (int& n : lengths) n = int(rng.next_u64() % (uint64_t(max_len) + 1));
  return lengths;
}

Status parse_seqlens(const std::string& text, std::vector<int>* out) {
  const auto blank = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
  };
  if (blank(text))
    return Status::error("no sequence lengths given: write them as 1,17,4096");
  std::vector<int> lengths;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    const std::string number = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(number.c_str(), &end, 10);
    if (number.empty() || *end != '\0')
      return Status::error("'" + number + "' in '" + text +
                           "' is not a sequence length: write whole numbers >= 0 separated by "
                           "commas, e.g. 1,17,4096");
    if (n < 0)
      return Status::error("sequence " + std::to_string(lengths.size()) +
                           " has a negative length (" + number + "): lengths are >= 0");
    if (errno == ERANGE || n > std::numeric_limits<int>::max())
      return Status::error("sequence length " + number + " is too large (at most " +
                           std::to_string(std::numeric_limits<int>::max()) + ")");
    lengths.push_back(int(n));
  }
  // getline drops a trailing empty item: "1,2," would read as "1,2".
  if (text.back() == ',')
    return Status::error("'" + text + "' ends with a comma: write whole numbers >= 0 separated "
                         "by commas, e.g. 1,17,4096");
  *out = std::move(lengths);
  return Status::ok();
}

PagedInputs random_paged_inputs(const PagedProblem& p, uint64_t seed, bool shuffle_pages,
                                float range) {
  PagedInputs in;
  in.seed = seed;
  in.q.resize(size_t(p.q_elements()));
  // The whole pool, pages no sequence uses and rows past a sequence's end included: a kernel
  // that reads them mixes real numbers into its answer and fails the check, where zeros
  // (or a fresh allocation's leftovers) might pass by luck.
  in.k_cache.resize(size_t(p.cache_elements()));
  in.v_cache.resize(size_t(p.cache_elements()));
  // As random_inputs (common/runner.cpp): a stream per tensor, V in [-1, 1).
  fill_uniform(in.q, seed * 3 + 0, -range, range);
  fill_uniform(in.k_cache, seed * 3 + 1, -range, range);
  fill_uniform(in.v_cache, seed * 3 + 2, -1.0f, 1.0f);
  round_inputs(in, p.dtype);
  in.block_table = make_block_table(p, shuffle_pages, seed);
  return in;
}

std::vector<double> paged_reference(const PagedProblem& p, const PagedInputs& in) {
  if (Status s = validate_inputs(p, in); !s) throw std::invalid_argument(s.message());
  const int d = p.head_dim;
  const double scale = p.softmax_scale();
  std::vector<double> o(size_t(p.q_elements()), 0.0);
  // Row r of Q and O is (b, i, h) in [batch, seq_q, heads] order.
  const int64_t rows = int64_t(p.batch) * p.seq_q * p.heads;
  const int64_t mean_keys = p.total_keys() / std::max(p.batch, 1);
  parallel_rows(rows, mean_keys * d, [&](int64_t first, int64_t stride) {
    std::vector<double> scores;
    for (int64_t r = first; r < rows; r += stride) {
      const int h = int(r % p.heads);
      const int i = int((r / p.heads) % p.seq_q);
      const int b = int(r / (int64_t(p.heads) * p.seq_q));
      const int kvh = p.kv_head(h);
      const int32_t* pages = in.block_table.data() + int64_t(b) * p.pages_per_seq;
      // Token j of the sequence: row j % page_size of page pages[j / page_size].
      const auto row = [&](const std::vector<float>& cache, int j) {
        const int64_t token = int64_t(pages[j / p.page_size]) * p.page_size + j % p.page_size;
        return cache.data() + (token * p.kv_heads + kvh) * d;
      };
      attend_row(
          in.q.data() + r * d, p.visible_keys(b, i), d, scale,
          [&](int j) { return row(in.k_cache, j); }, [&](int j) { return row(in.v_cache, j); },
          scores, o.data() + r * d);
    }
  });
  return o;
}

// ---------------------------------------------------------------------------------------------
// VarlenProblem

VarlenProblem VarlenProblem::make(int heads, int kv_heads, int head_dim,
                                  std::vector<int> seqlens_q, std::vector<int> seqlens_k,
                                  bool causal, DType dtype) {
  VarlenProblem p;
  p.heads = heads;
  p.kv_heads = kv_heads == 0 ? heads : kv_heads;
  p.head_dim = head_dim;
  p.seqlens_q = std::move(seqlens_q);
  p.seqlens_k = std::move(seqlens_k);
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

float VarlenProblem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_dim));
}

namespace {
std::vector<int32_t> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); ++b) cu[b + 1] = int32_t(int64_t(cu[b]) + lengths[b]);
  return cu;
}
int max_of(const std::vector<int>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}
}  // namespace

std::vector<int32_t> VarlenProblem::cu_seqlens_q() const { return prefix_sums(seqlens_q); }
std::vector<int32_t> VarlenProblem::cu_seqlens_k() const { return prefix_sums(seqlens_k); }
int64_t VarlenProblem::total_q() const {
  return std::accumulate(seqlens_q.begin(), seqlens_q.end(), int64_t(0));
}
int64_t VarlenProblem::total_k() const {
  return std::accumulate(seqlens_k.begin(), seqlens_k.end(), int64_t(0));
}
int VarlenProblem::max_seqlen_q() const { return max_of(seqlens_q); }
int VarlenProblem::max_seqlen_k() const { return max_of(seqlens_k); }

int VarlenProblem::visible_keys(int b, int i) const {
  return visible_of(seqlens_q[size_t(b)], seqlens_k[size_t(b)], i, causal);
}

Problem VarlenProblem::sequence(int b) const {
  // A packed tensor is [total, heads, d]: token after token with the heads interleaved, which
  // is BSHD with batch 1. The caller offsets the base pointers by the sequence's first row.
  Problem p = Problem::make(1, heads, seqlens_q[size_t(b)], seqlens_k[size_t(b)], head_dim,
                            causal, Layout::BSHD, kv_heads);
  p.scale = scale;
  p.dtype = dtype;
  return p;
}

std::string VarlenProblem::describe() const {
  std::ostringstream s;
  s << "prefill B=" << batch() << " H=" << heads;
  if (kv_heads != heads) s << " KVH=" << kv_heads;
  s << " D=" << head_dim << " Sq=" << lengths_text(seqlens_q)
    << " Sk=" << lengths_text(seqlens_k) << (causal ? " causal" : "") << " "
    << dtype_name(dtype);
  return s.str();
}

Status validate(const VarlenProblem& p) {
  if (p.seqlens_q.empty())
    return Status::error("a prefill batch needs at least one sequence: give its lengths "
                         "(e.g. --seqlens-k 100,37,512)");
  if (p.seqlens_q.size() != p.seqlens_k.size())
    return Status::error("seqlens_q has " + std::to_string(p.seqlens_q.size()) +
                         " lengths and seqlens_k " + std::to_string(p.seqlens_k.size()) +
                         ": give one query and one key length per sequence");
  if (Status s = check_heads(p.heads, p.kv_heads, p.head_dim, p.scale); !s) return s;
  if (Status s = check_lengths(p.seqlens_q, "query"); !s) return s;
  if (Status s = check_lengths(p.seqlens_k, "key"); !s) return s;
  if (p.total_q() == 0)
    return Status::error("every sequence has 0 queries: there is nothing to compute");
  const double d = p.head_dim;
  if (Status s = check_elements("Q", double(p.total_q()) * p.heads * d,
                                "total_q x heads x head_dim", "use fewer or shorter sequences");
      !s)
    return s;
  return check_elements("K", double(p.total_k()) * p.kv_heads * d,
                        "total_k x kv_heads x head_dim", "use fewer or shorter sequences");
}

double varlen_flops(const VarlenProblem& p) {
  double flops = 0.0;
  for (int b = 0; b < p.batch(); ++b) flops += attention_flops(p.sequence(b));
  return flops;
}

double varlen_bytes(const VarlenProblem& p) {
  const double q_rows = double(p.total_q()) * p.heads, kv_rows = double(p.total_k()) * p.kv_heads;
  return dtype_bytes(p.dtype) * double(p.head_dim) * (2.0 * q_rows + 2.0 * kv_rows);
}

VarlenInputs random_varlen_inputs(const VarlenProblem& p, uint64_t seed, float range) {
  VarlenInputs in;
  in.seed = seed;
  in.q.resize(size_t(p.total_q() * p.heads * p.head_dim));
  in.k.resize(size_t(p.total_k() * p.kv_heads * p.head_dim));
  in.v.resize(in.k.size());
  fill_uniform(in.q, seed * 3 + 0, -range, range);
  fill_uniform(in.k, seed * 3 + 1, -range, range);
  fill_uniform(in.v, seed * 3 + 2, -1.0f, 1.0f);
  round_inputs(in, p.dtype);
  return in;
}

Status validate_inputs(const VarlenProblem& p, const VarlenInputs& in) {
  if (Status s = check_size("Q", in.q.size(), p.total_q() * p.heads * p.head_dim,
                            "total_q x heads x head_dim");
      !s)
    return s;
  for (auto [name, values] : {std::pair{"K", &in.k}, {"V", &in.v}})
    if (Status s = check_size(name, values->size(), p.total_k() * p.kv_heads * p.head_dim,
                              "total_k x kv_heads x head_dim");
        !s)
      return s;
  return Status::ok();
}

void round_inputs(VarlenInputs& in, DType t) {
  round_to_dtype(in.q, t);
  round_to_dtype(in.k, t);
  round_to_dtype(in.v, t);
}

std::vector<double> varlen_reference(const VarlenProblem& p, const VarlenInputs& in) {
  if (Status s = validate_inputs(p, in); !s) throw std::invalid_argument(s.message());
  const int d = p.head_dim;
  const double scale = p.softmax_scale();
  const std::vector<int32_t> cu_q = p.cu_seqlens_q(), cu_k = p.cu_seqlens_k();
  // The sequence each packed query row belongs to.
  std::vector<int> sequence_of(size_t(p.total_q()));
  for (int b = 0; b < p.batch(); ++b)
    std::fill(sequence_of.begin() + cu_q[b], sequence_of.begin() + cu_q[b + 1], b);
  std::vector<double> o(in.q.size(), 0.0);
  // Row r of Q and O is (token t, head h) in [total_q, heads] order.
  const int64_t rows = p.total_q() * p.heads;
  const int64_t mean_keys = p.total_k() / std::max(p.batch(), 1);
  parallel_rows(rows, mean_keys * d, [&](int64_t first, int64_t stride) {
    std::vector<double> scores;
    for (int64_t r = first; r < rows; r += stride) {
      const int64_t t = r / p.heads;
      const int h = int(r % p.heads), b = sequence_of[size_t(t)];
      const int kvh = p.kv_head(h);
      // Key j of sequence b is packed row cu_k[b] + j: no other sequence's keys are reachable.
      const auto row = [&](const std::vector<float>& packed, int j) {
        return packed.data() + ((int64_t(cu_k[b]) + j) * p.kv_heads + kvh) * d;
      };
      attend_row(
          in.q.data() + r * d, p.visible_keys(b, int(t - cu_q[b])), d, scale,
          [&](int j) { return row(in.k, j); }, [&](int j) { return row(in.v, j); }, scores,
          o.data() + r * d);
    }
  });
  return o;
}

}  // namespace attn
