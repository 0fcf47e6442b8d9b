#include "common/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/half.h"

namespace attn {

// Format (numpy.lib.format): 6-byte magic "\x93NUMPY", 1-byte major and minor version, the
// header length (2 bytes little-endian in version 1, 4 bytes in 2 and 3), then an ASCII Python
// dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and a newline so the data starts on a 64-byte boundary, then the raw data.

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

namespace {

const char kMagic[] = "\x93NUMPY";

std::string dict_value(const std::string& header, const std::string& key,
                       const std::string& path) {
  const std::regex re("['\"]" + key + "['\"]\\s*:\\s*(\\([^)]*\\)|'[^']*'|\"[^\"]*\"|\\w+)");
  std::smatch m;
  if (!std::regex_search(header, m, re))
    throw NpyError(path + ": header has no '" + key + "' entry (not a NumPy .npy file?)");
  return m[1].str();
}

// An opened .npy file positioned at its data, with what the header says about it.
struct NpyHeader {
  std::ifstream in;
  std::string descr;  // as written, quotes included: '<f4'
  std::vector<int64_t> shape;
  int64_t count = 1;  // elements
};

NpyHeader open_npy(const std::string& path) {
  NpyHeader h;
  h.in.open(path, std::ios::binary);
  std::ifstream& in = h.in;
  if (!in) throw NpyError(path + ": cannot open file");
  char magic[6];
  unsigned char version[2];
  if (!in.read(magic, 6) || std::memcmp(magic, kMagic, 6) != 0)
    throw NpyError(path + ": not a .npy file (missing the \\x93NUMPY magic); save it with np.save");
  in.read(reinterpret_cast<char*>(version), 2);
  uint32_t header_len = 0;
  if (version[0] == 1) {
    unsigned char len[2];
    in.read(reinterpret_cast<char*>(len), 2);
    header_len = len[0] | (len[1] << 8);
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char len[4];
    in.read(reinterpret_cast<char*>(len), 4);
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t(len[3]) << 24);
  } else {
    throw NpyError(path + ": unsupported .npy version " + std::to_string(version[0]));
  }
  std::string header(header_len, '\0');
  if (!in || !in.read(header.data(), header_len)) throw NpyError(path + ": truncated header");

  h.descr = dict_value(header, "descr", path);
  if (dict_value(header, "fortran_order", path) != "False")
    throw NpyError(path + ": Fortran-ordered array, expected C order: save np.ascontiguousarray(a)");
  const std::string shape = dict_value(header, "shape", path);
  const std::regex number("\\d+");
  for (std::sregex_iterator it(shape.begin(), shape.end(), number), end; it != end; ++it) {
    h.shape.push_back(std::stoll(it->str()));
    h.count *= h.shape.back();
  }
  return h;
}

bool descr_is(const std::string& descr, const char* type) {
  return descr == std::string("'") + type + "'" || descr == std::string("\"") + type + "\"";
}

// The data after the header: count values of `bytes` bytes each.
void read_data(NpyHeader& h, void* data, int bytes, const char* type, const std::string& path) {
  if (h.count > 0 && !h.in.read(static_cast<char*>(data), h.count * bytes))
    throw NpyError(path + ": file ends before the " + std::to_string(h.count) + " " + type +
                   " values its header " + shape_str(h.shape) + " promises");
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  NpyHeader h = open_npy(path);
  if (!descr_is(h.descr, "<f4")) {
    std::string hint = descr_is(h.descr, "<f8") ? " (float64)" : descr_is(h.descr, "<f2") ? " (float16)" : "";
    throw NpyError(path + ": dtype " + h.descr + hint +
                   ", expected float32 '<f4': save it with a.astype(np.float32)");
  }
  NpyArray array;
  array.shape = h.shape;
  array.data.resize(size_t(h.count));
  read_data(h, array.data.data(), 4, "float32", path);
  return array;
}

NpyArray read_npy_f32_or_f16(const std::string& path) {
  {
    NpyHeader h = open_npy(path);
    if (descr_is(h.descr, "<f2")) {
      std::vector<uint16_t> bits(size_t(h.count));
      read_data(h, bits.data(), 2, "float16", path);
      NpyArray array;
      array.shape = h.shape;
      array.data.reserve(bits.size());
      for (uint16_t b : bits) array.data.push_back(half_detail::f16_to_float(b));  // exact
      return array;
    }
    if (!descr_is(h.descr, "<f4")) {
      const std::string hint = descr_is(h.descr, "<f8") ? " (float64)" : "";
      throw NpyError(path + ": dtype " + h.descr + hint +
                     ", expected float32 '<f4' or float16 '<f2': save it with "
                     "a.astype(np.float32)");
    }
  }
  return read_npy(path);
}

NpyIntArray read_npy_int32(const std::string& path) {
  NpyHeader h = open_npy(path);
  NpyIntArray array;
  array.shape = h.shape;
  array.data.resize(size_t(h.count));
  if (descr_is(h.descr, "<i4")) {
    read_data(h, array.data.data(), 4, "int32", path);
  } else if (descr_is(h.descr, "<i8")) {
    // NumPy's default integer type: read as 64-bit, kept when every value fits 32 bits.
    std::vector<int64_t> wide(size_t(h.count));
    read_data(h, wide.data(), 8, "int64", path);
    for (size_t i = 0; i < wide.size(); ++i) {
      if (wide[i] < INT32_MIN || wide[i] > INT32_MAX)
        throw NpyError(path + ": element " + std::to_string(i) + " is " +
                       std::to_string(wide[i]) +
                       ", outside the int32 range that block tables and lengths use");
      array.data[i] = int32_t(wide[i]);
    }
  } else {
    const std::string hint = h.descr.find('f') != std::string::npos ? " (floating point)" : "";
    throw NpyError(path + ": dtype " + h.descr + hint +
                   ", expected an integer array (int32 '<i4' or int64 '<i8'): save it with "
                   "a.astype(np.int32)");
  }
  return array;
}

namespace {

void write_npy_bytes(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                     const void* data, size_t count, int bytes) {
  int64_t expected = 1;
  for (int64_t n : shape) expected *= n;
  if (expected != int64_t(count))
    throw NpyError(path + ": shape " + shape_str(shape) + " does not match " +
                   std::to_string(count) + " values");
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape_str(shape) + ", }";
  const size_t unpadded = 6 + 2 + 2 + header.size() + 1;  // magic, version, length, '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw NpyError(path + ": cannot create file");
  out.write(kMagic, 6);
  const unsigned char version_and_len[4] = {1, 0, static_cast<unsigned char>(header.size() & 0xFF),
                                            static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(version_and_len), 4);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(data), std::streamsize(count * size_t(bytes)));
  if (!out) throw NpyError(path + ": write failed");
}

}  // namespace

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<float>& data) {
  write_npy_bytes(path, "<f4", shape, data.data(), data.size(), 4);
}

void write_npy_int32(const std::string& path, const std::vector<int64_t>& shape,
                     const std::vector<int32_t>& data) {
  write_npy_bytes(path, "<i4", shape, data.data(), data.size(), 4);
}

void write_npy_f16(const std::string& path, const std::vector<int64_t>& shape,
                   const std::vector<float>& data) {
  const std::vector<uint16_t> bits = to_bits16(data, DType::f16);
  write_npy_bytes(path, "<f2", shape, bits.data(), bits.size(), 2);
}

}  // namespace attn
