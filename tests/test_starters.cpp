// Tests of the course's shape (CPU only): a starter holds the learner's functions and little
// else. The given code of a module lives once, in the module's header (and in the device
// layer, common/device/), and both the starter and the solution include it; a run of code
// lines that the starter and the solution both spell out is given code written twice, which
// drifts apart the first time one copy is edited.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The modules whose starter holds only the functions that carry the module's idea. A module
// joins this list once its given code has moved into its header.
const char* const kModulesWithSmallStarters[] = {"01", "02", "03", "04", "05", "06", "07",
                                                  "09"};
// Modules of the list whose starter may not be in the tree yet (the module's interface is,
// its exercise and solution come with its lesson): checked once modules/NN_name/exercise.cu
// is there, skipped with a message before.
const char* const kModulesCheckedOncePresent[] = {"09"};

// The most identical code lines in a row a starter and its solution may share: a function's
// signature, forward()'s few lines. More is given code that belongs in the module's header.
constexpr int kMaxSharedRun = 10;
// The longest starter: the TODOs, their hints and the stubs.
constexpr int kMaxStarterLines = 150;

struct Line {
  int number;        // 1-based, in the file
  std::string code;  // the code with comments removed and whitespace collapsed
};

// The code of one line: `//` comments and `/* */` comments removed (in_block carries an open
// block comment to the next line), string and character literals kept as they are, runs of
// whitespace collapsed to one space, no leading or trailing space.
std::string code_of(const std::string& text, bool& in_block) {
  std::string out;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (in_block) {
      if (c == '*' && next == '/') in_block = false, ++i;
      continue;
    }
    if (quote) {
      out += c;
      if (c == '\\' && next) out += next, ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '/' && next == '/') break;
    if (c == '/' && next == '*') {
      in_block = true, ++i;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    const bool space = c == ' ' || c == '\t' || c == '\r';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Lines every file of the course starts or ends with; identical by necessity, not given code.
bool is_boilerplate(const std::string& code) {
  return code.rfind("#include", 0) == 0 || code.rfind("#pragma once", 0) == 0 ||
         code.rfind("namespace ", 0) == 0;
}

// The code lines of a source text: no blank lines, no comment-only lines, no boilerplate.
std::vector<Line> code_lines(const std::string& text) {
  std::vector<Line> lines;
  std::istringstream in(text);
  std::string raw;
  bool in_block = false;
  for (int number = 1; std::getline(in, raw); ++number) {
    std::string code = code_of(raw, in_block);
    if (!code.empty() && !is_boilerplate(code)) lines.push_back({number, std::move(code)});
  }
  return lines;
}

struct SharedRun {
  int length = 0;     // code lines; 0: none found
  int first_a = 0;    // line number of its first line in a
  int first_b = 0;    // ... and in b
  std::string first;  // its first line
};

// The first run (in a's order) of more than `limit` consecutive code lines that a and b
// share, with its whole length; length 0 if there is none.
SharedRun first_run_longer_than(const std::vector<Line>& a, const std::vector<Line>& b,
                                int limit) {
  // run[j]: the length of the common run that ends at a[i - 1] and b[j - 1].
  std::vector<int> prev(b.size() + 1, 0), run(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      run[j] = a[i - 1].code == b[j - 1].code ? prev[j - 1] + 1 : 0;
      if (run[j] == limit + 1) {  // the first run to pass the limit: measure all of it
        const size_t a0 = i - run[j], b0 = j - run[j];
        size_t n = 0;
        while (a0 + n < a.size() && b0 + n < b.size() && a[a0 + n].code == b[b0 + n].code) ++n;
        return {int(n), a[a0].number, b[b0].number, a[a0].code};
      }
    }
    std::swap(prev, run);
  }
  return {};
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int count_lines(const std::string& text) {
  return int(std::count(text.begin(), text.end(), '\n')) +
         (text.empty() || text.back() == '\n' ? 0 : 1);
}

// The folder of module `number` under root/dir (modules/NN_name or solutions/NN_name).
fs::path module_folder(const fs::path& root, const char* dir, const std::string& number) {
  for (const auto& entry : fs::directory_iterator(root / dir))
    if (entry.is_directory() && entry.path().filename().string().rfind(number + "_", 0) == 0)
      return entry.path();
  return {};
}

// base.cu, else base.cpp (module 00's forward() runs on the CPU).
fs::path source_file(const fs::path& folder, const char* base) {
  const fs::path cu = folder / (std::string(base) + ".cu");
  return fs::exists(cu) ? cu : folder / (std::string(base) + ".cpp");
}

}  // namespace

TEST_CASE("starters: the run finder") {
  const auto a = code_lines("#include <x>\nint f() {\n  // hint\n  return 0;  // stub\n}\n\nint g;\n");
  REQUIRE(a.size() == 4);
  CHECK(a[0].code == "int f() {");
  CHECK(a[1].code == "return 0;");
  CHECK(a[1].number == 4);
  const auto b = code_lines("int f() {\n  return 0;\n}\n/* a\n   b */ int h;\nint g;\n");
  CHECK(first_run_longer_than(a, b, 3).length == 0);
  const SharedRun run = first_run_longer_than(a, b, 2);
  CHECK(run.length == 3);
  CHECK(run.first_a == 2);
  CHECK(run.first_b == 1);
  CHECK(run.first == "int f() {");
  bool in_block = false;
  CHECK(code_of("  s = \"// not a comment\";  // comment", in_block) ==
        "s = \"// not a comment\";");
}

TEST_CASE("starters: small, and no given code written twice") {
  const fs::path root = ATTN_SOURCE_DIR;
  for (const std::string number : kModulesWithSmallStarters) {
    const fs::path module_dir = module_folder(root, "modules", number);
    const bool optional = std::find(std::begin(kModulesCheckedOncePresent),
                                    std::end(kModulesCheckedOncePresent),
                                    number) != std::end(kModulesCheckedOncePresent);
    if (optional && (module_dir.empty() || !fs::exists(source_file(module_dir, "exercise")))) {
      MESSAGE("module " << number << ": no starter in the tree yet, not checked");
      continue;
    }
    REQUIRE_MESSAGE(!module_dir.empty(), "no folder modules/" << number << "_*");
    const fs::path solution_dir = root / "solutions" / module_dir.filename();
    const fs::path starter = source_file(module_dir, "exercise");
    const fs::path solution = source_file(solution_dir, "solution");
    REQUIRE_MESSAGE(fs::exists(starter), starter.string() << " is missing");
    REQUIRE_MESSAGE(fs::exists(solution), solution.string() << " is missing");

    const std::string starter_text = read_file(starter);
    const int lines = count_lines(starter_text);
    CHECK_MESSAGE(lines <= kMaxStarterLines,
                  starter.string() << " has " << lines << " lines, more than "
                                   << kMaxStarterLines
                                   << ": move the given code into the module's header");

    const SharedRun run = first_run_longer_than(code_lines(starter_text),
                                                code_lines(read_file(solution)), kMaxSharedRun);
    CHECK_MESSAGE(run.length == 0,
                  "module " << number << ": " << run.length
                            << " identical code lines in a row in the starter and the solution ("
                            << starter.string() << ":" << run.first_a << ", "
                            << solution.string() << ":" << run.first_b << ", from \""
                            << run.first << "\"): given code belongs in the module's header, "
                            << "included by both");
  }
}

TEST_CASE("starters: a going-further stub file is small and has its answer beside the solution") {
  // A lesson whose going-further exercises need code of their own (modules 00 and 01) keeps
  // their stubs in modules/NN_name/further.cu|.cpp, out of the exercise, and their answers in
  // solutions/NN_name/further.cu|.cpp (tests/test_NN_name.cpp, suite "extra").
  const fs::path root = ATTN_SOURCE_DIR;
  for (const auto& entry : fs::directory_iterator(root / "modules")) {
    if (!entry.is_directory()) continue;
    const fs::path stub = source_file(entry.path(), "further");
    if (!fs::exists(stub)) continue;
    const fs::path answer = source_file(root / "solutions" / entry.path().filename(), "further");
    REQUIRE_MESSAGE(fs::exists(answer), stub.string() << " has no answer " << answer.string());
    const std::string stub_text = read_file(stub);
    CHECK_MESSAGE(count_lines(stub_text) <= kMaxStarterLines / 2,
                  stub.string() << " is longer than " << kMaxStarterLines / 2 << " lines");
    const SharedRun run = first_run_longer_than(code_lines(stub_text),
                                                code_lines(read_file(answer)), kMaxSharedRun);
    CHECK_MESSAGE(run.length == 0, stub.string() << " and " << answer.string() << " share "
                                                 << run.length << " code lines in a row");
  }
}
