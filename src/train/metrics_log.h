// metrics_log.h — the run's metrics.jsonl (one JSON object per event) and the eval table.
//
// Each record is one compact JSON line, written and flushed at once, so the file is readable
// (and every complete line parseable) while the run is going and after it is killed; a resumed
// run appends to the same file.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "train/json.h"
#include "train/metrics.h"

namespace hstu {

class MetricsLog {
 public:
  // Opens (creating if needed) <run_dir>/metrics.jsonl for appending; run_dir must exist.
  explicit MetricsLog(const std::string& run_dir);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends one record (must be an object) as a line and flushes it.
  void write(const json::Value& record);
  // Appends {"event": event, <fields>...}, e.g. log("train", {{"step", 10}, {"loss", 6.1}}).
  void log(const std::string& event,
           std::initializer_list<std::pair<std::string, json::Value>> fields);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Metric values as a JSON object (non-finite values as null) and back (null as NaN).
json::Value metrics_to_json(const NamedValues& v);
NamedValues metrics_from_json(const json::Value& o);

// One row of the eval table: a split ("val", "test", "baseline") and its metric values.
struct EvalRow {
  std::string split;
  NamedValues values;
};

// Formats rows as an aligned table: a header of metric names (in first-seen order across rows),
// one row per split, values with `precision` decimals ("-" where a row lacks a metric). Ends
// with a newline.
std::string format_eval_table(const std::vector<EvalRow>& rows, int precision = 4);
void print_eval_table(std::ostream& out, const std::vector<EvalRow>& rows, int precision = 4);

}  // namespace hstu
