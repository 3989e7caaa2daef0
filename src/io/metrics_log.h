// metrics_log.h — the run's metrics.jsonl: one JSON object per event.
//
// Each record is one compact JSON line, written and flushed at once, so the file is readable
// (and every complete line parseable) while the run is going and after it is killed; a resumed
// run appends to the same file. It is the one file hstu appends to rather than writing whole
// through AtomicFile.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "io/json.h"

namespace hstu {

class MetricsLog {
 public:
  // Opens (creating if needed) <run_dir>/metrics.jsonl for appending; run_dir must exist.
  explicit MetricsLog(const std::string& run_dir);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends one record (must be an object) as a line and flushes it.
  void write(const Json& record);
  // Appends {"event": event, <fields>...}, e.g. log("train", {{"step", 10}, {"loss", 6.1}}).
  void log(const std::string& event, std::initializer_list<std::pair<std::string, Json>> fields);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace hstu
