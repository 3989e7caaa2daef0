// metrics_log.cpp — the metrics.jsonl appender.
#include "io/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace hstu {

MetricsLog::MetricsLog(const std::string& run_dir) : path_(run_dir + "/metrics.jsonl") {
  file_ = std::fopen(path_.c_str(), "a");
  HSTU_CHECK(file_ != nullptr, "cannot open ", path_, " for appending: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  std::fclose(file_);
}

void MetricsLog::write(const Json& record) {
  HSTU_CHECK(record.is_object(), path_, ": a metrics record must be a JSON object, got ",
             record.type_name());
  std::string line = json::dump(record);
  line += '\n';
  HSTU_CHECK(
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
      "cannot write ", path_, ": ", std::strerror(errno));
}

int64_t MetricsLog::keep_until(const std::function<bool(const Json&)>& ends) {
  std::ifstream in(path_);
  HSTU_CHECK(in.good(), "cannot read ", path_);
  std::string kept, line;
  int64_t dropped = 0, kept_lines = 0;
  bool cut = false;
  while (std::getline(in, line)) {
    if (!cut) {
      Json r;
      try {
        r = json::parse(line, path_);
      } catch (const Error&) {  // a line torn by a crash: it and everything after go
        cut = true;
      }
      cut = cut || !r.is_object() || ends(r);
    }
    if (cut) {
      ++dropped;
      continue;
    }
    kept += line;
    kept += '\n';
    ++kept_lines;
  }
  if (dropped == 0) return kept_lines;
  std::fclose(file_);
  file_ = nullptr;
  atomic_write_file(path_, kept);
  file_ = std::fopen(path_.c_str(), "a");
  HSTU_CHECK(file_ != nullptr, "cannot open ", path_, " for appending: ", std::strerror(errno));
  return kept_lines;
}

void MetricsLog::log(const std::string& event,
                     std::initializer_list<std::pair<std::string, Json>> fields) {
  Json record = {{"event", event}};
  for (const auto& [k, v] : fields) {
    HSTU_CHECK(!record.contains(k), path_, ": metrics record field \"", k, "\" given twice");
    record[k] = v;
  }
  write(record);
}

}  // namespace hstu
