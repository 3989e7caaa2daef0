// safetensors.cpp — the safetensors writer and the validating mmap reader.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/arena.h"
#include "io/atomic_file.h"
#include "io/json.h"

namespace hstu {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; hstu writes host memory as is");

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the reference reader's limit

std::string errno_text() {
  return std::strerror(errno);
}

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF64, "F64"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"},
    {DType::kI32, "I32"}, {DType::kI64, "I64"}, {DType::kU8, "U8"},
};

bool parse_dtype(const std::string& s, DType* out) {
  for (const auto& d : kDTypeNames) {
    if (s == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

}  // namespace

// ---- writer
// --------------------------------------------------------------------------------------

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == t) return d.name;
  }
  HSTU_THROW("dtype ", dtype_name(t), " has no safetensors name");
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HSTU_CHECK(!name.empty() && name != "__metadata__", path, ": invalid tensor name \"", name,
               "\"");
    HSTU_CHECK(seen.insert(name).second, path, ": tensor \"", name, "\" given twice");
    HSTU_CHECK(!t.empty(), path, ": tensor \"", name, "\" is empty (no tensor)");
    HSTU_CHECK(t.device == Device::kCPU, path, ": tensor \"", name, "\" is ", t.str(),
               "; copy it to the CPU before saving");
    const uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                    {"shape", std::vector<int64_t>(t.shape, t.shape + t.ndim)},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = json::dump(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = text.size();

  AtomicFile f(path);
  f.write(&n, sizeof(n));
  f.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    if (t.contiguous()) {
      f.write(t.data, t.nbytes());
      continue;
    }
    const size_t es = dtype_size(t.dtype);
    const size_t row_bytes = static_cast<size_t>(t.row_elems()) * es;
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      f.write(static_cast<const char*>(t.data) + static_cast<size_t>(r * t.row_stride) * es,
              row_bytes);
    }
  }
  f.commit();
}

// ---- reader
// --------------------------------------------------------------------------------------

int64_t SafetensorsFile::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HSTU_CHECK(fd >= 0, "cannot open ", path, ": ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    HSTU_THROW("cannot stat ", path, ": ", errno_text());
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ < 8) {
    ::close(fd);
    HSTU_THROW(path, ": truncated safetensors file (", map_bytes_,
               " bytes; the 8-byte header length is missing)");
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    HSTU_THROW("cannot map ", path, ": ", errno_text());
  }
  try {
    const auto* base = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    std::memcpy(&n, base, sizeof(n));
    const uint64_t data_bytes_max = map_bytes_ - 8;
    HSTU_CHECK(n > 0 && n <= kMaxHeaderBytes, path, ": invalid header length ", n);
    HSTU_CHECK(n <= data_bytes_max, path, ": truncated safetensors file (header length ", n,
               " but only ", data_bytes_max, " bytes follow)");
    const Json header =
        json::parse(std::string_view(reinterpret_cast<const char*>(base + 8), n), path + " header");
    HSTU_CHECK(header.is_object(), path, ": header is not a JSON object");
    const uint8_t* data = base + 8 + n;
    const uint64_t data_bytes = data_bytes_max - n;

    struct Span {
      uint64_t begin, end;
      const std::string* name;
    };
    std::vector<Span> spans;
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        HSTU_CHECK(v.is_object(), path, ": __metadata__ is not an object");
        for (const auto& [k, m] : v.items()) {
          HSTU_CHECK(m.is_string(), path, ": __metadata__ value \"", k, "\" is not a string");
          metadata_[k] = m.get<std::string>();
        }
        continue;
      }
      const std::string what = path + ": tensor \"" + name + "\"";
      HSTU_CHECK(v.is_object(), what, " is not an object");
      for (const auto& [k, m] : v.items()) {
        HSTU_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", what,
                   " has unknown field \"", k, "\"");
      }
      HSTU_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), what,
                 " needs dtype, shape and data_offsets");
      const Json &dt = v.at("dtype"), &shape = v.at("shape"), &offs = v.at("data_offsets");
      Entry e{};
      HSTU_CHECK(dt.is_string() && parse_dtype(dt.get<std::string>(), &e.dtype), what,
                 " has unsupported dtype ", dt.dump(), " (hstu reads F32 F64 BF16 F16 I32 I64 U8)");
      HSTU_CHECK(shape.is_array(), what, ": shape is not an array");
      uint64_t bytes = dtype_size(e.dtype);
      for (const Json& d : shape) {
        HSTU_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t{INT64_MAX}, what,
                   ": invalid dim ", d.dump());
        HSTU_CHECK(!__builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes), what,
                   ": shape overflows");
        e.shape.push_back(d.get<int64_t>());
      }
      HSTU_CHECK(offs.is_array() && offs.size() == 2 && offs[0].is_number_unsigned() &&
                     offs[1].is_number_unsigned() && offs[0] <= offs[1],
                 what, ": invalid data_offsets ", offs.dump());
      const auto begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
      HSTU_CHECK(end <= data_bytes, what, ": data_offsets ", offs.dump(), " beyond the ",
                 data_bytes, " data bytes (truncated file?)");
      HSTU_CHECK(end - begin == bytes, what, ": ", dt.get<std::string>(), shape_str(e.shape),
                 " needs ", bytes, " bytes but data_offsets ", offs.dump(), " hold ", end - begin);
      e.bytes = std::span<const uint8_t>(data + begin, end - begin);
      const auto [it, inserted] = entries_.emplace(name, std::move(e));
      spans.push_back({begin, end, &it->first});
      names_.push_back(name);
    }
    // The tensors must tile the data section exactly.
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    for (const Span& s : spans) {
      HSTU_CHECK(s.begin >= at, path, ": tensor \"", *s.name, "\" overlaps the one before it");
      HSTU_CHECK(s.begin == at, path, ": gap in the data before tensor \"", *s.name, "\"");
      at = s.end;
    }
    HSTU_CHECK(at == data_bytes, path, ": ", data_bytes - at,
               " bytes after the last tensor (data_offsets do not cover the data)");
  } catch (...) {
    ::munmap(map_, map_bytes_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

const SafetensorsFile::Entry& SafetensorsFile::get(const std::string& name) const {
  const auto it = entries_.find(name);
  HSTU_CHECK(it != entries_.end(), path_, ": no tensor \"", name, "\"");
  return it->second;
}

void SafetensorsFile::copy_to(const std::string& name, const Tensor& dst) const {
  const Entry& e = get(name);
  HSTU_CHECK(!dst.empty(), path_, ": tensor \"", name, "\" copied to an empty tensor");
  bool same = dst.dtype == e.dtype && dst.ndim == static_cast<int>(e.shape.size());
  for (int i = 0; same && i < dst.ndim; ++i) same = dst.shape[i] == e.shape[i];
  HSTU_CHECK(same, path_, ": tensor \"", name, "\" is ", safetensors_dtype_name(e.dtype),
             shape_str(e.shape), ", expected ", dst.str());
  Tensor src = dst;
  src.data = const_cast<uint8_t*>(e.bytes.data());
  src.device = Device::kCPU;
  src.row_stride = src.row_elems();
  copy_tensor(dst, src);
}

}  // namespace hstu
