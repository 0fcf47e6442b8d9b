// attn_emu_rewrite IN OUT: copies a CUDA source (IN) to OUT with the two pieces of CUDA
// syntax that are not C++ turned into calls of the CPU emulation (cuda_emulation.h):
//
//   kernel<<<grid, block, smem, stream>>>(args);
//     -> kernel, ::attn::emu::launch_config(__FILE__, __LINE__, grid, block, smem, stream)(args);
//   __shared__ __align__(16) float tile[32][D];
//     -> float (&tile)[32][D] = ::attn::emu::shared_variable<float[32][D]>(16, "tile", ...);
//   extern __shared__ float buffer[];
//     -> float* const buffer = ::attn::emu::dynamic_shared<float>(...);
//
// Comments, string and character literals are copied untouched. OUT starts with a #line
// directive naming IN and keeps IN's line breaks, so compiler messages, __FILE__/__LINE__
// and the debug information name the original file and line. Exit status 1 on a syntax the
// rewrite does not handle (with a message naming the line).
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

std::string g_path;

[[noreturn]] void die(int line, const std::string& why) {
  std::cerr << g_path << ":" << line << ": error: " << why << "\n";
  std::exit(1);
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Marks which characters of src are code (1) and which are inside comments or literals (0).
std::string code_mask(const std::string& s) {
  std::string mask(s.size(), 1);
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') mask[i++] = 0;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      mask[i++] = 0;
      mask[i++] = 0;
      while (i < s.size() && !(s[i] == '*' && i + 1 < s.size() && s[i + 1] == '/')) mask[i++] = 0;
      if (i < s.size()) { mask[i++] = 0; mask[i++] = 0; }
    } else if (c == 'R' && i + 1 < s.size() && s[i + 1] == '"' && (i == 0 || !ident_char(s[i - 1]))) {
      const size_t open = s.find('(', i);
      const std::string delim = ")" + s.substr(i + 2, open - i - 2) + "\"";
      const size_t close = s.find(delim, open);
      const size_t end = close == std::string::npos ? s.size() : close + delim.size();
      while (i < end) mask[i++] = 0;
    } else if (c == '"' || (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(s[i - 1])) &&
                                          i + 1 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1]))))) {
      // A string or character literal (a ' between two hex digits is a digit separator).
      const char quote = c;
      mask[i++] = 0;
      while (i < s.size() && s[i] != quote && s[i] != '\n') {
        if (s[i] == '\\') mask[i++] = 0;
        if (i < s.size()) mask[i++] = 0;
      }
      if (i < s.size()) mask[i++] = 0;
    } else {
      ++i;
    }
  }
  return mask;
}

int line_of(const std::string& s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

bool word_at(const std::string& s, const std::string& mask, size_t i, const std::string& w) {
  return s.compare(i, w.size(), w) == 0 && mask[i] && (i == 0 || !ident_char(s[i - 1])) &&
         (i + w.size() >= s.size() || !ident_char(s[i + w.size()]));
}

// The rewrite of one `[extern] __shared__ ... ;` declaration (decl is the text between
// `__shared__` and `;`).
std::string rewrite_shared(std::string decl, bool is_extern, int line) {
  std::string align = "0";
  for (const char* kw : {"__align__", "alignas"}) {
    const size_t at = decl.find(kw);
    if (at == std::string::npos) continue;
    const size_t open = decl.find('(', at), close = decl.find(')', open);
    if (open == std::string::npos || close == std::string::npos)
      die(line, std::string("cannot read the ") + kw + "(...) of this __shared__ declaration");
    align = trim(decl.substr(open + 1, close - open - 1));
    decl.erase(at, close + 1 - at);
  }
  decl = trim(decl);
  if (decl.find(',') != std::string::npos && decl.find('<') == std::string::npos)
    die(line, "one name per __shared__ declaration, please (the CPU emulation rewrites them)");
  if (decl.find('=') != std::string::npos)
    die(line, "a __shared__ variable cannot have an initializer");
  const size_t bracket = decl.find('[');
  const std::string head = trim(bracket == std::string::npos ? decl : decl.substr(0, bracket));
  const std::string dims = bracket == std::string::npos ? "" : trim(decl.substr(bracket));
  size_t name_start = head.size();
  while (name_start > 0 && ident_char(head[name_start - 1])) --name_start;
  const std::string name = head.substr(name_start);
  const std::string type = trim(head.substr(0, name_start));
  if (name.empty() || type.empty()) die(line, "cannot read this __shared__ declaration");
  std::string quoted_type;
  for (char c : type) quoted_type += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  const std::string args = "(" + align + ", \"" + name + "\", \"" + quoted_type +
                           "\", __FILE__, __LINE__, []{})";
  if (is_extern) {
    if (dims != "[]") die(line, "extern __shared__ must be an array of unknown size: name[]");
    return type + "* const " + name + " = ::attn::emu::dynamic_shared<" + type + ">" + args + ";";
  }
  if (dims.empty())
    return type + "& " + name + " = ::attn::emu::shared_variable<" + type + ">" + args + ";";
  return type + " (&" + name + ")" + dims + " = ::attn::emu::shared_variable<" + type + dims +
         ">" + args + ";";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: attn_emu_rewrite IN OUT\n";
    return 2;
  }
  g_path = argv[1];
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "attn_emu_rewrite: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string src = buffer.str();
  const std::string mask = code_mask(src);

  std::string out = "#line 1 \"" + g_path + "\"\n";
  size_t i = 0;
  while (i < src.size()) {
    if (mask[i] && src.compare(i, 3, "<<<") == 0) {
      size_t close = i + 3;
      while (close + 2 < src.size() && !(mask[close] && src.compare(close, 3, ">>>") == 0)) ++close;
      if (close + 2 >= src.size()) die(line_of(src, i), "<<< without a matching >>>");
      out += ", ::attn::emu::launch_config(__FILE__, __LINE__, ";
      out += src.substr(i + 3, close - i - 3);
      out += ")";
      i = close + 3;
      continue;
    }
    if (word_at(src, mask, i, "__shared__")) {
      // `extern` right before it?
      bool is_extern = false;
      size_t back = out.size();
      while (back > 0 && (out[back - 1] == ' ' || out[back - 1] == '\t')) --back;
      if (back >= 6 && out.compare(back - 6, 6, "extern") == 0 &&
          (back == 6 || !ident_char(out[back - 7]))) {
        is_extern = true;
        out.erase(back - 6);
      }
      size_t end = i + 10;
      while (end < src.size() && !(mask[end] && src[end] == ';')) ++end;
      if (end >= src.size()) die(line_of(src, i), "__shared__ declaration without a ';'");
      const std::string decl = src.substr(i + 10, end - i - 10);
      out += rewrite_shared(decl, is_extern, line_of(src, i));
      for (char c : decl) if (c == '\n') out += '\n';  // keep the line numbers
      i = end + 1;
      continue;
    }
    out += src[i++];
  }
  std::ofstream o(argv[2], std::ios::binary);
  o << out;
  return o ? 0 : 1;
}
