// test_metrics_log.cpp — metrics.jsonl lines: one parseable object each, flushed at once,
// appended across reopenings.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "io/json.h"
#include "io/metrics_log.h"

namespace hstu {
namespace {

using test::error_of;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MetricsLog, OneFlushedJsonObjectPerLine) {
  test::TempDir dir;
  {
    MetricsLog log(dir.path());
    EXPECT_EQ(log.path(), dir.file("metrics.jsonl"));
    log.log("train", {{"step", 10}, {"epoch", 0}, {"loss", 6.5}, {"tokens_per_s", 41200.0}});
    // Flushed at once: readable while the log is open.
    EXPECT_EQ(
        test::read_file(log.path()),
        "{\"event\":\"train\",\"step\":10,\"epoch\":0,\"loss\":6.5,\"tokens_per_s\":41200.0}\n");
    log.write({{"event", "eval"},
               {"split", "val"},
               {"HR@10", 0.125},
               {"note", "multi\nline"},
               {"nan", NAN}});
    EXPECT_NE(error_of([&] { log.write(Json::array()); }).find("must be a JSON object, got array"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                log.log("x", {{"event", 1}});
              }).find("\"event\" given twice"),
              std::string::npos);
  }
  {
    MetricsLog resumed(dir.path());  // appends
    resumed.log("train", {{"step", 11}});
  }
  const std::vector<std::string> lines = lines_of(test::read_file(dir.file("metrics.jsonl")));
  ASSERT_EQ(lines.size(), 3u);
  const Json eval = json::parse(lines[1]);
  EXPECT_EQ(eval.at("split"), "val");
  EXPECT_EQ(eval.at("note"), "multi\nline");
  EXPECT_TRUE(eval.at("nan").is_null());  // a non-finite double has no JSON form
  EXPECT_EQ(json::int_at(json::parse(lines[2]), "step"), 11);

  const std::string missing = dir.file("no_such_run");
  EXPECT_NE(error_of([&] { MetricsLog log(missing); }).find(missing + "/metrics.jsonl"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
