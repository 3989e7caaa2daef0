// readers.h — readers of the raw public dataset formats, producing raw events in file order.
//
// A reader validates every row and either throws an hstu::Error that quotes `path:line` and the
// bad line, or (skip_malformed = true) skips the row and counts it in RawData::num_malformed.
// Readers keep raw ids; preprocessing (preprocess.h) sorts, remaps and writes them. Each reader
// decodes its format's action into a small non-negative integer, documented at the reader.
//
// Adding a format (e.g. KuaiRand): write read_<format>() in readers_<format>.cpp and add its
// dataset names to the table in readers.cpp (reader + the list of files it reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hstu {

// One interaction as read from a raw file.
struct RawEvent {
  int64_t user;       // raw user id (an index into RawData::user_names when those are set)
  int64_t item;       // raw item id (an index into RawData::item_names when those are set)
  int64_t timestamp;  // seconds
  int32_t action;     // reader-specific action value, in [0, RawData::num_actions)
  int32_t line;       // 1-based line of the row in its source file
};

// A file that events were read from: events [first_event, next source's first_event).
struct RawSource {
  std::string path;
  int64_t first_event = 0;
};

struct RawData {
  std::string name;              // dataset name, e.g. "ml-1m"
  std::vector<RawEvent> events;  // [E] in file order (file order breaks timestamp ties)
  std::vector<RawSource> sources;
  int32_t num_actions = 0;  // action vocabulary size (max action + 1)

  // The item catalogue as raw ids (e.g. every movie of movies.dat). Preprocessing adds any rated
  // item missing from it; evaluation ranks against the whole catalogue.
  std::vector<int64_t> catalogue;

  // String ids (Amazon): raw id k stands for user_names[k] / item_names[k]. The names are sorted,
  // so raw-id order is name order. Empty when the format has numeric ids.
  std::vector<std::string> user_names;
  std::vector<std::string> item_names;

  // Per-user categorical features (ML-1M users.dat), ordinal-encoded by first appearance as
  // 1..K; 0 = the user has no row. contextual_values[i * C + c] belongs to contextual_users[i].
  std::vector<std::string> contextual_names;      // [C]
  std::vector<int32_t> contextual_cardinalities;  // [C] = K + 1
  std::vector<int64_t> contextual_users;          // [Uc] raw user ids
  std::vector<int32_t> contextual_values;         // [Uc*C]

  int64_t num_malformed = 0;                    // rows skipped (skip_malformed = true)
  std::vector<std::string> malformed_examples;  // the first few skipped rows' messages
  int64_t num_filtered = 0;                     // valid rows removed by a dataset filter

  // The file an event came from.
  const std::string& source_of(int64_t event) const;
};

// MovieLens-1M folder: ratings.dat (UserID::MovieID::Rating::Timestamp, rating 1..5 -> action =
// rating, num_actions 6), users.dat (UserID::Gender::Age::Occupation::Zip-code -> contextual
// features sex, age_group, occupation, zip_code), movies.dat (MovieID::Title::Genres, latin-1;
// the catalogue). All three files are required.
RawData read_movielens_1m(const std::string& dir, bool skip_malformed = false);

// MovieLens-20M / ml-latest / ml-latest-small folder: ratings.csv (header
// userId,movieId,rating,timestamp; half-star ratings 0.5..5 -> action = 2 * rating in 1..10,
// num_actions 11) and movies.csv (header movieId,title,genres, RFC-4180 quoting; the catalogue).
RawData read_movielens_csv(const std::string& dir, const std::string& name,
                           bool skip_malformed = false);

// MovieLens-100K folder: u.data (tab-separated user item rating timestamp, rating 1..5 ->
// action = rating, num_actions 6) and, when present, u.item (`|`-separated, first field the
// item id; adds to the catalogue).
RawData read_movielens_100k(const std::string& dir, bool skip_malformed = false);

// Amazon Books ratings file (headerless user,item,rating,timestamp; string ids; rating 1..5 ->
// action = rating, num_actions 6), with the paper's filter: keep rows whose item and user each
// have >= 5 rows in the raw file (one pass); the catalogue is the items left; then drop users
// with < 5 remaining rows.
RawData read_amazon_books(const std::string& file, bool skip_malformed = false);

// Dispatches on the dataset name ("ml-1m", "ml-20m", "ml-latest", "ml-latest-small", "ml-100k",
// "amzn-books"); `path` is the folder of the raw files (the file itself for amzn-books).
RawData read_raw(const std::string& name, const std::string& path, bool skip_malformed = false);

// True when read_raw knows the name.
bool is_raw_dataset(const std::string& name);

// The raw files read_raw(name, path) would read that exist (cache keys), in a fixed order.
std::vector<std::string> raw_source_files(const std::string& name, const std::string& path);

}  // namespace hstu
