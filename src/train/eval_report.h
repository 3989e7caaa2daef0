// eval_report.h — how metric values (NamedValues) are reported: as JSON objects in
// metrics.jsonl and trainer_state.json, and as the aligned eval table on the terminal.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "io/json.h"
#include "train/metrics.h"

namespace hstu {

// Metric values as a JSON object (non-finite values as null) and back (null as NaN).
Json metrics_to_json(const NamedValues& v);
NamedValues metrics_from_json(const Json& o);

// One row of the eval table: a split ("val", "test", "baseline") and its metric values.
struct EvalRow {
  std::string split;
  NamedValues values;
};

// Formats rows as an aligned table: a header of metric names (in first-seen order across rows),
// one row per split, values with `precision` decimals ("-" where a row lacks a metric,
// "undefined" for a NaN value, e.g. the AUC of a task whose labels hold one class, with a
// "warning: <split> <metric> is undefined (why)" line after the table). Ends with a newline.
std::string format_eval_table(const std::vector<EvalRow>& rows, int precision = 4);
void print_eval_table(std::ostream& out, const std::vector<EvalRow>& rows, int precision = 4);

}  // namespace hstu
