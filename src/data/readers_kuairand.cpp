// readers_kuairand.cpp — the KuaiRand-Pure / 1K / 27K reader: the two standard-log periods
// (log_standard_4_08_to_4_21_<v>.csv, log_standard_4_22_to_5_08_<v>.csv; 27K: each in
// `_part1`/`_part2` files) and user_features_<v>.csv, all CSV with a header row.
//
// The shaping decision: columns are found by header name, never by position, and only the
// columns the dataset uses are decoded (user_id, video_id, time_ms and the eight engagement
// flags); the rest of a row is only counted, so column-order differences between releases and
// extra columns pass, while a row with the wrong number of fields or a non-numeric used field is
// malformed (error naming file:line, or skipped and counted with skip_malformed).
//
// Decoding:
//   action    = is_click 1 | is_like 2 | is_follow 4 | is_comment 8 | is_forward 16 |
//               is_hate 32 | long_view 64 | is_profile_enter 128  (each flag 0 or 1; 256 actions)
//   timestamp = time_ms / 1000 (seconds). Each file's events are stable-sorted by time_ms as
//               they are read, so preprocessing's stable sort by seconds keeps millisecond order
//               (events of one user in the same second but in different files keep file order;
//               files are read period by period, part by part, and the 27K parts are
//               consecutive halves of their period).
//   periods   = concatenated: a user's events of both periods form one sequence. Users present
//               in only one period are KEPT — a deliberate difference from recsys-examples,
//               whose pandas inner merge drops them.
//   contextual features (user_features file) user_active_degree, follow_user_num_range,
//               fans_user_num_range, friend_user_num_range, register_days_range: each value
//               ordinal-encoded 1..K by first appearance in the file (0 = the user has no row).
//               The file's range values hold commas ("(0,10]"), so its rows are RFC-4180 parsed.
// The files may sit in the given folder or in its `data/` subfolder (the layout of the
// KuaiRand-*.tar.gz archives).
#include <algorithm>
#include <array>
#include <filesystem>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "data/reader_util.h"
#include "data/readers.h"

namespace hstu {

using detail::LineReader;
using detail::RowErrors;

namespace {

// Engagement columns in bit order: action bit i is set when column kActionColumns[i] is 1.
constexpr std::array<const char*, 8> kActionColumns = {"is_click",   "is_like",         "is_follow",
                                                       "is_comment", "is_forward",      "is_hate",
                                                       "long_view",  "is_profile_enter"};
constexpr std::array<const char*, 5> kContextualColumns = {
    "user_active_degree", "follow_user_num_range", "fans_user_num_range", "friend_user_num_range",
    "register_days_range"};

std::vector<std::string> log_files(const std::string& version) {
  std::vector<std::string> files;
  for (const char* period : {"log_standard_4_08_to_4_21_", "log_standard_4_22_to_5_08_"}) {
    if (version == "27k") {
      for (const char* part : {"_part1.csv", "_part2.csv"})
        files.push_back(period + version + part);
    } else {
      files.push_back(period + version + ".csv");
    }
  }
  return files;
}

std::string features_file(const std::string& version) {
  return "user_features_" + version + ".csv";
}

// The header of a CSV file: column name -> index. Not skippable (a wrong header means a wrong
// file); the error names the file, line 1 and every missing column.
struct Header {
  size_t num_fields = 0;
  std::unordered_map<std::string, size_t> index;

