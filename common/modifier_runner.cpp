#include "common/modifier_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/half.h"

namespace attn {

namespace {

std::string module_name(const Kernel& kernel) {
  char name[16];
  std::snprintf(name, sizeof name, "module %02d", kernel.module);
  return name;
}

Status require_modifiers(const Kernel& kernel) {
  if (kernel.modifiers && kernel.modifiers->forward) return Status::ok();
  return Status::error(module_name(kernel) + " runs plain attention; score modifiers, masks "
                       "and RoPE run on the modifier module (module 12)");
}

// The modifier module takes 16-bit tensors only: check_problem refuses f32 before this.
DeviceBuffer<uint16_t> upload16(const std::vector<float>& values, DType t) {
  if (t == DType::f32) throw std::invalid_argument("modifier tensors are f16 or bf16, not f32");
  return DeviceBuffer<uint16_t>(to_bits16(values, t));
}

Status check_size(const char* tensor, size_t got, int64_t want) {
  if (int64_t(got) == want) return Status::ok();
  return Status::error(std::string(tensor) + " holds " + std::to_string(got) +
                       " values, expected " + std::to_string(want) + " for the problem's shape");
}

}  // namespace

Status check_problem(const Kernel& kernel, const Problem& p, const ModifierSpec& m) {
  if (Status s = require_modifiers(kernel); !s) return s;
  if (Status s = supports_dtype(kernel, p.dtype); !s) return s;
  if (Status s = validate(p); !s) return s;
  if (Status s = validate(p, m); !s) return s;
  return kernel.modifiers->supports ? kernel.modifiers->supports(p, m) : Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Device tensors

ModifierBuffers::ModifierBuffers(const Problem& p, const ModifierSpec& m,
                                 const ModifierInputs& mi) {
  if (m.score == ScoreMod::bias) use_device_bias(p, m, upload16(mi.bias, p.dtype));
  if (m.documents) {
    seg_q_ = DeviceBuffer<int32_t>(mi.seg_q);
    seg_k_ = DeviceBuffer<int32_t>(mi.seg_k);
    tensors_.seg_q = seg_q_.get();
    tensors_.seg_k = seg_k_.get();
  }
  if (m.score == ScoreMod::relative) {
    rel_bias_ = DeviceBuffer<float>(relative_bias_by_distance(p, m, mi.rel_table));
    tensors_.rel_bias = rel_bias_.get();
  }
}

void ModifierBuffers::use_device_bias(const Problem& p, const ModifierSpec& m,
                                      DeviceBuffer<uint16_t> bias) {
  bias_ = std::move(bias);
  tensors_.bias = bias_.get();
  // A broadcast axis has stride 0: every batch entry (or head) reads the same values.
  const int64_t per_head = int64_t(p.seq_q) * p.seq_k;
  tensors_.bias_head_stride = m.bias_per_head ? per_head : 0;
  tensors_.bias_batch_stride = m.bias_per_batch ? (m.bias_per_head ? p.heads : 1) * per_head : 0;
}

ModifierDeviceTensors::ModifierDeviceTensors(const Problem& p, const ModifierSpec& m,
                                             const Inputs& in, const ModifierInputs& mi,
                                             int64_t o_guard)
    : p_(p), m_(m), mods_(p, m, mi) {
  q_ = upload16(in.q, p.dtype);
  k_ = upload16(in.k, p.dtype);
  v_ = upload16(in.v, p.dtype);
  o_ = DeviceBuffer<uint16_t>(size_t(p.o_elements() + o_guard));
}

void ModifierDeviceTensors::poison_output() { o_.poison(); }

Status ModifierDeviceTensors::forward(const Kernel& kernel, cudaStream_t stream) {
  if (Status s = require_modifiers(kernel); !s) return s;
  return kernel.modifiers->forward(p_, m_, mods_.tensors(), q_.get(), k_.get(), v_.get(), o_.get(),
                                   stream);
}

std::vector<float> ModifierDeviceTensors::output() const {
  return from_bits16(o_.to_host(), p_.dtype);
}

// ---------------------------------------------------------------------------------------------
// Running and checking

Status run_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                    const Inputs& in, const ModifierInputs& mi, std::vector<float>& out,
                    int64_t* guard_writes) {
  if (Status s = check_problem(kernel, p, m); !s) return s;
  if (Status s = check_size("Q", in.q.size(), p.q_elements()); !s) return s;
  if (Status s = check_size("K", in.k.size(), p.kv_elements()); !s) return s;
  if (Status s = check_size("V", in.v.size(), p.kv_elements()); !s) return s;
  if (Status s = validate_inputs(p, m, mi); !s) return s;
  try {
    ModifierDeviceTensors tensors(p, m, in, mi, kGuardElements);
    tensors.poison_output();
    if (Status s = tensors.forward(kernel, nullptr); !s) return s;
    // A bad launch configuration is reported by cudaGetLastError, a fault inside the kernel
    // only once we wait for it.
    ATTN_CUDA_RETURN(cudaGetLastError());
    ATTN_CUDA_RETURN(cudaDeviceSynchronize());
    out = tensors.output();
  } catch (const CudaError& e) {
    return Status::error(e.what());
  }
  const int64_t written = split_off_guard(out, p.o_elements());
  if (guard_writes) *guard_writes = written;
  return Status::ok();
}

namespace {

// Q, K, V and the bias as the kernel received them: rounded to p.dtype (a no-op for random
// inputs, which are rounded already; it matters for inputs loaded from files).
void round_to_kernel_inputs(const Problem& p, Inputs& in, ModifierInputs& mi) {
  round_inputs(in, p.dtype);
  round_to_dtype(mi.bias, p.dtype);
}

}  // namespace

ModifierCheck check_modified(const Kernel& kernel, const Problem& p, const ModifierSpec& m,
                             const Inputs& in, const ModifierInputs& mi, double tolerance) {
  ModifierCheck r;
  r.status = run_modified(kernel, p, m, in, mi, r.output, &r.guard_writes);
  if (!r.status) return r;
  Inputs rounded = in;
  ModifierInputs rounded_mi = mi;
  round_to_kernel_inputs(p, rounded, rounded_mi);
  r.reference = reference_attention(p, m, rounded_mi, rounded.q, rounded.k, rounded.v);
  r.comparison = compare_output(p, r.output, r.reference, tolerance);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Hints

std::vector<std::string> diagnose_modified(const Problem& p, const ModifierSpec& m,
                                           const ModifierInputs& mi, const Inputs& in,
                                           const ModifierCheck& r) {
  std::vector<std::string> hints;
  if (!r.status) {
    hints.push_back("the kernel did not run: " + r.status.message());
    return hints;
  }
  if (r.guard_writes > 0)
    hints.push_back(std::to_string(r.guard_writes) + " values were written past the end of O: "
                    "a block stores rows beyond the last query (check the bounds of the store)");
  const Comparison& c = r.comparison;
  if (c.passed() || r.output.size() != size_t(p.o_elements())) return hints;

  // A query whose keys are all masked (a window before the first key, a document with no
  // key, causal with seq_q > seq_k) must give 0: its softmax sum is 0.
  int64_t masked_nan_rows = 0;
  std::string first_masked;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        if (visible_key_range(p, m, mi, b, i).count() > 0) continue;
        const float* row = r.output.data() + Problem::offset(p.o, b, h, i);
        if (std::all_of(row, row + p.head_dim, [](float x) { return std::isfinite(x); }))
          continue;
        if (masked_nan_rows++ == 0)
          first_masked = "query " + std::to_string(i) + " of (b=" + std::to_string(b) +
                         ", h=" + std::to_string(h) + ")";
      }
  if (masked_nan_rows > 0)
    hints.push_back(std::to_string(masked_nan_rows) + " rows that see no key are NaN or "
                    "unwritten, first " + first_masked + ": a row whose keys are all masked "
                    "must give 0 (its softmax sum is 0; divide only when it is > 0, and write "
                    "the row anyway)");

  if (c.first_bad.b >= 0) {
    const Index4& at = c.first_bad;
    const KeyRange keys = visible_key_range(p, m, mi, at.b, at.i);
    char values[96];
    std::snprintf(values, sizeof values, ": got %g, want %g", double(c.first_bad_got),
                  c.first_bad_want);
    std::string hint = "first wrong element " + at.str() + values + "; query " +
                       std::to_string(at.i) + " sits at position " +
                       std::to_string(at.i + p.seq_k - p.seq_q) + " and sees keys [" +
                       std::to_string(keys.begin) + ", " + std::to_string(keys.end) + ") (" +
                       std::to_string(keys.count()) + " keys)";
    if (m.documents)
      hint += " of its document, id " +
              std::to_string(mi.seg_q[size_t(at.b) * p.seq_q + size_t(at.i)]);
    hints.push_back(hint);
  }

  // Classic bugs: the output recomputed without one of the modifiers (or with the other RoPE
  // pairing); a match names what the kernel left out.
  Inputs rounded = in;
  ModifierInputs rounded_mi = mi;
  round_to_kernel_inputs(p, rounded, rounded_mi);
  const auto matches = [&](const ModifierSpec& model, const ModifierInputs& model_in) {
    const std::vector<double> want =
        reference_attention(p, model, model_in, rounded.q, rounded.k, rounded.v);
    return compare_output(p, r.output, want, c.tolerance).passed();
  };
  if (m.score != ScoreMod::none) {
    ModifierSpec model = m;
    model.score = ScoreMod::none;
    ModifierInputs model_in = rounded_mi;
    model_in.bias.clear();
    model_in.rel_table.clear();
    if (matches(model, model_in))
      hints.push_back(std::string("the output matches attention without the ") +
                      score_mod_name(m.score) + " score modifier: it was not applied to the "
                      "scores before the softmax");
  }
  if (m.window > 0 || m.prefix > 0 || m.documents) {
    ModifierSpec model = m;
    model.window = model.prefix = 0;
    model.documents = false;
    ModifierInputs model_in = rounded_mi;
    model_in.seg_q.clear();
    model_in.seg_k.clear();
    if (matches(model, model_in))
      hints.push_back(std::string("the output matches attention without the ") +
                      (m.window > 0 ? "sliding window" : m.prefix > 0 ? "prefix" : "document") +
                      " mask" + (p.causal ? " (causal only)" : "") +
                      ": keys it hides were counted in the softmax");
  }
  if (m.rope != RopeStyle::none) {
    ModifierSpec model = m;
    model.rope = RopeStyle::none;
    if (matches(model, rounded_mi))
      hints.push_back("the output matches attention without RoPE: q and k were not rotated");
    model.rope = m.rope == RopeStyle::half ? RopeStyle::interleaved : RopeStyle::half;
    if (p.head_dim % 2 == 0 && matches(model, rounded_mi))
      hints.push_back(std::string("the output matches RoPE ") + rope_style_name(model.rope) +
                      (model.rope == RopeStyle::half ? " (pairs m, m + head_dim/2)"
                                                     : " (pairs 2m, 2m + 1)") +
                      ": the features are paired the other way");
  }
  return hints;
}

}  // namespace attn
