#include "common/backward_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/half.h"
#include "common/random.h"

namespace attn {

namespace {

// Where the lesson covers each kind of bug.
const char* const kMath = "modules/11_backward/README.md, section 1: the math";
const char* const kReadable = "modules/11_backward/README.md, section 2: the readable kernels";
const char* const kFlash =
    "modules/11_backward/README.md, section 3: the FlashAttention-2 backward";
const char* const kAccuracy =
    "modules/11_backward/README.md, section 4: accuracy on the tensor cores";

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

Status require_backward(const Kernel& kernel) {
  if (kernel.backward && kernel.backward->forward && kernel.backward->backward)
    return Status::ok();
  return Status::error(module_name(kernel) + " has no backward pass; dQ, dK and dV come from "
                       "the backward module (module 11)");
}

Status check_size(const char* tensor, size_t got, int64_t want) {
  if (int64_t(got) == want) return Status::ok();
  return Status::error(std::string(tensor) + " holds " + std::to_string(got) +
                       " values, expected " + std::to_string(want) + " for the problem's shape");
}

// A host tensor in p.dtype's bytes: floats for f32, 16-bit patterns for f16 and bf16.
DeviceBuffer<unsigned char> upload(const std::vector<float>& values, DType t) {
  std::vector<unsigned char> bytes;
  if (t == DType::f32) {
    bytes.resize(values.size() * sizeof(float));
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    const std::vector<uint16_t> bits = to_bits16(values, t);
    bytes.resize(bits.size() * sizeof(uint16_t));
    if (!bits.empty()) std::memcpy(bytes.data(), bits.data(), bytes.size());
  }
  return DeviceBuffer<unsigned char>(bytes);
}

DeviceBuffer<unsigned char> allocate(int64_t elements, DType t) {
  return DeviceBuffer<unsigned char>(size_t(elements) * size_t(dtype_bytes(t)));
}

std::vector<float> download(const DeviceBuffer<unsigned char>& buffer, DType t) {
  const std::vector<unsigned char> bytes = buffer.to_host();
  if (t == DType::f32) {
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
    return values;
  }
  std::vector<uint16_t> bits(bytes.size() / sizeof(uint16_t));
  if (!bits.empty()) std::memcpy(bits.data(), bytes.data(), bits.size() * sizeof(uint16_t));
  return from_bits16(bits, t);  // 0xFFFF becomes the float poison
}

// What the kernel read: the inputs rounded to p.dtype (a no-op for random inputs, which are
// rounded already; it matters for inputs read from files).
BackwardInputs rounded(const Problem& p, const BackwardInputs& in) {
  BackwardInputs r = in;
  round_inputs(r.in, p.dtype);
  round_to_dtype(r.dout, p.dtype);
  return r;
}

// ---- One gradient, compared as if it were O ---------------------------------------------------

enum class Grad { dq, dk, dv };
const char* grad_name(Grad g) { return g == Grad::dq ? "dQ" : g == Grad::dk ? "dK" : "dV"; }

// compare_output walks batch x heads x seq_q rows through the strides p.o: a Problem whose
// "O" is the gradient's tensor (dQ: Q's heads, rows and strides; dK, dV: the K/V heads, seq_k
// rows and K's or V's strides) compares that gradient with the same rules.
Problem gradient_view(const Problem& p, Grad g) {
  Problem view = p;
  if (g == Grad::dq) {
    view.o = p.q;
    return view;
  }
  view.heads = view.kv_heads = p.kv_heads;
  view.seq_q = p.seq_k;
  view.o = g == Grad::dk ? p.k : p.v;
  return view;
}

const std::vector<float>& got(const BackwardCheck& r, Grad g) {
  return g == Grad::dq ? r.out_dq : g == Grad::dk ? r.out_dk : r.out_dv;
}
const std::vector<double>& want(const Gradients& grad, Grad g) {
  return g == Grad::dq ? grad.dq : g == Grad::dk ? grad.dk : grad.dv;
}
const Comparison& comparison(const BackwardCheck& r, Grad g) {
  return g == Grad::dq ? r.dq : g == Grad::dk ? r.dk : r.dv;
}

// lse's rule: +inf exactly for a row that sees no key, else within 1e-3 (relative, or
// absolute below 1). The reference's lse is exact; the kernel's is fp32 from fp32 sums.
bool lse_wrong(float got_lse, double want_lse) {
  if (std::isinf(want_lse)) return !(std::isinf(got_lse) && got_lse > 0);
  if (!std::isfinite(got_lse)) return true;
  return std::fabs(double(got_lse) - want_lse) > 1e-3 * std::max(1.0, std::fabs(want_lse));
}

std::string where(const Problem& p, Grad g, const Index4& at) {
  const std::string row = g == Grad::dq ? "query " : "key ";
  const std::string head = g == Grad::dq ? ", h=" : ", kv head ";
  return row + std::to_string(at.i) + " of (b=" + std::to_string(at.b) + head +
         std::to_string(at.h) + "), d=" + std::to_string(at.d) +
         (g != Grad::dq && p.kv_heads != p.heads ? " (the sum over its query heads)" : "");
}

std::string number(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Inputs, tolerance, the problem check

std::vector<float> random_dout(const Problem& p, uint64_t seed) {
  std::vector<float> dout(size_t(p.o_elements()));
  // A stream of its own: Q, K and V use seed * 3 + 0, 1, 2.
  fill_uniform(dout, seed ^ 0xD00D5EEDD00D5EEDull, -1.0f, 1.0f);
  round_to_dtype(dout, p.dtype);
  return dout;
}

BackwardInputs random_backward_inputs(const Problem& p, uint64_t seed, float range) {
  BackwardInputs r;
  r.in = random_inputs(p, seed, range);
  r.dout = random_dout(p, seed);
  return r;
}

double backward_tolerance(DType t) {
  switch (t) {
    case DType::f16: return 1e-2;
    case DType::bf16: return 4e-2;
    case DType::f32: break;
  }
  return kFp32Tolerance;
}

Status check_backward_problem(const Kernel& kernel, const Problem& p) {
  if (Status s = require_backward(kernel); !s) return s;
  // The element type: both entry points take p.dtype (f32, f16 or bf16), so there is nothing
  // to refuse here; a module that supports fewer says so in its supports().
  if (Status s = validate(p); !s) return s;
  return kernel.supports(p);
}

// ---------------------------------------------------------------------------------------------
// Device tensors

BackwardDeviceTensors::BackwardDeviceTensors(const Problem& p, const BackwardInputs& in,
                                             int64_t guard)
    : p_(p) {
  q_ = upload(in.in.q, p.dtype);
  k_ = upload(in.in.k, p.dtype);
  v_ = upload(in.in.v, p.dtype);
  dout_ = upload(in.dout, p.dtype);
  o_ = allocate(p.o_elements() + guard, p.dtype);
  dq_ = allocate(p.q_elements() + guard, p.dtype);
  dk_ = allocate(p.kv_elements() + guard, p.dtype);
  dv_ = allocate(p.kv_elements() + guard, p.dtype);
  lse_ = DeviceBuffer<float>(size_t(int64_t(p.batch) * p.heads * p.seq_q + guard));
}

void BackwardDeviceTensors::poison_outputs() {
  o_.poison();
  lse_.poison();
  dq_.poison();
  dk_.poison();
  dv_.poison();
}

Status BackwardDeviceTensors::forward(const Kernel& kernel, cudaStream_t stream) {
  if (Status s = require_backward(kernel); !s) return s;
  return kernel.backward->forward(p_, q_.get(), k_.get(), v_.get(), o_.get(), lse_.get(), stream);
}

Status BackwardDeviceTensors::backward(const Kernel& kernel, cudaStream_t stream) {
  if (Status s = require_backward(kernel); !s) return s;
  return kernel.backward->backward(p_, q_.get(), k_.get(), v_.get(), o_.get(), dout_.get(),
                                   lse_.get(), dq_.get(), dk_.get(), dv_.get(), stream);
}

std::vector<float> BackwardDeviceTensors::o() const { return download(o_, p_.dtype); }
std::vector<float> BackwardDeviceTensors::lse() const { return lse_.to_host(); }
std::vector<float> BackwardDeviceTensors::dq() const { return download(dq_, p_.dtype); }
std::vector<float> BackwardDeviceTensors::dk() const { return download(dk_, p_.dtype); }
std::vector<float> BackwardDeviceTensors::dv() const { return download(dv_, p_.dtype); }

// ---------------------------------------------------------------------------------------------
// Running and checking

namespace {

// Both entry points on poisoned buffers with kGuardElements after each output; the outputs
// (guards split off and counted) land in r.
Status run_backward(const Kernel& kernel, const Problem& p, const BackwardInputs& in,
                    BackwardCheck& r) {
  try {
    BackwardDeviceTensors t(p, in, kGuardElements);
    t.poison_outputs();
    if (Status s = t.forward(kernel, nullptr); !s) return s;
    // A bad launch configuration is reported by cudaGetLastError, a fault inside the kernel
    // only once we wait for it.
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    if (Status s = t.backward(kernel, nullptr); !s) return s;
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    r.out_o = t.o();
    r.out_lse = t.lse();
    r.out_dq = t.dq();
    r.out_dk = t.dk();
    r.out_dv = t.dv();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
  r.guard_o = split_off_guard(r.out_o, p.o_elements());
  r.guard_lse = split_off_guard(r.out_lse, int64_t(p.batch) * p.heads * p.seq_q);
  r.guard_dq = split_off_guard(r.out_dq, p.q_elements());
  r.guard_dk = split_off_guard(r.out_dk, p.kv_elements());
  r.guard_dv = split_off_guard(r.out_dv, p.kv_elements());
  r.guard_writes = r.guard_o + r.guard_lse + r.guard_dq + r.guard_dk + r.guard_dv;
  return Status::ok();
}

}  // namespace

BackwardCheck check_backward(const Kernel& kernel, const Problem& p, const BackwardInputs& in,
                             double tolerance) {
  BackwardCheck r;
  r.status = check_backward_problem(kernel, p);
  if (r.status) r.status = check_size("Q", in.in.q.size(), p.q_elements());
  if (r.status) r.status = check_size("K", in.in.k.size(), p.kv_elements());
  if (r.status) r.status = check_size("V", in.in.v.size(), p.kv_elements());
  if (r.status) r.status = check_size("dO", in.dout.size(), p.o_elements());
  if (r.status) r.status = run_backward(kernel, p, in, r);
  if (r.status) compare_backward(p, in, r, tolerance);
  return r;
}

void compare_backward(const Problem& p, const BackwardInputs& in, BackwardCheck& r,
                      double tolerance) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  const struct { const char* name; size_t size; int64_t want; } outputs[] = {
      {"O", r.out_o.size(), p.o_elements()},   {"lse", r.out_lse.size(), rows},
      {"dQ", r.out_dq.size(), p.q_elements()}, {"dK", r.out_dk.size(), p.kv_elements()},
      {"dV", r.out_dv.size(), p.kv_elements()}};
  for (const auto& t : outputs)
    if (Status s = check_size(t.name, t.size, t.want); !s)
      throw std::invalid_argument("compare_backward: " + s.message());
  const BackwardInputs exact = rounded(p, in);
  r.reference = reference_backward(p, exact.in.q, exact.in.k, exact.in.v, exact.dout);
  const double tol = tolerance < 0.0 ? backward_tolerance(p.dtype) : tolerance;
  r.o = compare_output(p, r.out_o, r.reference.o, tol);
  r.dq = compare_output(gradient_view(p, Grad::dq), r.out_dq, r.reference.grad.dq, tol);
  r.dk = compare_output(gradient_view(p, Grad::dk), r.out_dk, r.reference.grad.dk, tol);
  r.dv = compare_output(gradient_view(p, Grad::dv), r.out_dv, r.reference.grad.dv, tol);
  r.lse_bad = 0;
  r.lse_first_bad = -1;
  for (size_t row = 0; row < r.reference.lse.size(); ++row)
    if (lse_wrong(r.out_lse[row], r.reference.lse[row]) && r.lse_bad++ == 0)
      r.lse_first_bad = int64_t(row);
}

// ---------------------------------------------------------------------------------------------
// Hints

std::vector<std::string> diagnose_backward(const Problem& p, const BackwardInputs& in,
                                           const BackwardCheck& r) {
  std::vector<std::string> hints;
  if (!r.status) {
    hints.push_back("the kernel did not run: " + r.status.message());
    return hints;
  }
  const auto see = [](const char* section) { return std::string(" (") + section + ")"; };
  const struct { const char* name; int64_t count; const char* row; } guards[] = {
      {"O", r.guard_o, "query"}, {"lse", r.guard_lse, "query"}, {"dQ", r.guard_dq, "query"},
      {"dK", r.guard_dk, "key"}, {"dV", r.guard_dv, "key"}};
  for (const auto& g : guards)
    if (g.count > 0)
      hints.push_back(std::to_string(g.count) + " values were written past the end of " + g.name +
                      ": a block stores rows beyond the last " + g.row +
                      " (check the bounds of the store)" + see(kReadable));
  const int64_t rows = int64_t(p.batch) * p.heads * p.seq_q;
  if (r.passed() || r.out_o.size() != size_t(p.o_elements()) ||
      r.out_lse.size() != size_t(rows) || r.out_dq.size() != size_t(p.q_elements()) ||
      r.out_dk.size() != size_t(p.kv_elements()) || r.out_dv.size() != size_t(p.kv_elements()) ||
      r.reference.lse.size() != size_t(rows))
    return hints;

  // Rows that see no key (causal, seq_q > seq_k): lse +inf, O and dQ rows 0.
  int64_t masked_bad = 0;
  std::string first_masked;
  const auto finite_row = [&](const std::vector<float>& t, const Strides& s, int b, int h, int i) {
    const float* row = t.data() + Problem::offset(s, b, h, i);
    return std::all_of(row, row + p.head_dim, [](float x) { return std::isfinite(x); });
  };
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        if (p.first_masked_key(i) > 0) continue;
        const float lse = r.out_lse[(size_t(b) * p.heads + h) * p.seq_q + i];
        if (finite_row(r.out_o, p.o, b, h, i) && finite_row(r.out_dq, p.q, b, h, i) &&
            !std::isnan(lse))
          continue;
        if (masked_bad++ == 0)
          first_masked = "query " + std::to_string(i) + " of (b=" + std::to_string(b) +
                         ", h=" + std::to_string(h) + ")";
      }
  if (masked_bad > 0)
    hints.push_back(std::to_string(masked_bad) + " rows that see no key have NaN (or unwritten) "
                    "O, dQ or lse, first " + first_masked + ": a row that sees no key has lse = "
                    "+inf: exp(S - lse) must give 0, not NaN; its O and dQ rows are 0, written "
                    "all the same" + see(kMath));

  if (!r.o.passed())
    hints.push_back("O is wrong (" + r.o.summary() + "): the forward is wrong, and the backward "
                    "reads O (for D) and lse; fix the forward first" + see(kFlash));
  if (r.lse_bad > 0) {
    const int64_t row = r.lse_first_bad;
    const int i = int(row % p.seq_q), h = int((row / p.seq_q) % p.heads),
              b = int(row / (int64_t(p.seq_q) * p.heads));
    std::string hint = std::to_string(r.lse_bad) + " lse values are wrong, first query " +
                       std::to_string(i) + " of (b=" + std::to_string(b) + ", h=" +
                       std::to_string(h) + "): got " + number("%g", r.out_lse[size_t(row)]) +
                       ", want " + number("%g", r.reference.lse[size_t(row)]);
    // Stored in base 2 (log2 of the sum: the exp2 form of the forward) instead of natural log?
    bool base2 = true;
    for (int64_t e = 0; e < rows && base2; ++e) {
      const double w = r.reference.lse[size_t(e)];
      if (std::isfinite(w)) base2 = !lse_wrong(r.out_lse[size_t(e)], w / std::log(2.0));
    }
    if (base2)
      hint += "; every lse equals log2 of the row's sum: lse is the natural log (scale "
              "included), multiply a base-2 value by ln 2 before storing it" + see(kMath);
    else
      hint += ": lse_i = log sum_j exp(S_ij) over the keys query i sees (natural log, scale "
              "included; +inf for a row that sees no key)" + see(kMath);
    hints.push_back(hint);
  }

  // Which gradients are wrong, and where.
  const Grad all[] = {Grad::dq, Grad::dk, Grad::dv};
  for (const Grad g : all) {
    const Comparison& c = comparison(r, g);
    if (c.passed()) continue;
    std::string hint = std::string(grad_name(g)) + " is wrong (rel err " +
                       number("%.2e", c.rel_l2_error) + ", tolerance " +
                       number("%.0e", c.tolerance) + ")";
    if (c.first_bad.b >= 0)
      hint += ": first wrong element at " + where(p, g, c.first_bad) + ": got " +
              number("%g", c.first_bad_got) + ", want " + number("%g", c.first_bad_want);
    hints.push_back(hint);
    if (c.unwritten > 0)
      hints.push_back(std::string(grad_name(g)) + ": " + std::to_string(c.unwritten) +
                      " elements were never written (" + (g == Grad::dq ? "queries " : "keys ") +
                      std::to_string(c.first_bad_query) + " to " +
                      std::to_string(c.last_bad_query) + " hold wrong values): every element of "
                      "dQ, dK and dV is written, zeros included; does the grid cover every " +
                      (g == Grad::dq ? "query" : "key") + "?" + see(kReadable));
  }

  // The classic bugs: the gradients recomputed as each would compute them. A wrong gradient
  // that passes against a model, and is closer to it than to the reference, names the bug.
  bool any_finite_failure = false;
  for (const Grad g : all)
    any_finite_failure |= !comparison(r, g).passed() && comparison(r, g).nan_count == 0;
  bool dq_explained = false;
  if (any_finite_failure) {
    struct Model {
      BackwardBug bug;
      bool dq, dk, dv;  // the gradients the bug changes
      const char* what;
      const char* section;
    };
    const Model models[] = {
        {BackwardBug::no_delta, true, true, false,
         "the gradients without the D term (dS = P o dP): the softmax's Jacobian gives dS = P o "
         "(dP - D) with D_i = sum_d dO[i][d] O[i][d]",
         kMath},
        {BackwardBug::no_scale, true, true, false,
         "the gradients without the scale: S = scale Q K^T, so dQ = scale dS K and dK = scale "
         "dS^T Q",
         kMath},
        {BackwardBug::scale_twice, true, true, false,
         "the gradients with the scale applied twice: dQ = scale dS K and dK = scale dS^T Q take "
         "it once (when S already holds it, dS does not)",
         kMath},
        {BackwardBug::no_lse, true, true, true,
         "the gradients with P recomputed as exp(S), without the log-sum-exp: P = exp(S - lse)",
         kMath},
        {BackwardBug::lse_as_base2, true, true, true,
         "the gradients with P = exp2(S log2(e) - lse): lse is a natural log; with exp2, "
         "multiply it by log2(e) too",
         kMath},
        {BackwardBug::lse_times_log2e, true, true, true,
         "the gradients with P = exp(S - lse log2(e)): lse turned to base 2 but used with exp "
         "(use exp2 with S log2(e), or exp with lse as it is)",
         kMath},
        {BackwardBug::gqa_last_head, false, true, true,
         "dK and dV of the last query head of each group alone: the K/V head's gradients are "
         "the sums over all the query heads that share it (accumulate, do not overwrite)",
         kMath},
    };
    const BackwardInputs exact = rounded(p, in);
    for (const Model& m : models) {
      if (m.bug == BackwardBug::gqa_last_head && p.heads == p.kv_heads) continue;
      const BackwardReference model =
          reference_backward(p, exact.in.q, exact.in.k, exact.in.v, exact.dout, m.bug);
      std::string matched;
      int count = 0;
      for (const Grad g : all) {
        const Comparison& c = comparison(r, g);
        const bool changed = g == Grad::dq ? m.dq : g == Grad::dk ? m.dk : m.dv;
        if (!changed || c.passed() || c.nan_count > 0) continue;
        const Comparison against =
            compare_output(gradient_view(p, g), got(r, g), want(model.grad, g), c.tolerance);
        if (!against.passed() || against.rel_l2_error >= c.rel_l2_error) continue;
        matched += (count++ == 0 ? "" : " and ") + std::string(grad_name(g));
        if (g == Grad::dq) dq_explained = true;
      }
      if (count > 0)
        hints.push_back(matched + (count > 1 ? " match " : " matches ") + m.what +
                        see(m.section));
    }
  }

  // dQ alone wrong: dK and dV, computed from the same P and dS, are right, so the math is; what
  // differs is that dQ sums the contributions of every key block into one row.
  if (!r.dq.passed() && r.dk.passed() && r.dv.passed() && !dq_explained && masked_bad == 0 &&
      r.dq.unwritten == 0)
    hints.push_back("only dQ is wrong while dK and dV pass: every key block adds to the same "
                    "dQ rows, so this looks like a race on dQ's accumulation: atomicAdd, or a "
                    "missing barrier" + see(kFlash));

  // 16-bit: a correct kernel measures about a quarter of the tolerance; a little over it is
  // rounding done too early (P or dS to 16 bits before they are complete, a 16-bit sum).
  if (p.dtype != DType::f32)
    for (const Grad g : all) {
      const Comparison& c = comparison(r, g);
      if (!c.passed() && c.nan_count == 0 && c.rel_l2_error < 4.0 * c.tolerance)
        hints.push_back(std::string(grad_name(g)) + " misses the " + dtype_name(p.dtype) +
                        " tolerance by less than 4x: rounding, not a wrong formula; accumulate "
                        "in fp32 and round P and dS to 16 bits only as the MMA operands" +
                        see(kAccuracy));
    }
  return hints;
}

}  // namespace attn
