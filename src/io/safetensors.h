// safetensors.h — the safetensors file format (read and write).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header (padded with spaces to a
// multiple of 8), then the tensors' raw little-endian bytes, contiguous in header order. The
// reader is as strict as the reference implementation (data_offsets must tile the data section
// exactly, no gaps, no overlap, no trailing bytes), so any file it accepts Python loads too.
// Every file is written through AtomicFile (io/atomic_file.h): a reader never sees a partial
// checkpoint, even after a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hstu {

// "F32", "BF16", ... as written in safetensors headers.
const char* safetensors_dtype_name(DType t);

// Saves CPU tensors (strided views written densely) in the given order, with string metadata
// (`__metadata__`, omitted when empty). Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A memory-mapped, validated safetensors file. Errors name the file (and the tensor).
class SafetensorsFile {
 public:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;      // [] for a scalar
    std::span<const uint8_t> bytes;  // inside the mapping; not aligned beyond 1 byte
    int64_t numel() const;
  };

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in header order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Copies tensor `name` into dst (CPU or CUDA, possibly a strided view); the dtype and shape
  // must match exactly.
  void copy_to(const std::string& name, const Tensor& dst) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hstu
