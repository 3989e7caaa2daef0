// tensorboard.cpp — event files by hand: TFRecord framing (CRC-32C: io/crc32c.h) and a protobuf
// encoder for the three messages a scalar needs.
//
// Why not libprotobuf: the writer needs three messages (Event, Summary, Summary.Value) and four
// field kinds (varint, double, float, length-delimited), about 30 lines of encoder here. Linking
// libprotobuf would add a build dependency, protoc code generation and a copy of TensorFlow's
// .proto files to every build for those 30 lines. The wire format of these fields is stable, and
// test_io checks the bytes by hand and against TensorBoard's own reader.
#include "io/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hstu {
namespace tensorboard {
namespace {

// Protobuf wire types and the field numbers of tensorflow/core/util/event.proto (Event) and
// tensorflow/core/framework/summary.proto (Summary, Summary.Value).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}
// The low `bytes` bytes of v, little-endian.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (field << 3) | type);
}
void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_le(out, std::bit_cast<uint64_t>(v), 8);
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_le(out, std::bit_cast<uint32_t>(v), 4);
}
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));  // negative values take 10 bytes, as in protobuf
}
void put_bytes(std::string& out, uint32_t field, std::string_view v) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, v.size());
  out.append(v);
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_le(length, data.size(), 8);
  std::string out = length;
  put_le(out, masked_crc32c(length), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, kValueTag, tag);
  put_float(summary_value, kValueSimpleValue, value);
  std::string summary;
  put_bytes(summary, kSummaryValue, summary_value);
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

}  // namespace tensorboard

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  HSTU_CHECK(!ec, "cannot create the TensorBoard log directory ", log_dir, ": ", ec.message());
  char host[256] = {};
  HSTU_CHECK(::gethostname(host, sizeof(host) - 1) == 0, "gethostname: ", std::strerror(errno));
  const double now = unix_seconds();
  const std::string base =
      log_dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host;
  for (int n = 0; fd_ < 0; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    HSTU_CHECK(fd_ >= 0 || errno == EEXIST, "cannot create ", path_, ": ", std::strerror(errno));
  }
  write_record(tensorboard::file_version_event(now));
}

TensorBoardWriter::~TensorBoardWriter() {
  ::close(fd_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  HSTU_CHECK(!tag.empty(), path_, ": a TensorBoard scalar needs a non-empty tag (step ", step, ")");
  write_record(tensorboard::scalar_event(unix_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::flush() {
  HSTU_CHECK(::fdatasync(fd_) == 0, "cannot flush ", path_, ": ", std::strerror(errno));
}

void TensorBoardWriter::write_record(std::string_view event) {
  // The whole record in one write(2), so a crash between two records leaves no half record
  // behind (a short write, e.g. after a signal, is continued).
  const std::string record = tensorboard::tfrecord(event);
  for (size_t done = 0; done < record.size();) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    HSTU_CHECK(n > 0, "cannot write ", path_, ": ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace hstu
