#include "common/bench_json.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace attn::json {

std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\t': r += "\\t"; break;
      case '\r': r += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned char>(c));
          r += u;
        } else {
          r += c;
        }
    }
  }
  return r;
}

std::string number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

Object& Object::add(const std::string& key, const std::string& text) {
  return add_raw(key, "\"" + escape(text) + "\"");
}
Object& Object::add(const std::string& key, double value) { return add_raw(key, number(value)); }
Object& Object::add(const std::string& key, bool value) {
  return add_raw(key, value ? "true" : "false");
}
Object& Object::add_raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

std::string Object::str() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i)
    s += (i ? ", \"" : "\"") + escape(fields_[i].first) + "\": " + fields_[i].second;
  return s + "}";
}

Object device(const DeviceInfo& dev) {
  Object d;
  d.add("name", dev.name)
      .add("cc", std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor))
      .add("sms", dev.sm_count)
      .add("sm_clock_mhz", dev.sm_clock_khz / 1000)
      .add("mem_clock_mhz", dev.mem_clock_khz / 1000)
      .add("total_memory_bytes", dev.total_memory)
      .add("peak_fp32_tflops", dev.peak_fp32_tflops)
      .add("peak_bandwidth_gbs", dev.peak_bandwidth_gbs);
  return d;
}

Document::Document(const std::string& schema) { field("schema", "\"" + escape(schema) + "\""); }

Document& Document::field(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

Document& Document::list(const std::string& key, const std::vector<Object>& rows) {
  std::vector<std::string> text;
  for (const Object& r : rows) text.push_back(r.str());
  return list(key, text);
}

Document& Document::list(const std::string& key, const std::vector<std::string>& rows) {
  lists_.emplace_back(key, rows);
  return *this;
}

std::string Document::str() const {
  std::string s = "{\n";
  const size_t entries = fields_.size() + lists_.size();
  size_t n = 0;
  for (const auto& [key, json] : fields_)
    s += "  \"" + escape(key) + "\": " + json + (++n < entries ? ",\n" : "\n");
  for (const auto& [key, rows] : lists_) {
    s += "  \"" + escape(key) + "\": [\n";
    for (size_t i = 0; i < rows.size(); ++i)
      s += "    " + rows[i] + (i + 1 < rows.size() ? ",\n" : "\n");
    s += std::string("  ]") + (++n < entries ? ",\n" : "\n");
  }
  return s + "}\n";
}

Status Document::write(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return Status::error("cannot write " + path);
  f << str();
  if (!f) return Status::error("cannot write " + path);
  return Status::ok();
}

}  // namespace attn::json
