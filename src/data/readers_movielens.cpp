// readers_movielens.cpp — the MovieLens readers: ML-1M (`::` files), ML-20M / ml-latest(-small)
// (CSV with header and RFC-4180 quoting) and ML-100K (tab-separated u.data, `|` u.item).
//
// Only ids, ratings and timestamps are decoded; titles and genres are skipped as bytes, which is
// what lets latin-1 movies.dat and quoted CSV titles through without a text decoder.
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "data/reader_util.h"
#include "data/readers.h"

namespace hstu {

using detail::LineReader;
using detail::RowErrors;

namespace {

constexpr int kMaxCsvRecordLines = 16;  // a quoted field may span lines, but not the whole file

bool parse_id(std::string_view field, int64_t& id) {
  return detail::parse_int(field, id) && id >= 0;
}

// One `user item rating timestamp` row whose four fields are already split; integer ratings in
// [1, 5] become the action. Returns "" or what is wrong.
std::string parse_integer_rating_row(const std::vector<std::string_view>& f, RawEvent& ev) {
  int64_t rating = 0;
  if (!parse_id(f[0], ev.user)) return "user id is not a non-negative integer";
  if (!parse_id(f[1], ev.item)) return "item id is not a non-negative integer";
  if (!detail::parse_int(f[2], rating)) return "rating is not an integer";
  if (rating < 1 || rating > 5) return detail::cat("rating ", rating, " is outside 1..5");
  if (!parse_id(f[3], ev.timestamp)) return "timestamp is not a non-negative integer";
  ev.action = static_cast<int32_t>(rating);
  return "";
}

// Reads `<sep>`-separated rating rows (ratings.dat, u.data) into out.events.
void read_integer_ratings(const std::string& path, const std::string& expected,
                          std::string_view sep, RawData& out, bool skip_malformed) {
  LineReader reader(path, expected);
  RowErrors errors(out, skip_malformed);
  detail::begin_source(out, path);
  std::vector<std::string_view> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    detail::split(line, sep, fields);
    if (fields.size() != 4) {
      errors.malformed(reader, line, detail::cat("expected 4 fields, found ", fields.size()));
      continue;
    }
    RawEvent ev{};
    const std::string what = parse_integer_rating_row(fields, ev);
    if (!what.empty()) {
      errors.malformed(reader, line, what);
      continue;
    }
    ev.line = static_cast<int32_t>(reader.line_number());
    out.events.push_back(ev);
  }
}

// Reads a catalogue file whose rows start with `<id><sep>` and have at least `min_fields`
// fields (movies.dat, u.item).
void read_catalogue(const std::string& path, const std::string& expected, std::string_view sep,
                    size_t min_fields, RawData& out, bool skip_malformed) {
  LineReader reader(path, expected);
  RowErrors errors(out, skip_malformed);
  std::vector<std::string_view> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    detail::split(line, sep, fields);
    int64_t id = 0;
    if (fields.size() < min_fields) {
      errors.malformed(
          reader, line,
          detail::cat("expected at least ", min_fields, " fields, found ", fields.size()));
    } else if (!parse_id(fields[0], id)) {
      errors.malformed(reader, line, "item id is not a non-negative integer");
    } else {
      out.catalogue.push_back(id);
    }
  }
}

// Checks the header line of a CSV file (not skippable: a wrong header means a wrong file).
void expect_header(LineReader& reader, std::string_view header) {
  std::string_view line;
  if (!reader.next(line)) HSTU_THROW(reader.path(), ": empty file; expected the header ", header);
  if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // UTF-8 byte order mark
  if (line != header) {
    HSTU_THROW(detail::row_message(reader.path(), 1, line,
                                   detail::cat("expected the header \"", header, "\"")));
  }
}

}  // namespace

