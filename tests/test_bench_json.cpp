// Tests of the JSON writer shared by `attn bench`, bench_05 and bench_07 (common/bench_json.h):
// the exact text of a small document in the attn-bench/1 layout that scripts/plot_bench.py
// reads, string escaping, and numbers JSON can hold (NaN and infinity become null).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench_json.h"

using namespace attn;

TEST_CASE("bench json: escaping and numbers") {
  CHECK(json::escape("plain") == "plain");
  CHECK(json::escape("a \"quoted\" \\ path\nnext\tcol") ==
        "a \\\"quoted\\\" \\\\ path\\nnext\\tcol");
  CHECK(json::escape(std::string("\x01", 1)) == "\\u0001");
  CHECK(json::number(1.72248) == "1.72248");
  CHECK(json::number(34359738368.0) == "3.43597384e+10");  // 9 significant digits
  CHECK(json::number(20.0) == "20");
  CHECK(json::number(NAN) == "null");
  CHECK(json::number(INFINITY) == "null");
  const std::string now = json::utc_now();
  CHECK(now.size() == 20);
  CHECK(now.back() == 'Z');
}

TEST_CASE("bench json: objects keep their order and types") {
  json::Object o;
  o.add("kernel", "03_online_softmax/solution").add("module", 3).add("causal", false)
      .add("median_ms", 2.65878391).add("bytes", int64_t(536870912)).add_null("check")
      .add("nested", json::Object().add("x", 1));
  CHECK(o.str() ==
        "{\"kernel\": \"03_online_softmax/solution\", \"module\": 3, \"causal\": false, "
        "\"median_ms\": 2.65878391, \"bytes\": 536870912, \"check\": null, "
        "\"nested\": {\"x\": 1}}");
  CHECK(json::Object().str() == "{}");
}

TEST_CASE("bench json: the device block") {
  DeviceInfo dev;
  dev.name = "NVIDIA H100 80GB HBM3";
  dev.cc_major = 9, dev.cc_minor = 0, dev.sm_count = 132;
  dev.sm_clock_khz = 1980000, dev.mem_clock_khz = 2619000;
  dev.total_memory = size_t(85017493504ull);
  dev.peak_fp32_tflops = 66.90816, dev.peak_bandwidth_gbs = 3352.32;
  CHECK(json::device(dev).add("measured_copy_gbs", 3007.88237).str() ==
        "{\"name\": \"NVIDIA H100 80GB HBM3\", \"cc\": \"9.0\", \"sms\": 132, "
        "\"sm_clock_mhz\": 1980, \"mem_clock_mhz\": 2619, \"total_memory_bytes\": 85017493504, "
        "\"peak_fp32_tflops\": 66.90816, \"peak_bandwidth_gbs\": 3352.32, "
        "\"measured_copy_gbs\": 3007.88237}");
}

TEST_CASE("bench json: a document, fields then lists, one row per line") {
  json::Document doc("attn-bench/1");
  doc.field("preset", "\"ladder\"")
      .field("device", json::Object().add("name", "GPU"))
      .list("results", std::vector<json::Object>{json::Object().add("seq_q", 512),
                                                 json::Object().add("seq_q", 1024)})
      .list("oom_probe", std::vector<std::string>{});
  CHECK(doc.str() ==
        "{\n"
        "  \"schema\": \"attn-bench/1\",\n"
        "  \"preset\": \"ladder\",\n"
        "  \"device\": {\"name\": \"GPU\"},\n"
        "  \"results\": [\n"
        "    {\"seq_q\": 512},\n"
        "    {\"seq_q\": 1024}\n"
        "  ],\n"
        "  \"oom_probe\": [\n"
        "  ]\n"
        "}\n");

  const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/attn_test_doc.json";
  REQUIRE(doc.write(path).is_ok());
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  CHECK(text.str() == doc.str());
  std::remove(path.c_str());
  CHECK_FALSE(doc.write("/nonexistent-dir/x.json").is_ok());
}
