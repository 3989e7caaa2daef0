// test_tensorboard.cpp — the TensorBoard event-file writer: CRC-32C against published vectors,
// TFRecord framing and Event protobuf bytes checked by hand, the file as written (name, framing,
// records present before the writer closes, errors naming the file), and a round trip through
// TensorBoard's own EventAccumulator (tests/io/read_tensorboard.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/io_test_util.h"
#include "common/test_util.h"
#include "io/tensorboard.h"

namespace hstu {
namespace {

using tensorboard::crc32c;
using tensorboard::masked_crc32c;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

uint64_t read_le(const std::string& s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(s[pos + i])} << (8 * i);
  return v;
}

// The data of each TFRecord of a file, checking both masked CRCs of every record.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < file.size();) {
    const uint64_t len = pos + 12 <= file.size() ? read_le(file, pos, 8) : 0;
    if (pos + 16 + len > file.size()) {
      ADD_FAILURE() << "truncated record at byte " << pos;
      break;
    }
    EXPECT_EQ(read_le(file, pos + 8, 4), masked_crc32c(file.substr(pos, 8))) << "at " << pos;
    out.push_back(file.substr(pos + 12, len));
    EXPECT_EQ(read_le(file, pos + 12 + len, 4), masked_crc32c(out.back())) << "at " << pos;
    pos += 16 + len;
  }
  return out;
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::string zeros(32, '\0'), ones(32, '\xFF'), up, down;
  for (int i = 0; i < 32; ++i) {
    up += static_cast<char>(i);
    down += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32c, MaskedAsTensorBoardComputesIt) {
  // Values from tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c.
  EXPECT_EQ(masked_crc32c("abc"), 0x21F1576Eu);
  EXPECT_EQ(masked_crc32c(bytes({3, 0, 0, 0, 0, 0, 0, 0})), 0x0E4999B0u);
}

TEST(TfRecord, FramesLengthDataAndMaskedCrcs) {
  EXPECT_EQ(tensorboard::tfrecord("abc"), bytes({3, 0, 0, 0, 0, 0, 0, 0, 0xB0, 0x99, 0x49, 0x0E,
                                                 'a', 'b', 'c', 0x6E, 0x57, 0xF1, 0x21}));
}

TEST(EventProto, FileVersionEvent) {
  // wall_time (field 1, fixed64) 1.5 = 0x3FF8000000000000; file_version (field 3, bytes).
  EXPECT_EQ(tensorboard::file_version_event(1.5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 13}) + "brain.Event:2");
}

TEST(EventProto, ScalarEvent) {
  // wall_time 1.5; step (field 2, varint) 300 = AC 02; summary (field 5) { value (field 1) {
  // tag (field 1) "a", simple_value (field 2, fixed32) 2.0f = 0x40000000 } }.
  EXPECT_EQ(tensorboard::scalar_event(1.5, 300, "a", 2.0f),
            bytes({0x09, 0,  0,    0, 0,    0, 0,   0xF8, 0x3F, 0x10, 0xAC, 0x02,
                   0x2A, 10, 0x0A, 8, 0x0A, 1, 'a', 0x15, 0,    0,    0,    0x40}));
  // A negative step is a 10-byte two's-complement varint, as protobuf writes int64.
  EXPECT_EQ(tensorboard::scalar_event(0.0, -1, "", 0.0f).substr(9, 11),
            bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(TensorBoardWriter, NamesTheFileAndWritesEachRecordAtOnce) {
  test::TempDir dir;
  TensorBoardWriter w(dir.file("tb/run"));  // creates missing parents
  const std::string name = std::filesystem::path(w.path()).filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+)"))) << name;
  w.add_scalar("train/loss", 10, 6.5);
  w.add_scalar("test/HR@10", 10, 0.25);
  // Read while the writer is still open: nothing waits for flush() or the destructor.
  const std::vector<std::string> records = read_records(test::read_file(w.path()));
  ASSERT_EQ(records.size(), 3u);
  // Every event starts with its 9-byte wall_time field; the rest is known exactly.
  EXPECT_EQ(records[0].substr(9), tensorboard::file_version_event(0).substr(9));
  EXPECT_EQ(records[1].substr(9), tensorboard::scalar_event(0, 10, "train/loss", 6.5f).substr(9));
  EXPECT_EQ(records[2].substr(9), tensorboard::scalar_event(0, 10, "test/HR@10", 0.25f).substr(9));
  w.flush();
}

TEST(TensorBoardWriter, NeverOverwritesAnotherWritersFile) {
  test::TempDir dir;
  TensorBoardWriter a(dir.path()), b(dir.path());
  a.add_scalar("x", 1, 1.0);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(read_records(test::read_file(a.path())).size(), 2u);
  EXPECT_EQ(read_records(test::read_file(b.path())).size(), 1u);
}

TEST(TensorBoardWriter, ErrorsNameTheFile) {
  test::TempDir dir;
  test::write_file(dir.file("plain"), "not a directory");
  const std::string bad_dir = dir.file("plain/tb");
  EXPECT_NE(test::error_of([&] { TensorBoardWriter w(bad_dir); }).find(bad_dir), std::string::npos);
  TensorBoardWriter w(dir.path());
  EXPECT_NE(test::error_of([&] { w.add_scalar("", 3, 1.0); }).find(w.path()), std::string::npos);
}

// Several tags (the training loops' contract, a ranking metric with a slash in its name),
// steps from 0 to 2^40, values that float32 rounds; written interleaved by step.
std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> round_trip_data() {
  return {{"train/loss", {{10, 6.9}, {20, 5.25}, {30, 3.1}}},
          {"train/lr", {{10, 1e-3}, {20, 5e-4}, {30, 0.0}}},
          {"train/tokens_per_s", {{10, 103734.5}, {20, 128061.25}, {30, 97296.0}}},
          {"test/HR@10", {{0, 0.0}, {64, 0.3615}, {128, 0.435}}},
          {"test/AUC/task0", {{int64_t{1} << 40, 0.75}}},
          {"check/extremes", {{1, -2.5}, {2, 3.0e38}, {3, 1e-30}}}};
}

TEST(TensorBoardWriter, TensorBoardReadsBackEveryScalar) {
  const std::string lacks = test::python_lacks("tensorboard");
  if (!lacks.empty()) GTEST_SKIP() << lacks;
  test::TempDir dir;
  const auto data = round_trip_data();
  {
    TensorBoardWriter w(dir.file("tb"));
    for (size_t i = 0; i < 3; ++i) {
      for (const auto& [tag, points] : data)
        if (i < points.size()) w.add_scalar(tag, points[i].first, points[i].second);
    }
  }
  std::ostringstream expected;
  expected.precision(17);
  const char* sep = "{";
  for (const auto& [tag, points] : data) {
    expected << sep << "\"" << tag << "\": [";
    for (size_t i = 0; i < points.size(); ++i)
      expected << (i ? ", [" : "[") << points[i].first << ", " << points[i].second << "]";
    expected << "]";
    sep = ", ";
  }
  expected << "}\n";
  test::write_file(dir.file("expected.json"), expected.str());
  const test::CommandResult r = test::run_command(std::string("python3 ") + HSTU_SOURCE_DIR +
                                                  "/tests/io/read_tensorboard.py " +
                                                  dir.file("tb") + " " + dir.file("expected.json"));
  std::cout << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nOK\n"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hstu
