// Entry point of the `attn` program; everything else is in common/cli.cpp.
#include <iostream>

#include "common/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return attn::run_cli(args, std::cout, std::cerr);
}
