// The device layer: choosing the compiled head-dim instance for a runtime head_dim.
//
// Kernels take the head dim as a template parameter so that per-thread arrays (a query row,
// an accumulator row) have a size known at compile time and live in registers; an index
// known only at run time would push them to local memory. A runtime head_dim is padded up
// to the next compiled instance, and the kernel ignores the columns past head_dim.
#pragma once

#include <type_traits>

namespace attn::device {

// Calls launch(std::integral_constant<int, D>{}) for the smallest D of Ds... with
// head_dim <= D (the last one when none is). Ds... must be ascending, e.g.
//   return dispatch_head_dim<32, 64, 96, 128>(p.head_dim, [&](auto d) {
//     return launch<decltype(d)::value>(p, q, k, v, o, stream);
//   });
// Callers check head_dim against the largest instance first (supports()).
template <int D, int... Rest, class Launch>
auto dispatch_head_dim(int head_dim, Launch&& launch) {
  if constexpr (sizeof...(Rest) == 0) {
    return launch(std::integral_constant<int, D>{});
  } else {
    if (head_dim <= D) return launch(std::integral_constant<int, D>{});
    return dispatch_head_dim<Rest...>(head_dim, static_cast<Launch&&>(launch));
  }
}

}  // namespace attn::device
