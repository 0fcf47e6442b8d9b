#include "common/npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

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

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
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

  const std::string descr = dict_value(header, "descr", path);
  if (descr != "'<f4'" && descr != "\"<f4\"") {
    std::string hint = descr == "'<f8'" ? " (float64)" : descr == "'<f2'" ? " (float16)" : "";
    throw NpyError(path + ": dtype " + descr + hint +
                   ", expected float32 '<f4': save it with a.astype(np.float32)");
  }
  if (dict_value(header, "fortran_order", path) != "False")
    throw NpyError(path + ": Fortran-ordered array, expected C order: save np.ascontiguousarray(a)");

  NpyArray array;
  const std::string shape = dict_value(header, "shape", path);
  int64_t count = 1;
  const std::regex number("\\d+");
  for (std::sregex_iterator it(shape.begin(), shape.end(), number), end; it != end; ++it) {
    array.shape.push_back(std::stoll(it->str()));
    count *= array.shape.back();
  }
  array.data.resize(size_t(count));
  if (count > 0 && !in.read(reinterpret_cast<char*>(array.data.data()), count * 4))
    throw NpyError(path + ": file ends before the " + std::to_string(count) +
                   " float32 values its header " + shape_str(array.shape) + " promises");
  return array;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<float>& data) {
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  if (count != int64_t(data.size()))
    throw NpyError(path + ": shape " + shape_str(shape) + " does not match " +
                   std::to_string(data.size()) + " values");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_str(shape) + ", }";
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
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
  if (!out) throw NpyError(path + ": write failed");
}

}  // namespace attn
