// readers.cpp — the dataset-name table of the raw readers and the helpers they share (line
// reading, malformed-row policy, splitting, number parsing).
//
// The name table is the single place that knows which reader and which files belong to a
// dataset name; the cache key of open_dataset() is built from the same file list.
#include "data/readers.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data/reader_util.h"

namespace hstu {
namespace detail {

namespace {
constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kMaxQuoted = 160;  // bytes of a bad line quoted in an error message
constexpr size_t kMaxExamples = 5;  // skipped-row messages kept for the log
}  // namespace

LineReader::LineReader(const std::string& path, const std::string& expected)
    : path_(path), file_(std::fopen(path.c_str(), "rb")), buf_(kChunk) {
  if (!file_) {
    const int err = errno;
    HSTU_THROW(path, ": cannot open (", std::strerror(err), "); expected ", expected);
  }
}

bool LineReader::refill() {
  if (eof_) return false;
  if (begin_ > 0) {  // move the partial line to the front
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);  // a line longer than the buffer
  const size_t n = std::fread(buf_.data() + end_, 1, buf_.size() - end_, file_.get());
  if (n == 0) {
    if (std::ferror(file_.get())) HSTU_THROW(path_, ": read error after line ", line_number_);
    eof_ = true;
    return false;
  }
  end_ += n;
  return true;
}

bool LineReader::next(std::string_view& line) {
  size_t scanned = begin_;
  for (;;) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(buf_.data() + scanned, '\n', end_ - scanned);
    if (nl != nullptr) {
      size_t len = static_cast<const char*>(nl) - start;
      begin_ += len + 1;
      if (len > 0 && start[len - 1] == '\r') --len;
      line = std::string_view(start, len);
      ++line_number_;
      return true;
    }
    const size_t pending = end_ - begin_;
    if (!refill()) {
      if (pending == 0) return false;
      size_t len = pending;
      const char* last = buf_.data() + begin_;
      if (last[len - 1] == '\r') --len;
      begin_ = end_;
      line = std::string_view(last, len);
      ++line_number_;
      return true;
    }
    scanned = begin_ + pending;
  }
}

std::string row_message(const std::string& path, int64_t line_number, std::string_view line,
                        const std::string& what) {
  std::string quoted(line.substr(0, kMaxQuoted));
  if (line.size() > kMaxQuoted) quoted += "...";
  return detail::cat(path, ":", line_number, ": ", what, ": \"", quoted, "\"");
}

void RowErrors::malformed(const std::string& path, int64_t line_number, std::string_view line,
                          const std::string& what) {
  std::string msg = row_message(path, line_number, line, what);
  if (!skip_) {
    throw Error(msg + " (set skip_malformed to skip and count such rows)", __FILE__, __LINE__);
  }
  ++out_.num_malformed;
  if (out_.malformed_examples.size() < kMaxExamples) out_.malformed_examples.push_back(msg);
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t") == std::string_view::npos;
}

void split(std::string_view line, std::string_view sep, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  for (;;) {
    const size_t pos = line.find(sep, start);
    if (pos == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return;
    }
    fields.push_back(line.substr(start, pos - start));
    start = pos + sep.size();
  }
}

std::string parse_csv_record(std::string_view record, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  size_t i = 0;
  for (;;) {  // one field per iteration
    field.clear();
    if (i < record.size() && record[i] == '"') {
      ++i;
      for (;;) {
        if (i >= record.size()) return std::string(kUnterminated);
        if (record[i] == '"') {
          if (i + 1 < record.size() && record[i + 1] == '"') {  // "" is an escaped quote
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += record[i++];
      }
      if (i < record.size() && record[i] != ',') {
        return detail::cat("unexpected character after closing quote at column ", i + 1);
      }
    } else {
      const size_t end = std::min(record.find(',', i), record.size());
      const std::string_view raw = record.substr(i, end - i);
      if (raw.find('"') != std::string_view::npos) {
        return detail::cat("quote inside an unquoted field at column ", i + 1);
      }
      field.assign(raw);
      i = end;
    }
    fields.push_back(field);
    if (i >= record.size()) return "";
    ++i;  // the comma
  }
}

bool parse_int(std::string_view field, int64_t& value) {
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  return ec == std::errc() && ptr == end && !field.empty();
}

bool parse_double(std::string_view field, double& value) {
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  return ec == std::errc() && ptr == end && !field.empty() && std::isfinite(value);
}

void begin_source(RawData& out, const std::string& path) {
  out.sources.push_back({path, static_cast<int64_t>(out.events.size())});
}

std::string join_path(const std::string& dir, const std::string& file) {
  return (std::filesystem::path(dir) / file).string();
}

}  // namespace detail

const std::string& RawData::source_of(int64_t event) const {
  HSTU_CHECK(!sources.empty() && event >= 0 && event < static_cast<int64_t>(events.size()),
             "event ", event, " of ", events.size());
  auto it = std::upper_bound(sources.begin(), sources.end(), event,
                             [](int64_t e, const RawSource& s) { return e < s.first_event; });
  return std::prev(it)->path;
}

// readers_kuairand.cpp: the reader (version pure | 1k | 27k) and the files it may read.
RawData read_kuairand(const std::string& path, const std::string& version, bool skip_malformed);
std::vector<std::string> kuairand_files(const std::string& version);

namespace {

struct RawFormat {
  const char* name;
  std::function<RawData(const std::string& path, bool skip)> read;
  std::vector<std::string> files;  // relative to the folder; empty = the path is the file
};

const std::vector<RawFormat>& formats() {
  static const std::vector<RawFormat> table = [] {
    std::vector<RawFormat> t;
    t.push_back({"ml-1m", read_movielens_1m, {"ratings.dat", "users.dat", "movies.dat"}});
    for (const char* name : {"ml-20m", "ml-latest", "ml-latest-small"}) {
      t.push_back({name,
                   [name](const std::string& p, bool s) { return read_movielens_csv(p, name, s); },
                   {"ratings.csv", "movies.csv"}});
    }
    t.push_back({"ml-100k", read_movielens_100k, {"u.data", "u.item"}});
    t.push_back({"amzn-books", read_amazon_books, {}});
    for (const char* name : {"kuairand-pure", "kuairand-1k", "kuairand-27k"}) {
      const std::string version = std::string(name).substr(9);  // after "kuairand-"
      t.push_back({name,
                   [version](const std::string& p, bool s) { return read_kuairand(p, version, s); },
                   kuairand_files(version)});
    }
    return t;
  }();
  return table;
}

const RawFormat& find_format(const std::string& name) {
  for (const RawFormat& f : formats()) {
    if (name == f.name) return f;
  }
  std::string known;
  for (const RawFormat& f : formats()) known += std::string(known.empty() ? "" : ", ") + f.name;
  HSTU_THROW("unknown dataset name \"", name, "\" (raw readers exist for: ", known,
             "; or use \"synthetic\")");
}

// The format of `name`, checking that a path was given.
const RawFormat& find_format(const std::string& name, const std::string& path) {
  const RawFormat& format = find_format(name);
  if (path.empty()) {
    HSTU_THROW("dataset \"", name, "\" needs DatasetArgs.dataset_path (the folder of its raw ",
               "files, or the ratings file for amzn-books)");
  }
  return format;
}

}  // namespace

RawData read_raw(const std::string& name, const std::string& path, bool skip_malformed) {
  return find_format(name, path).read(path, skip_malformed);
}

bool is_raw_dataset(const std::string& name) {
  for (const RawFormat& f : formats()) {
    if (name == f.name) return true;
  }
  return false;
}

std::vector<std::string> raw_source_files(const std::string& name, const std::string& path) {
  const RawFormat& format = find_format(name, path);
  if (format.files.empty()) return {path};
  std::vector<std::string> files;
  for (const std::string& f : format.files) {
    const std::string p = detail::join_path(path, f);
    if (std::filesystem::exists(p)) files.push_back(p);
  }
  return files;
}

}  // namespace hstu
