// metrics_log.cpp — the metrics.jsonl appender.
#include "io/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

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
