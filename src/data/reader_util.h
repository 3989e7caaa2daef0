// reader_util.h — what every raw reader shares: a buffered line reader that counts lines, the
// malformed-row policy (throw with `path:line` and the quoted line, or skip and count), field
// splitting (fixed separators and RFC-4180 CSV) and strict number parsing.
//
// Lines are read as bytes and never decoded: ids and numbers are ASCII in every supported
// format, so latin-1 titles (ML-1M movies.dat) pass through untouched.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/readers.h"

namespace hstu::detail {

// Reads a file line by line (LF or CRLF endings; a missing final newline is fine).
class LineReader {
 public:
  // Throws naming `path` and `expected` (what the file should hold) when it cannot be opened.
  LineReader(const std::string& path, const std::string& expected);

  // The next line without its line ending; false at the end of the file. The view stays valid
  // until the next call.
  bool next(std::string_view& line);

  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

 private:
  bool refill();

  std::string path_;
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::vector<char> buf_;  // [capacity] bytes read but not yet returned start at begin_
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

// The malformed-row policy of one reader call.
class RowErrors {
 public:
  RowErrors(RawData& out, bool skip_malformed) : out_(out), skip_(skip_malformed) {}

  // Throws "path:line: what: "<line>"" or, when skipping, counts the row (the caller then skips
  // it).
  void malformed(const std::string& path, int64_t line_number, std::string_view line,
                 const std::string& what);
  // The same for the line `reader` returned last.
  void malformed(const LineReader& reader, std::string_view line, const std::string& what) {
    malformed(reader.path(), reader.line_number(), line, what);
  }

 private:
  RawData& out_;
  bool skip_;
};

// Formats "path:line: what: "<line, truncated>"" (also used for non-skippable errors).
std::string row_message(const std::string& path, int64_t line_number, std::string_view line,
                        const std::string& what);

// True when the line holds only spaces / tabs (such lines are ignored by every reader).
bool is_blank(std::string_view line);

// Splits on a separator string; fields are views into `line`.
void split(std::string_view line, std::string_view sep, std::vector<std::string_view>& fields);

// Parses one RFC-4180 record. Returns "" on success, otherwise what is wrong; kUnterminated
// when a quoted field runs past the end (the record continues on the next line).
inline constexpr std::string_view kUnterminated = "unterminated quoted field";
std::string parse_csv_record(std::string_view record, std::vector<std::string>& fields);

// Strict parsers: the whole field must be the number (no spaces, no trailing characters).
bool parse_int(std::string_view field, int64_t& value);
bool parse_double(std::string_view field, double& value);

// Opens the next source file of `out` (events appended afterwards belong to it).
void begin_source(RawData& out, const std::string& path);

// Joins a folder and a file name.
std::string join_path(const std::string& dir, const std::string& file);

}  // namespace hstu::detail
