// metrics_log.h — the run's metrics.jsonl: one JSON object per event.
//
// Each record is one compact JSON line, written and flushed at once, so the file is readable
// (and every complete line parseable) while the run is going and after it is killed; a resumed
// run first cuts the file back to what the run had logged up to its checkpoint (keep_until), then
// appends, so no step is logged twice. It is the one file hstu appends to rather than writing
// whole through AtomicFile.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
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
  // Keeps the lines before the first one that is not a complete JSON object or for which
  // `ends(record)` is true, drops the rest (rewriting the file atomically when anything goes) and
  // returns how many lines were kept.
  int64_t keep_until(const std::function<bool(const Json&)>& ends);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace hstu
