// readers_amazon.cpp — the Amazon Books ratings reader (headerless user,item,rating,timestamp
// with string ids) and the paper's 5-core-style filter.
//
// The filter is the paper's, not an iterative k-core: counts come from the raw file once, rows
// of rare users or items go, the catalogue is fixed at that point, and only then are users left
// with fewer than 5 rows dropped (so the catalogue may hold items no kept user rated).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "data/reader_util.h"
#include "data/readers.h"

namespace hstu {

namespace {

constexpr int64_t kMinItemRows = 5;  // raw rows an item needs to be kept
constexpr int64_t kMinUserRows = 5;  // raw rows (and kept rows) a user needs to be kept

// Interns strings to dense codes in order of first appearance.
class Interner {
 public:
  uint32_t code(std::string_view s) {
    const auto [it, fresh] =
        codes_.try_emplace(std::string(s), static_cast<uint32_t>(names_.size()));
    if (fresh) names_.push_back(it->first);
    return it->second;
  }
  size_t size() const { return names_.size(); }
  const std::string& name(uint32_t code) const { return names_[code]; }

 private:
  std::unordered_map<std::string, uint32_t> codes_;
  std::vector<std::string> names_;
};

struct Row {
  uint32_t user, item;  // interned codes
  int64_t timestamp;
  int32_t rating;
  int32_t line;
};

// Renumbers the kept codes (keep[code] true) so that code order is name order; returns the new
// code of each old code (-1 when dropped) and appends the sorted names to `names`.
std::vector<int64_t> sorted_codes(const Interner& interner, const std::vector<char>& keep,
                                  std::vector<std::string>& names) {
  std::vector<uint32_t> kept;
  for (uint32_t c = 0; c < interner.size(); ++c) {
    if (keep[c]) kept.push_back(c);
  }
  std::sort(kept.begin(), kept.end(),
            [&](uint32_t a, uint32_t b) { return interner.name(a) < interner.name(b); });
  std::vector<int64_t> remap(interner.size(), -1);
  for (size_t i = 0; i < kept.size(); ++i) {
    remap[kept[i]] = static_cast<int64_t>(i);
    names.push_back(interner.name(kept[i]));
  }
  return remap;
}

}  // namespace

RawData read_amazon_books(const std::string& file, bool skip_malformed) {
  RawData out;
  out.name = "amzn-books";
  out.num_actions = 6;
  detail::LineReader reader(file,
                            "the Amazon Books ratings (headerless CSV: user,item,rating,"
                            "timestamp; e.g. ratings_Books.csv)");
  detail::RowErrors errors(out, skip_malformed);
  Interner users, items;
  std::vector<Row> rows;  // [valid rows] in file order
  std::vector<std::string_view> fields;
  std::string_view line;
  while (reader.next(line)) {
    if (detail::is_blank(line)) continue;
    detail::split(line, ",", fields);
    if (fields.size() != 4) {
      errors.malformed(reader, line, detail::cat("expected 4 fields, found ", fields.size()));
      continue;
    }
    double rating = 0;
    int64_t timestamp = 0;
    const char* what = nullptr;
    if (fields[0].empty()) {
      what = "empty user id";
    } else if (fields[1].empty()) {
      what = "empty item id";
    } else if (!detail::parse_double(fields[2], rating) || rating != std::round(rating) ||
               rating < 1 || rating > 5) {
      what = "rating is not an integer in 1..5";
    } else if (!detail::parse_int(fields[3], timestamp) || timestamp < 0) {
      what = "timestamp is not a non-negative integer";
    }
    if (what != nullptr) {
      errors.malformed(reader, line, what);
      continue;
    }
    rows.push_back({users.code(fields[0]), items.code(fields[1]), timestamp,
                    static_cast<int32_t>(rating), static_cast<int32_t>(reader.line_number())});
  }

  // One-pass filter on raw counts.
  std::vector<int64_t> user_rows(users.size(), 0), item_rows(items.size(), 0);
  for (const Row& r : rows) {
    ++user_rows[r.user];
    ++item_rows[r.item];
  }
  auto row_kept = [&](const Row& r) {
    return user_rows[r.user] >= kMinUserRows && item_rows[r.item] >= kMinItemRows;
  };
  // The catalogue: items of the kept rows. Then users with too few kept rows go.
  std::vector<char> item_kept(items.size(), 0);
  std::vector<int64_t> user_kept_rows(users.size(), 0);
  for (const Row& r : rows) {
    if (!row_kept(r)) continue;
    item_kept[r.item] = 1;
    ++user_kept_rows[r.user];
  }
  std::vector<char> user_kept(users.size(), 0);
  for (size_t u = 0; u < users.size(); ++u) user_kept[u] = user_kept_rows[u] >= kMinUserRows;

  const std::vector<int64_t> user_id = sorted_codes(users, user_kept, out.user_names);
  const std::vector<int64_t> item_id = sorted_codes(items, item_kept, out.item_names);
  out.catalogue.resize(out.item_names.size());
  std::iota(out.catalogue.begin(), out.catalogue.end(), int64_t{0});

  detail::begin_source(out, file);
  for (const Row& r : rows) {
    if (!row_kept(r) || !user_kept[r.user]) {
      ++out.num_filtered;
      continue;
    }
    out.events.push_back({user_id[r.user], item_id[r.item], r.timestamp, r.rating, r.line});
  }
  return out;
}

}  // namespace hstu
