// Error checking for CUDA runtime calls. Every call is checked: a kernel launch that fails
// (bad grid, too much shared memory) reports nothing unless someone asks for the error.
//
//   ATTN_CUDA_CHECK(cudaMalloc(...));   // throws attn::CudaError naming file, line and error
//   ATTN_CUDA_RETURN(cudaGetLastError()); // in a function returning Status: returns the error
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/status.h"

namespace attn {

// "file.cu:42: cudaErrorInvalidConfiguration (invalid configuration argument) in `expr`"
inline std::string describe_cuda_error(cudaError_t err, const char* expr, const char* file,
                                       int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + cudaGetErrorName(err) + " (" +
         cudaGetErrorString(err) + ") in `" + expr + "`";
}

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t err, const std::string& what) : std::runtime_error(what), error(err) {}
  cudaError_t error;
};

}  // namespace attn

#define ATTN_CUDA_CHECK(expr)                                                                \
  do {                                                                                       \
    cudaError_t attn_err_ = (expr);                                                          \
    if (attn_err_ != cudaSuccess)                                                            \
      throw ::attn::CudaError(attn_err_,                                                     \
                              ::attn::describe_cuda_error(attn_err_, #expr, __FILE__, __LINE__)); \
  } while (0)

#define ATTN_CUDA_RETURN(expr)                                                               \
  do {                                                                                       \
    cudaError_t attn_err_ = (expr);                                                          \
    if (attn_err_ != cudaSuccess)                                                            \
      return ::attn::Status::error(                                                          \
          ::attn::describe_cuda_error(attn_err_, #expr, __FILE__, __LINE__));                \
  } while (0)
