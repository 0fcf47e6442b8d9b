// The JSON that the benchmarks write: `attn bench` (schema attn-bench/1) and the module
// benchmarks bench_05 (attn-gemm-bench/1) and bench_07 (attn-ladder07/1). One writer, so
// that every file escapes strings, prints numbers and describes the device the same way:
// numbers with 9 significant digits (a median of 1.72248 ms stays 1.72248), null for NaN
// and infinity (JSON has neither), and one device block that scripts/plot_bench.py reads.
//
// A document is an object of named fields followed by named lists of row objects, written
//   {
//     "schema": "...",
//     "field": value,
//     "rows": [
//       {...},
//       {...}
//     ]
//   }
// with every row on one line (diffable, greppable).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/device.h"
#include "common/status.h"

namespace attn::json {

std::string escape(const std::string& s);  // the inside of a JSON string
std::string number(double x);              // 9 significant digits; null unless finite
std::string utc_now();                     // "2026-11-23T11:28:40Z"

// One JSON object on one line, fields in the order they are added.
class Object {
 public:
  Object& add(const std::string& key, const std::string& text);  // a string, escaped
  Object& add(const std::string& key, const char* text) { return add(key, std::string(text)); }
  Object& add(const std::string& key, double value);  // number()
  Object& add(const std::string& key, bool value);
  template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>,
                                        int> = 0>
  Object& add(const std::string& key, Int value) {
    return add_raw(key, std::to_string(value));
  }
  Object& add(const std::string& key, const Object& nested) { return add_raw(key, nested.str()); }
  Object& add_null(const std::string& key) { return add_raw(key, "null"); }
  Object& add_raw(const std::string& key, const std::string& json);  // already JSON
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// The device every benchmark describes: name, compute capability, SMs, clocks, memory and
// the spec-sheet peaks (DeviceInfo). Callers add what they measured (e.g. measured_copy_gbs).
Object device(const DeviceInfo& dev);

class Document {
 public:
  explicit Document(const std::string& schema);
  Document& field(const std::string& key, const std::string& json);  // already JSON
  Document& field(const std::string& key, const Object& value) { return field(key, value.str()); }
  Document& list(const std::string& key, const std::vector<Object>& rows);
  Document& list(const std::string& key, const std::vector<std::string>& rows);  // JSON each
  std::string str() const;
  // Writes str() to `path`; an error naming the path when it cannot.
  Status write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::pair<std::string, std::vector<std::string>>> lists_;
};

}  // namespace attn::json
