// Spreading the rows of a CPU reference over the machine's cores. Each row of attention is
// independent (its own scores, its own softmax), so rows split across threads with no locking:
// every thread writes only the output rows it owns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace attn {

// Calls worker(first, stride) on several threads; the worker handles rows first,
// first + stride, first + 2 * stride, ... below `rows`. Interleaved rows rather than blocks:
// causal rows and sequences of different lengths differ in cost, and interleaving evens that
// out. Threads only pay off for real work: below about 2^16 multiply-adds per thread
// (`work_per_row` per row) fewer threads are used, down to the caller's alone.
template <class Worker>
void parallel_rows(int64_t rows, int64_t work_per_row, Worker worker) {
  if (rows <= 0) return;
  // In double: rows times work can pass 2^63 for the largest problems validate() allows.
  const double work = double(rows) * double(std::max<int64_t>(work_per_row, 1));
  const int64_t max_threads = int64_t(std::clamp(work / 65536.0, 1.0, 1024.0));
  const int threads = int(std::min<int64_t>(
      {int64_t(std::max(1u, std::thread::hardware_concurrency())), max_threads, rows}));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, int64_t(t), int64_t(threads));
  worker(int64_t(0), int64_t(threads));
  for (std::thread& th : pool) th.join();
}

}  // namespace attn
