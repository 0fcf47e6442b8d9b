// Reading and writing NumPy .npy files (float32, C order), so `attn run --q q.npy ...` can run
// a kernel on real tensors saved with np.save, and write the output back for inspection;
// integer arrays (int32 or int64) for the block tables and lengths of module 10 and the segment
// ids of module 12; float16 for module 12's bias.
// Anything else (float64, Fortran order, a truncated file) is refused with a message that says
// how to fix it, e.g. "q.npy: dtype '<f8' (float64), expected float32: use a.astype(np.float32)".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // C (row-major) order
};

std::string shape_str(const std::vector<int64_t>& shape);  // "(2, 8, 128, 64)"

struct NpyIntArray {
  std::vector<int64_t> shape;
  std::vector<int32_t> data;  // C (row-major) order
};

// Throws NpyError naming the file and the problem.
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<float>& data);

// A float32 ('<f4') or float16 ('<f2', NumPy's half, converted exactly) array, as float: a
// bias saved in half precision. Throws NpyError.
NpyArray read_npy_f32_or_f16(const std::string& path);
// Writes `data` rounded to float16 ('<f2').
void write_npy_f16(const std::string& path, const std::vector<int64_t>& shape,
                   const std::vector<float>& data);

// An int32 ('<i4') or int64 ('<i8', NumPy's default integer) array, as int32: a value outside
// the int32 range is refused in one line naming the element. Throws NpyError.
NpyIntArray read_npy_int32(const std::string& path);
void write_npy_int32(const std::string& path, const std::vector<int64_t>& shape,
                     const std::vector<int32_t>& data);

}  // namespace attn
