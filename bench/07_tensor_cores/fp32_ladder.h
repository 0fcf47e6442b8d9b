// bench_07 --dtype f32: module 07's fp32 rungs (bench/07_tensor_cores/fp32_ladder.cu).
#pragma once

#include <string>
#include <vector>

namespace attn::fp32_ladder {

struct Options {
  bool quick = false;          // N = 2048 only
  std::vector<int> seqs;       // the N to time (default 512 .. 16384)
  int iters = 10;              // timed runs per row (median)
  std::string json_path;       // write the rows and the error table as JSON
  std::string inputs_dir;      // write the error table's inputs there as .npy
};

// The ladder: every rung checked, then timed on the shapes; then the error table. Returns the
// process exit code (0 when every row ran).
int run(const Options& o);

}  // namespace attn::fp32_ladder
