// tensorboard.h — a TensorBoard event-file writer for scalars, with no protobuf or TensorFlow
// dependency: `tensorboard --logdir runs/` shows a run's curves while it trains.
//
// An event file is a sequence of TFRecords, each holding one serialized tensorflow.Event
// protobuf; the first record is the {file_version: "brain.Event:2"} event, then one event per
// scalar. The file is named events.out.tfevents.<unix seconds>.<hostname>, as TensorFlow names
// it, so TensorBoard, tf.data and PyTorch's readers all find it.
//
// Tag contract of the training loops (the names TensorBoard groups and shows):
//   train/loss, train/lr, train/tokens_per_s, train/mfu     at each logged training step
//   <split>/<metric>                                       at each evaluation, where <split> is
//       the metrics.jsonl key of the split ("validation", "test") and <metric> the metric's
//       name as in metrics.jsonl: test/HR@10, test/NDCG@10, test/MRR, validation/NDCG@10,
//       ranking's test/AUC/task0, test/MeanAUC, ...
// Steps are the training step of metrics.jsonl, so both files line up.
//
// Each add_scalar writes its whole record with one write(2) before it returns, so a run that
// crashes or is killed loses nothing it has added; flush() additionally asks the OS to put the
// records on the storage device (for a machine that loses power).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/crc32c.h"

namespace hstu {

class TensorBoardWriter {
 public:
  // Creates log_dir (and its parents) if needed and a new event file in it, starting with the
  // file-version event. A file of the same name (another writer in the same second) is never
  // overwritten: the new one gets a ".1", ".2", ... suffix. Errors name the directory or file.
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar (stored as float32, as TensorBoard's simple_value) at `step`, stamped
  // with the current wall-clock time.
  void add_scalar(const std::string& tag, int64_t step, double value);
  // Forces the records written so far onto the storage device (fdatasync).
  void flush();
  // The event file's path.
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view event);

  std::string path_;
  int fd_ = -1;
};

// The building blocks, exposed for the tests.
namespace tensorboard {

using ::hstu::crc32c;  // io/crc32c.h
// TFRecord's masked CRC: the CRC rotated right by 15 bits plus 0xA282EAD8.
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data
// (integers little-endian).
std::string tfrecord(std::string_view data);
// The serialized Event {wall_time, file_version: "brain.Event:2"}.
std::string file_version_event(double wall_time);
// The serialized Event {wall_time, step, summary {value {tag, simple_value}}}.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

}  // namespace tensorboard
}  // namespace hstu