  size_t at(const std::string& name) const { return index.at(name); }
};

Header read_header(LineReader& reader, const std::vector<std::string>& required) {
  std::string_view line;
  if (!reader.next(line)) HSTU_THROW(reader.path(), ": empty file; expected a CSV header row");
  if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // UTF-8 byte order mark
  std::vector<std::string> fields;
  const std::string what = detail::parse_csv_record(line, fields);
  if (!what.empty()) HSTU_THROW(detail::row_message(reader.path(), 1, line, what));
  Header h;
  h.num_fields = fields.size();
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!h.index.emplace(fields[i], i).second) {
      HSTU_THROW(detail::row_message(reader.path(), 1, line,
                                     detail::cat("column \"", fields[i], "\" appears twice")));
    }
  }
  std::string missing;
  for (const std::string& name : required) {
    if (!h.index.contains(name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) {
    HSTU_THROW(
        detail::row_message(reader.path(), 1, line, "header lacks the column(s) " + missing));
  }
  return h;
}

bool parse_id(std::string_view field, int64_t& id) {
  return detail::parse_int(field, id) && id >= 0;
}

// Reads one standard-log file into out.events (appended, then stable-sorted by time_ms).
void read_log(const std::string& path, RawData& out, RowErrors& errors) {
  LineReader reader(path,
                    "a KuaiRand standard log (CSV with header user_id,video_id,...,time_ms,"
                    "is_click,...), in the dataset folder or its data/ subfolder");
  std::vector<std::string> required = {"user_id", "video_id", "time_ms"};
  required.insert(required.end(), kActionColumns.begin(), kActionColumns.end());
  const Header h = read_header(reader, required);
  const size_t user_col = h.at("user_id"), item_col = h.at("video_id"), ms_col = h.at("time_ms");
  std::array<size_t, kActionColumns.size()> action_col{};
  for (size_t i = 0; i < kActionColumns.size(); ++i) action_col[i] = h.at(kActionColumns[i]);

  detail::begin_source(out, path);
  const size_t first = out.events.size();
  std::vector<int64_t> time_ms;  // [events of this file]
  std::vector<std::string_view> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    detail::split(line, ",", fields);
    if (fields.size() != h.num_fields) {
      errors.malformed(reader, line,
                       detail::cat("expected ", h.num_fields, " fields (as in the ",
                                   "header), found ", fields.size()));
      continue;
    }
    RawEvent ev{};
    int64_t ms = 0;
    std::string what;
    if (!parse_id(fields[user_col], ev.user)) {
      what = "user_id is not a non-negative integer";
    } else if (!parse_id(fields[item_col], ev.item)) {
      what = "video_id is not a non-negative integer";
    } else if (!parse_id(fields[ms_col], ms)) {
      what = "time_ms is not a non-negative integer";
    }
    for (size_t i = 0; what.empty() && i < kActionColumns.size(); ++i) {
      int64_t flag = 0;
      if (!detail::parse_int(fields[action_col[i]], flag) || (flag != 0 && flag != 1)) {
        what = detail::cat(kActionColumns[i], " is not 0 or 1");
      } else {
        ev.action |= static_cast<int32_t>(flag) << i;
      }
    }
    if (!what.empty()) {
      errors.malformed(reader, line, what);
      continue;
    }
    ev.timestamp = ms / 1000;
    ev.line = static_cast<int32_t>(reader.line_number());
    out.events.push_back(ev);
    time_ms.push_back(ms);
  }

  // Sorting (time_ms, file index) pairs is the stable sort by time_ms.
  std::vector<std::pair<int64_t, size_t>> keys(time_ms.size());
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = {time_ms[i], i};
  if (std::is_sorted(keys.begin(), keys.end())) return;
  std::sort(keys.begin(), keys.end());
  // Apply the permutation in place, cycle by cycle (no copy of the file's events).
  RawEvent* ev = out.events.data() + first;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].second == i) continue;
    const RawEvent held = ev[i];
    size_t j = i;
    while (keys[j].second != i) {
      const size_t k = keys[j].second;
      ev[j] = ev[k];
      keys[j].second = j;  // done
      j = k;
    }
    ev[j] = held;
    keys[j].second = j;
  }
}

void read_user_features(const std::string& path, RawData& out, RowErrors& errors) {
  LineReader reader(path,
                    "the KuaiRand user features (CSV with header user_id,user_active_degree,...)");
  std::vector<std::string> required = {"user_id"};
  required.insert(required.end(), kContextualColumns.begin(), kContextualColumns.end());
  const Header h = read_header(reader, required);
  const size_t user_col = h.at("user_id");
  std::array<size_t, kContextualColumns.size()> cols{};
  for (size_t c = 0; c < cols.size(); ++c) cols[c] = h.at(kContextualColumns[c]);

  out.contextual_names.assign(kContextualColumns.begin(), kContextualColumns.end());
  std::vector<std::unordered_map<std::string, int32_t>> codes(cols.size());
  std::unordered_map<int64_t, int64_t> user_line;  // raw user id -> line of its row
  std::vector<std::string> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    std::string what = detail::parse_csv_record(line, fields);
    int64_t user = 0;
    if (what.empty() && fields.size() != h.num_fields) {
      what = detail::cat("expected ", h.num_fields, " fields (as in the header), found ",
                         fields.size());
    } else if (what.empty() && !parse_id(fields[user_col], user)) {
      what = "user_id is not a non-negative integer";
    }
    if (what.empty()) {
      const auto [it, fresh] = user_line.emplace(user, reader.line_number());
      if (!fresh) what = detail::cat("user ", user, " already has a row at line ", it->second);
    }
    if (!what.empty()) {
      errors.malformed(reader, line, what);
      continue;
    }
    out.contextual_users.push_back(user);
    for (size_t c = 0; c < cols.size(); ++c) {
      auto& table = codes[c];
      const auto code = table.emplace(fields[cols[c]], static_cast<int32_t>(table.size()) + 1);
      out.contextual_values.push_back(code.first->second);
    }
  }
  for (const auto& table : codes) {
    out.contextual_cardinalities.push_back(static_cast<int32_t>(table.size()) + 1);
  }
}

}  // namespace

std::vector<std::string> kuairand_files(const std::string& version) {
  std::vector<std::string> files = log_files(version);
  files.push_back(features_file(version));
  const size_t n = files.size();
  for (size_t i = 0; i < n; ++i) files.push_back("data/" + files[i]);
  return files;
}

RawData read_kuairand(const std::string& path, const std::string& version, bool skip_malformed) {
  HSTU_CHECK(version == "pure" || version == "1k" || version == "27k", "KuaiRand version \"",
             version, "\" (expected pure, 1k or 27k)");
  const std::vector<std::string> logs = log_files(version);
  std::string dir = path;
  if (!std::filesystem::exists(detail::join_path(path, logs[0])) &&
      std::filesystem::exists(detail::join_path(path, "data/" + logs[0]))) {
    dir = detail::join_path(path, "data");
  }
  RawData out;
  out.name = "kuairand-" + version;
  out.num_actions = 1 << kActionColumns.size();
  RowErrors errors(out, skip_malformed);
  for (const std::string& file : logs) read_log(detail::join_path(dir, file), out, errors);
  read_user_features(detail::join_path(dir, features_file(version)), out, errors);
  return out;
}

}  // namespace hstu