RawData read_movielens_1m(const std::string& dir, bool skip_malformed) {
  RawData out;
  out.name = "ml-1m";
  out.num_actions = 6;
  read_integer_ratings(detail::join_path(dir, "ratings.dat"),
                       "the MovieLens-1M ratings (UserID::MovieID::Rating::Timestamp)", "::", out,
                       skip_malformed);

  // users.dat: every column but the id becomes an ordinal-encoded contextual feature.
  const std::string users_path = detail::join_path(dir, "users.dat");
  LineReader reader(users_path,
                    "the MovieLens-1M users (UserID::Gender::Age::Occupation::Zip-code)");
  RowErrors errors(out, skip_malformed);
  out.contextual_names = {"sex", "age_group", "occupation", "zip_code"};
  constexpr size_t kFeatures = 4;
  std::vector<std::unordered_map<std::string, int32_t>> codes(kFeatures);
  std::unordered_map<int64_t, int64_t> user_line;  // raw user id -> line of its row
  std::vector<std::string_view> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    detail::split(line, "::", fields);
    int64_t user = 0;
    if (fields.size() != kFeatures + 1) {
      errors.malformed(reader, line, detail::cat("expected 5 fields, found ", fields.size()));
      continue;
    }
    if (!parse_id(fields[0], user)) {
      errors.malformed(reader, line, "user id is not a non-negative integer");
      continue;
    }
    const auto [it, fresh] = user_line.emplace(user, reader.line_number());
    if (!fresh) {
      errors.malformed(reader, line,
                       detail::cat("user ", user, " already has a row at line ", it->second));
      continue;
    }
    out.contextual_users.push_back(user);
    for (size_t c = 0; c < kFeatures; ++c) {
      auto& table = codes[c];
      const auto code =
          table.emplace(std::string(fields[c + 1]), static_cast<int32_t>(table.size()) + 1);
      out.contextual_values.push_back(code.first->second);
    }
  }
  for (const auto& table : codes) {
    out.contextual_cardinalities.push_back(static_cast<int32_t>(table.size()) + 1);
  }

  read_catalogue(detail::join_path(dir, "movies.dat"),
                 "the MovieLens-1M movies (MovieID::Title::Genres)", "::", 3, out, skip_malformed);
  return out;
}

RawData read_movielens_csv(const std::string& dir, const std::string& name, bool skip_malformed) {
  RawData out;
  out.name = name;
  out.num_actions = 11;
  RowErrors errors(out, skip_malformed);
  {
    const std::string path = detail::join_path(dir, "ratings.csv");
    LineReader reader(path, "the MovieLens ratings (CSV: userId,movieId,rating,timestamp)");
    expect_header(reader, "userId,movieId,rating,timestamp");
    detail::begin_source(out, path);
    std::vector<std::string_view> fields;
    std::string_view line;
    while (reader.next(line)) {
      if (detail::is_blank(line)) continue;
      detail::split(line, ",", fields);
      if (fields.size() != 4) {
        errors.malformed(reader, line, detail::cat("expected 4 fields, found ", fields.size()));
        continue;
      }
      RawEvent ev{};
      double rating = 0;
      const char* what = nullptr;
      if (!parse_id(fields[0], ev.user)) {
        what = "userId is not a non-negative integer";
      } else if (!parse_id(fields[1], ev.item)) {
        what = "movieId is not a non-negative integer";
      } else if (!detail::parse_double(fields[2], rating)) {
        what = "rating is not a number";
      } else if (!parse_id(fields[3], ev.timestamp)) {
        what = "timestamp is not a non-negative integer";
      }
      const double stars2 = std::round(rating * 2);
      if (what == nullptr && (std::abs(rating * 2 - stars2) > 1e-6 || stars2 < 1 || stars2 > 10)) {
        what = "rating is not a half-star value in 0.5..5";
      }
      if (what != nullptr) {
        errors.malformed(reader, line, what);
        continue;
      }
      ev.action = static_cast<int32_t>(stars2);
      ev.line = static_cast<int32_t>(reader.line_number());
      out.events.push_back(ev);
    }
  }
  {
    LineReader reader(detail::join_path(dir, "movies.csv"),
                      "the MovieLens movies (CSV: movieId,title,genres)");
    expect_header(reader, "movieId,title,genres");
    std::vector<std::string> fields;
    std::string record;
    std::string_view line;
    while (reader.next(line)) {
      if (detail::is_blank(line)) continue;
      const int64_t first_line = reader.line_number();
      record.assign(line);
      std::string what = detail::parse_csv_record(record, fields);
      // A quoted field may hold line breaks: keep appending lines until the record closes.
      for (int extra = 1; what == detail::kUnterminated && extra < kMaxCsvRecordLines; ++extra) {
        if (!reader.next(line)) break;
        record += '\n';
        record += line;
        what = detail::parse_csv_record(record, fields);
      }
      int64_t id = 0;
      if (what.empty() && fields.size() != 3) {
        what = detail::cat("expected 3 fields, found ", fields.size());
      } else if (what.empty() && !parse_id(fields[0], id)) {
        what = "movieId is not a non-negative integer";
      }
      if (!what.empty()) {
        errors.malformed(reader.path(), first_line, record, what);
        continue;
      }
      out.catalogue.push_back(id);
    }
  }
  return out;
}

RawData read_movielens_100k(const std::string& dir, bool skip_malformed) {
  RawData out;
  out.name = "ml-100k";
  out.num_actions = 6;
  read_integer_ratings(detail::join_path(dir, "u.data"),
                       "the MovieLens-100K ratings (tab-separated: user item rating timestamp)",
                       "\t", out, skip_malformed);
  const std::string items = detail::join_path(dir, "u.item");
  if (std::filesystem::exists(items)) {
    read_catalogue(items, "the MovieLens-100K items (`|`-separated, item id first)", "|", 2, out,
                   skip_malformed);
  }
  return out;
}

}  // namespace hstu
