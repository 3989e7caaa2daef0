// metrics_log.cpp — metrics.jsonl appender and the aligned eval table.
#include "train/metrics_log.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
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

void MetricsLog::write(const json::Value& record) {
  HSTU_CHECK(record.is_object(), path_, ": a metrics record must be a JSON object, got ",
             json::type_name(record.type()));
  std::string line = record.dump();
  line += '\n';
  HSTU_CHECK(
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
      "cannot write ", path_, ": ", std::strerror(errno));
}

void MetricsLog::log(const std::string& event,
                     std::initializer_list<std::pair<std::string, json::Value>> fields) {
  json::Value record = json::Value::object({{"event", event}});
  for (const auto& [k, v] : fields) {
    HSTU_CHECK(record.find(k) == nullptr, path_, ": metrics record field \"", k, "\" given twice");
    record.as_object().emplace_back(k, v);
  }
  write(record);
}

std::string format_eval_table(const std::vector<EvalRow>& rows, int precision) {
  std::vector<std::string> columns;
  for (const EvalRow& row : rows) {
    for (const auto& [name, v] : row.values) {
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
    }
  }
  // cells[r][0] is the split, cells[r][1 + c] the value of columns[c]; row 0 is the header.
  std::vector<std::vector<std::string>> cells;
  cells.emplace_back(1, "split");
  cells[0].insert(cells[0].end(), columns.begin(), columns.end());
  for (const EvalRow& row : rows) {
    std::vector<std::string> line(columns.size() + 1, "-");
    line[0] = row.split;
    for (const auto& [name, v] : row.values) {
      const size_t c =
          static_cast<size_t>(std::find(columns.begin(), columns.end(), name) - columns.begin());
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
      line[1 + c] = std::isnan(v) ? "nan" : buf;
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(columns.size() + 1, 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::string out;
  for (const auto& line : cells) {
    out += line[0];
    out.append(width[0] - line[0].size(), ' ');
    for (size_t c = 1; c < line.size(); ++c) {
      out.append(2 + width[c] - line[c].size(), ' ');  // metric columns are right-aligned
      out += line[c];
    }
    out += '\n';
  }
  return out;
}

void print_eval_table(std::ostream& out, const std::vector<EvalRow>& rows, int precision) {
  out << format_eval_table(rows, precision) << std::flush;
}

json::Value metrics_to_json(const NamedValues& v) {
  json::Value o = json::Value::object();
  for (const auto& [k, x] : v) o[k] = std::isfinite(x) ? json::Value(x) : json::Value();
  return o;
}

NamedValues metrics_from_json(const json::Value& o) {
  NamedValues v;
  if (o.is_object())
    for (const auto& [k, x] : o.as_object()) v.emplace_back(k, x.is_null() ? NAN : x.as_double());
  return v;
}

}  // namespace hstu
