// Module 01, going further: attention with two passes over the keys instead of three (README,
// section 8). Grade it with: ./course grade 01 --extra
#include "common/cuda_check.h"
#include "modules/01_naive/naive.h"

namespace attn::m01::ATTN_IMPL {

// TODO(extra): a kernel with exercise.cu's thread mapping whose first pass computes the row's
//   max and sum together (module 00, section 3: one rescale of the sum per key), and whose
//   second pass writes O; launch it here as forward() launches yours. Write a score helper
//   of its own in an anonymous namespace: exercise.cu's `score` belongs to that file.
Status forward_two_pass(const Problem& p, const float* q, const float* k, const float* v,
                        float* o, cudaStream_t stream) {
  if (Status s = supports(p); !s) return s;
  (void)q, (void)k, (void)v, (void)o, (void)stream;
  return Status::ok();
}

}  // namespace attn::m01::ATTN_IMPL
