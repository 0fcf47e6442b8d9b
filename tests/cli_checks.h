// Running `attn` in-process for the CPU tests of the CLI (test_cli and the emulation tests).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"

namespace attn::testing {

struct CliResult {
  int code;
  std::string out, err;
};

// `attn` with these arguments (without the program name), its exit code and its output.
inline CliResult attn_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

// A failure must be exactly one line on stderr that contains `expected`.
inline void expect_one_line_error(const CliResult& r, int code, const std::string& expected) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == code);
  CHECK(r.err.find(expected) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace attn::testing
