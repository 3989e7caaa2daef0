// eval_report.cpp — metric values as JSON and the aligned eval table (see eval_report.h).
#include "train/eval_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace hstu {

namespace {

// Why a metric named `name` ("<metric>/<task>" or a plain name) can be NaN (metrics.h).
std::string why_undefined(const std::string& name) {
  const std::string m = name.substr(0, name.find('/'));
  if (m.find("AUC") != std::string::npos)
    return "the evaluated labels hold one class only: AUC needs positives and negatives";
  if (m == "Recall" || m == "AP")
    return "no evaluated candidate has a positive label: " + m + " divides by the positives";
  if (m == "Precision")
    return "no evaluated candidate is predicted positive (sigmoid(logit) > 0.5): precision "
           "divides by the positive predictions";
  if (m == "F1") return "no positive label and no positive prediction: TP + FP + FN = 0";
  return "no evaluated sample defines it";
}

}  // namespace

std::string format_eval_table(const std::vector<EvalRow>& rows, int precision) {
  std::vector<std::string> columns;
  for (const EvalRow& row : rows) {
    for (const auto& [name, v] : row.values) {
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
    }
  }
  // cells[r][0] is the split, cells[r][1 + c] the value of columns[c]; row 0 is the header.
  std::vector<std::vector<std::string>> cells;
  std::string warnings;  // one line per undefined value, after the table
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
      line[1 + c] = std::isnan(v) ? "undefined" : buf;
      if (std::isnan(v))
        warnings +=
            "warning: " + row.split + " " + name + " is undefined (" + why_undefined(name) + ")\n";
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
  return out + warnings;
}

void print_eval_table(std::ostream& out, const std::vector<EvalRow>& rows, int precision) {
  out << format_eval_table(rows, precision) << std::flush;
}

Json metrics_to_json(const NamedValues& v) {
  Json o = Json::object();
  for (const auto& [k, x] : v) o[k] = std::isfinite(x) ? Json(x) : Json();
  return o;
}

NamedValues metrics_from_json(const Json& o) {
  NamedValues v;
  if (o.is_object())
    for (const auto& [k, x] : o.items())
      v.emplace_back(k, x.is_null() ? NAN : json::double_at(o, k));
  return v;
}

}  // namespace hstu
