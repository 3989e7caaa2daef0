// test_metrics_log.cpp — metrics.jsonl lines (one parseable object each, appended across
// reopenings) and the aligned eval table.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "train/metrics_log.h"

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
    log.write(json::Value::object({{"event", "eval"},
                                   {"split", "val"},
                                   {"HR@10", 0.125},
                                   {"note", "multi\nline"},
                                   {"nan", NAN}}));
    EXPECT_NE(error_of([&] { log.write(json::Value::array()); }).find("must be a JSON object"),
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
  const json::Value eval = json::parse(lines[1]);
  EXPECT_EQ(eval.at("split").as_string(), "val");
  EXPECT_EQ(eval.at("note").as_string(), "multi\nline");
  EXPECT_TRUE(eval.at("nan").is_null());
  EXPECT_EQ(json::parse(lines[2]).at("step").as_int(), 11);

  const std::string missing = dir.file("no_such_run");
  EXPECT_NE(error_of([&] { MetricsLog log(missing); }).find(missing + "/metrics.jsonl"),
            std::string::npos);
}

TEST(EvalTable, AlignedColumns) {
  const std::vector<EvalRow> rows = {
      {"val", {{"HR@10", 0.12345}, {"NDCG@10", 0.0625}, {"MRR", 0.05}}},
      {"test", {{"HR@10", 0.1}, {"NDCG@10", NAN}, {"MRR", 0.04}}},
      {"baseline", {{"HR@10", 0.01}, {"AUC", 0.5}}},
  };
  EXPECT_EQ(format_eval_table(rows),
            "split      HR@10  NDCG@10     MRR     AUC\n"
            "val       0.1235   0.0625  0.0500       -\n"
            "test      0.1000      nan  0.0400       -\n"
            "baseline  0.0100        -       -  0.5000\n");
  std::ostringstream out;
  print_eval_table(out, {{"val", {{"AUC", 0.75}}}}, 2);
  EXPECT_EQ(out.str(), "split   AUC\nval    0.75\n");
}

}  // namespace
}  // namespace hstu
