// preprocess.cpp — building the dense time-sorted dataset from raw events, the sequences.bin
// writer and memory-mapping loader, the id-map files and the dataset cache.
//
// Grouping is a counting sort by user (stable, so file order survives) followed by a stable
// sort by timestamp inside each user: ties keep file order without a global sort.
#include "data/preprocess.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/checked.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/key_hash.h"
#include "data/synthetic.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/json.h"

namespace hstu {

static_assert(std::endian::native == std::endian::little,
              "sequences.bin is little-endian and mapped in place");

namespace {

constexpr char kMagic[8] = {'H', 'S', 'T', 'U', 'S', 'E', 'Q', '1'};
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr size_t kChecksumWord = 3;  // word index of the checksum field
constexpr uint32_t kFlagActions = 1;
constexpr uint32_t kFlagRawKeys = 2;  // items are raw i64 keys; catalogue keys follow

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t flags;
  uint64_t file_bytes;
  uint64_t checksum;
  int64_t num_users;
  int64_t num_events;
  int64_t num_items;
  int32_t num_actions;
  int32_t num_contextual;
  uint32_t name_bytes;
  uint32_t reserved;
};
static_assert(sizeof(FileHeader) == 72);

uint64_t pad8(uint64_t n) {
  return (n + 7) & ~uint64_t{7};
}

// Streams 8-byte-padded sections to an AtomicFile while hashing its words.
class SectionWriter {
 public:
  explicit SectionWriter(const std::string& path) : file_(path) {}

  void put(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    const size_t full = bytes / 8;
    for (size_t i = 0; i < full; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      hash(w);
    }
    file_.write(p, bytes);
    if (bytes % 8 != 0) {  // the last partial word is zero-padded
      uint64_t w = 0;
      std::memcpy(&w, p + 8 * full, bytes % 8);
      hash(w);
      const unsigned char zeros[8] = {};
      file_.write(zeros, 8 - bytes % 8);
    }
  }

  uint64_t bytes_written() const { return words_ * 8; }
  uint64_t checksum() const { return hash_; }

  // Rewrites the first bytes (the header) and commits the file.
  void finish(const void* header, size_t bytes) {
    file_.write_at(0, header, bytes);
    file_.commit();
  }

 private:
  void hash(uint64_t w) {
    if (words_++ != kChecksumWord) hash_ = (hash_ ^ w) * kFnvPrime;
  }

  AtomicFile file_;
  uint64_t hash_ = kFnvOffset;
  uint64_t words_ = 0;
};

// A read-only memory map that unmaps when the last dataset using it goes.
struct MappedFile {
  void* addr = nullptr;
  size_t bytes = 0;
  ~MappedFile() {
    if (addr != nullptr) munmap(addr, bytes);
  }
};

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    HSTU_THROW(path, ": cannot open (", std::strerror(err),
               "); expected a preprocessed sequence file (run `hstu preprocess`)");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    HSTU_THROW(path, ": cannot stat");
  }
  auto map = std::make_shared<MappedFile>();
  map->bytes = static_cast<size_t>(st.st_size);
  if (map->bytes > 0) {
    void* addr = mmap(nullptr, map->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      HSTU_THROW(path, ": mmap failed (", std::strerror(err), ")");
    }
    map->addr = addr;
  }
  ::close(fd);
  return map;
}

// Sequential bounds-checked reader of the mapped bytes.
class SectionReader {
 public:
  SectionReader(const std::string& path, const unsigned char* base, uint64_t bytes)
      : path_(path), base_(base), bytes_(bytes) {}

  // Returns a pointer to `bytes` bytes at the cursor and moves past them (8-byte padded).
  const unsigned char* take(uint64_t bytes, const char* what) {
    if (bytes > bytes_ || pad8(bytes) > bytes_ - pos_) {
      HSTU_THROW(path_, ": sizes are inconsistent: ", what, " needs ", bytes, " bytes at offset ",
                 pos_, " of a ", bytes_, "-byte file");
    }
    const unsigned char* p = base_ + pos_;
    pos_ += pad8(bytes);
    return p;
  }
  template <typename T>
  std::span<const T> array(int64_t count, const char* what) {
    if (count < 0 || static_cast<uint64_t>(count) > bytes_ / sizeof(T)) {
      HSTU_THROW(path_, ": sizes are inconsistent: ", what, " has ", count, " entries");
    }
    const unsigned char* p = take(static_cast<uint64_t>(count) * sizeof(T), what);
    return {reinterpret_cast<const T*>(p), static_cast<size_t>(count)};
  }
  uint64_t position() const { return pos_; }

 private:
  std::string path_;
  const unsigned char* base_;
  uint64_t bytes_;
  uint64_t pos_ = 0;
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// `path` made absolute and normal (for cache keys); errors become hstu::Error.
std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) HSTU_THROW(path, ": cannot resolve the path (", ec.message(), ")");
  return p.lexically_normal().string();
}

// The content of source.json for the current raw files and options.
Json source_description(const DatasetArgs& args, bool skip_malformed) {
  Json files = Json::array();
  for (const std::string& file : raw_source_files(args.dataset_name, args.dataset_path)) {
    struct stat st {};
    int64_t size = -1, mtime_ns = -1;
    if (::stat(file.c_str(), &st) == 0) {
      size = st.st_size;
      mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    files.push_back({{"path", absolute_path(file)}, {"size", size}, {"mtime_ns", mtime_ns}});
  }
  return {{"format_version", kSequenceFileVersion},
          {"dataset_name", args.dataset_name},
          {"dataset_path", absolute_path(args.dataset_path)},
          {"skip_malformed", skip_malformed},
          {"tie_break", args.tie_break},
          {"files", std::move(files)}};
}

// source_description plus, for a raw-id cache, "raw_ids": true (a dense cache's description is
// unchanged, so existing caches stay valid).
Json cache_description(const DatasetArgs& args, bool skip_malformed) {
  Json d = source_description(args, skip_malformed);
  if (args.raw_ids) d["raw_ids"] = true;
  return d;
}

// The files of a cache whose sizes and CRC-32Cs source.json records ("cache_files"); a raw-id
// cache has no item id map.
std::vector<const char*> cache_files(bool raw_ids) {
  if (raw_ids) return {"sequences.bin", "user_ids.csv"};
  return {"sequences.bin", "item_ids.csv", "user_ids.csv"};
}

std::string hex32(uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof(s), "%08x", v);
  return s;
}

// [{name, bytes, crc32c}] of the cache's files as they are on disk.
Json cache_file_checksums(const std::filesystem::path& dir, bool raw_ids) {
  Json files = Json::array();
  for (const char* name : cache_files(raw_ids)) {
    const std::string path = (dir / name).string();
    files.push_back({{"name", name},
                     {"bytes", static_cast<int64_t>(std::filesystem::file_size(path))},
                     {"crc32c", hex32(crc32c_file(path))}});
  }
  return files;
}

// Why the cache in `dir` cannot be used for `description` ("" when it can): its source.json
// describes other raw files or options (or is damaged), or a file of the cache is missing or does
// not match the size and CRC-32C source.json records for it.
std::string cache_mismatch(const std::filesystem::path& dir, const Json& description,
                           bool raw_ids) {
  const std::string source = (dir / "source.json").string();
  Json recorded;
  try {
    recorded = json::parse_file(source);
  } catch (const Error& e) {
    return std::string("source.json is damaged (") + e.what() + ")";
  }
  if (!recorded.is_object()) return "source.json is damaged (not a JSON object)";
  if (!recorded.contains("cache_files"))
    return "source.json records no checksums of the cache (written by an older hstu)";
  Json files = recorded["cache_files"];
  recorded.erase("cache_files");
  if (recorded != description) return "the raw files or the preprocessing options changed";
  for (const char* name : cache_files(raw_ids)) {
    const std::string path = (dir / name).string();
    const Json* want = nullptr;
    if (files.is_array())
      for (const Json& f : files)
        if (f.is_object() && f.contains("name") && f["name"] == name) want = &f;
    if (want == nullptr) return std::string("source.json records no checksum of ") + name;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    if (ec) return path + " is missing";
    try {
      if (static_cast<int64_t>(bytes) != json::int_at(*want, "bytes"))
        return path + " has " + std::to_string(bytes) + " bytes, source.json records " +
               std::to_string(json::int_at(*want, "bytes"));
      const std::string crc = hex32(crc32c_file(path));
      if (crc != json::string_at(*want, "crc32c"))
        return path + " has CRC-32C " + crc + ", source.json records " +
               json::string_at(*want, "crc32c");
    } catch (const Error& e) {
      return std::string("source.json's checksum of ") + name + " is damaged (" + e.what() + ")";
    }
  }
  return "";
}

// Dense indices of raw ids in raw-id order: the distinct ids are collected in a hash map, then
// numbered in sorted order.
class DenseIds {
 public:
  void add(int64_t raw) { index_.try_emplace(raw, 0); }
  size_t size() const { return index_.size(); }

  // Numbers the ids first, first + 1, ... in raw-id order; returns the sorted raw ids.
  std::vector<int64_t> number_from(int32_t first) {
    std::vector<int64_t> sorted;
    sorted.reserve(index_.size());
    for (const auto& [raw, unused] : index_) sorted.push_back(raw);
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      index_[sorted[i]] = checked_i32(first + static_cast<int64_t>(i), "dense id");
    return sorted;
  }

  int32_t index(int64_t raw) const { return index_.find(raw)->second; }
  int32_t find(int64_t raw) const {  // -1 when absent
    const auto it = index_.find(raw);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<int64_t, int32_t> index_;
};

}  // namespace

namespace {

// Raw-id mode: the key of each dense item (entry 0 unused) from the dense -> raw map.
std::vector<int64_t> raw_item_keys(const RawData& raw, const std::vector<int64_t>& item_raw) {
  std::vector<int64_t> keys(item_raw.size() + 1, kNoKey);
  if (raw.item_names.empty()) {
    for (size_t e = 0; e < raw.events.size(); ++e) {
      if (raw.events[e].item < 0)
        HSTU_THROW(raw.source_of(static_cast<int64_t>(e)), ":", raw.events[e].line, ": item id ",
                   raw.events[e].item,
                   " is negative; DatasetArgs.raw_ids needs item ids >= 0 (-1 marks no item)");
    }
    for (size_t i = 0; i < item_raw.size(); ++i) {
      HSTU_CHECK(item_raw[i] >= 0, raw.name, ": catalogue item id ", item_raw[i],
                 " is negative; DatasetArgs.raw_ids needs item ids >= 0");
      keys[i + 1] = item_raw[i];
    }
    return keys;
  }
  std::vector<std::pair<int64_t, int64_t>> by_key;  // (key, name index)
  by_key.reserve(item_raw.size());
  for (size_t i = 0; i < item_raw.size(); ++i) {
    keys[i + 1] = string_key(raw.item_names.at(static_cast<size_t>(item_raw[i])));
    by_key.emplace_back(keys[i + 1], item_raw[i]);
  }
  std::sort(by_key.begin(), by_key.end());
  for (size_t i = 1; i < by_key.size(); ++i) {
    if (by_key[i].first == by_key[i - 1].first)
      HSTU_THROW(raw.name, ": the item ids \"", raw.item_names[by_key[i - 1].second], "\" and \"",
                 raw.item_names[by_key[i].second], "\" hash to the same 63-bit key ",
                 by_key[i].first, " (data/key_hash.h); DatasetArgs.raw_ids cannot tell them apart");
  }
  return keys;
}

}  // namespace

SequenceDataset build_dataset(const RawData& raw, IdMaps* maps, const std::string& tie_break,
                              bool raw_ids) {
  HSTU_CHECK(tie_break == "file" || tie_break == "shuffle",
             "DatasetArgs.tie_break must be file or shuffle, got '", tie_break, "'");
  const bool shuffle_ties = tie_break == "shuffle";
  const int64_t num_events = static_cast<int64_t>(raw.events.size());
  if (num_events == 0) {
    std::string files;
    for (const RawSource& src : raw.sources) files += (files.empty() ? "" : ", ") + src.path;
    HSTU_THROW(raw.name, ": the raw data holds no events",
               files.empty() ? std::string() : " (read " + files + ")");
  }

  // Users 0..U-1 and items 1..V-1, both in raw-id order.
  DenseIds users, items;
  for (const int64_t id : raw.catalogue) items.add(id);
  for (const RawEvent& ev : raw.events) {
    users.add(ev.user);
    items.add(ev.item);
  }
  if (items.size() + 1 > static_cast<size_t>(INT32_MAX)) {
    HSTU_THROW(raw.name, ": ", items.size(), " items do not fit int32 ids");
  }
  std::vector<int64_t> user_raw = users.number_from(0);
  const std::vector<int64_t> item_raw = items.number_from(1);
  const int64_t num_users = static_cast<int64_t>(user_raw.size());

  // Counting sort by user (stable), then a stable sort by time within each user.
  std::vector<int32_t> user_of(num_events);  // [E] dense user of each raw event
  SequenceArrays a;
  a.user_offsets.assign(num_users + 1, 0);
  for (int64_t e = 0; e < num_events; ++e) {
    user_of[e] = users.index(raw.events[e].user);
    ++a.user_offsets[user_of[e] + 1];
  }
  for (int64_t u = 0; u < num_users; ++u) a.user_offsets[u + 1] += a.user_offsets[u];
  std::vector<int64_t> order(num_events);  // [E] raw event index at each sorted position
  {
    std::vector<int64_t> cursor(a.user_offsets.begin(), a.user_offsets.end() - 1);
    for (int64_t e = 0; e < num_events; ++e) order[cursor[user_of[e]]++] = e;
  }
  // Sorting (timestamp, tie key, file index) is the stable sort by timestamp when the tie key is
  // constant (tie_break "file"), and a fixed pseudo-random order of ties otherwise.
  std::vector<std::tuple<int64_t, uint64_t, int64_t>> keys;  // [events of one user]
  for (int64_t u = 0; u < num_users; ++u) {
    const int64_t begin = a.user_offsets[u], end = a.user_offsets[u + 1];
    keys.clear();
    for (int64_t i = begin; i < end; ++i) {
      const RawEvent& ev = raw.events[order[i]];
      const uint64_t tie =
          shuffle_ties ? derive_seed(static_cast<uint64_t>(ev.user), static_cast<uint64_t>(ev.item))
                       : 0;
      keys.emplace_back(ev.timestamp, tie, order[i]);
    }
    std::sort(keys.begin(), keys.end());
    for (int64_t i = begin; i < end; ++i) order[i] = std::get<2>(keys[i - begin]);
  }
  a.items.resize(num_events);
  a.timestamps.resize(num_events);
  if (raw.num_actions > 0) a.actions.resize(num_events);
  for (int64_t i = 0; i < num_events; ++i) {
    const RawEvent& ev = raw.events[order[i]];
    a.items[i] = items.index(ev.item);
    a.timestamps[i] = ev.timestamp;
    if (raw.num_actions > 0) a.actions[i] = ev.action;
  }

  // Contextual features of each dense user (0 = the user had no row).
  const size_t num_ctx = raw.contextual_names.size();
  if (num_ctx > 0) {
    a.contextual_values.assign(static_cast<size_t>(checked_mul(
                                   num_users, static_cast<int64_t>(num_ctx), "contextual values")),
                               0);
    for (size_t i = 0; i < raw.contextual_users.size(); ++i) {
      const int32_t u = users.find(raw.contextual_users[i]);
      if (u < 0) continue;  // a user without events
      std::copy_n(raw.contextual_values.begin() + i * num_ctx, num_ctx,
                  a.contextual_values.begin() + u * num_ctx);
    }
  }

  SequenceDataset ds;
  ds.name = raw.name;
  ds.num_items = static_cast<int64_t>(item_raw.size()) + 1;
  ds.num_actions = raw.num_actions;
  ds.contextual_names = raw.contextual_names;
  ds.contextual_cardinalities = raw.contextual_cardinalities;
  attach_arrays(ds, std::move(a));
  validate_dataset(ds, raw.name);
  if (maps != nullptr) {
    maps->item_raw.clear();
    if (!raw_ids) {
      maps->item_raw.assign(1, 0);
      maps->item_raw.insert(maps->item_raw.end(), item_raw.begin(), item_raw.end());
    }
    maps->user_raw = std::move(user_raw);
  }
  if (raw_ids) return with_raw_keys(ds, raw_item_keys(raw, item_raw), raw.name);
  return ds;
}

void write_sequence_file(const SequenceDataset& ds, const std::string& path) {
  const int64_t num_ctx = static_cast<int64_t>(ds.contextual_names.size());
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  const bool raw_keys = ds.raw_ids();
  h.version = raw_keys ? kRawKeySequenceFileVersion : kSequenceFileVersion;
  h.flags = (ds.actions.empty() ? 0 : kFlagActions) | (raw_keys ? kFlagRawKeys : 0);
  h.num_users = ds.num_users();
  h.num_events = ds.num_events();
  h.num_items = ds.num_items;
  h.num_actions = ds.num_actions;
  h.num_contextual = checked_i32(num_ctx, "contextual features");
  h.name_bytes = static_cast<uint32_t>(ds.name.size());

  // The metadata section, built in memory (it is small).
  std::string meta = ds.name;
  for (int64_t c = 0; c < num_ctx; ++c) {
    const uint32_t len = static_cast<uint32_t>(ds.contextual_names[c].size());
    meta.append(reinterpret_cast<const char*>(&len), 4);
    meta += ds.contextual_names[c];
    meta.append(reinterpret_cast<const char*>(&ds.contextual_cardinalities[c]), 4);
  }
  h.file_bytes = sizeof(FileHeader) + pad8(meta.size()) + pad8(ds.user_offsets.size_bytes()) +
                 pad8(ds.items.size_bytes()) + pad8(ds.item_keys.size_bytes()) +
                 pad8(ds.actions.size_bytes()) + pad8(ds.timestamps.size_bytes()) +
                 pad8(ds.contextual_values.size_bytes()) + pad8(ds.catalogue_keys.size_bytes());
  SectionWriter w(path);
  w.put(&h, sizeof(h));
  w.put(meta.data(), meta.size());
  w.put(ds.user_offsets.data(), ds.user_offsets.size_bytes());
  if (raw_keys) {
    w.put(ds.item_keys.data(), ds.item_keys.size_bytes());
  } else {
    w.put(ds.items.data(), ds.items.size_bytes());
  }
  w.put(ds.actions.data(), ds.actions.size_bytes());
  w.put(ds.timestamps.data(), ds.timestamps.size_bytes());
  w.put(ds.contextual_values.data(), ds.contextual_values.size_bytes());
  if (raw_keys) w.put(ds.catalogue_keys.data(), ds.catalogue_keys.size_bytes());
  HSTU_CHECK(w.bytes_written() == h.file_bytes, "sequence file size bookkeeping");
  h.checksum = w.checksum();
  w.finish(&h, sizeof(h));
}

SequenceDataset read_sequence_file(const std::string& path) {
  std::shared_ptr<MappedFile> map = map_file(path);
  const auto* base = static_cast<const unsigned char*>(map->addr);
  const uint64_t size = map->bytes;
  if (size < sizeof(FileHeader)) {
    HSTU_THROW(path, ": truncated: ", size, " bytes, shorter than the ", sizeof(FileHeader),
               "-byte header of a sequence file");
  }
  FileHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) {
    HSTU_THROW(path, ": not an hstu sequence file (bad magic; expected \"HSTUSEQ1\")");
  }
  if (h.version != kSequenceFileVersion && h.version != kRawKeySequenceFileVersion) {
    HSTU_THROW(path, ": sequence file version ", h.version, ", this build reads versions ",
               kSequenceFileVersion, " (dense ids) and ", kRawKeySequenceFileVersion,
               " (raw keys) (preprocess again)");
  }
  const bool raw_keys = h.version == kRawKeySequenceFileVersion;
  if ((h.flags & ~(kFlagActions | kFlagRawKeys)) != 0 ||
      ((h.flags & kFlagRawKeys) != 0) != raw_keys) {
    HSTU_THROW(path, ": header flags ", h.flags, " do not match sequence file version ", h.version,
               " (preprocess again)");
  }
  if (h.file_bytes != size) {
    HSTU_THROW(path, ": ", (size < h.file_bytes ? "truncated" : "wrong size"), ": the header says ",
               h.file_bytes, " bytes, the file has ", size, " (preprocess again)");
  }
  if (size % 8 != 0) HSTU_THROW(path, ": size ", size, " is not a multiple of 8");
  uint64_t hash = kFnvOffset;
  for (uint64_t i = 0; i < size / 8; ++i) {
    if (i == kChecksumWord) continue;
    uint64_t w;
    std::memcpy(&w, base + 8 * i, 8);
    hash = (hash ^ w) * kFnvPrime;
  }
  if (hash != h.checksum) {
    HSTU_THROW(path, ": checksum mismatch: the file is corrupted (preprocess again)");
  }
  if (h.num_users < 0 || h.num_events < 0 || h.num_contextual < 0 || h.num_actions < 0) {
    HSTU_THROW(path, ": negative counts in the header");
  }

  SectionReader r(path, base, size);
  r.take(sizeof(FileHeader), "the header");
  SequenceDataset ds;
  const uint64_t meta_start = r.position();
  {
    // The metadata section: parse it with a cursor, then skip its padded size.
    uint64_t pos = meta_start;
    auto need = [&](uint64_t n) {
      if (n > size - pos) HSTU_THROW(path, ": sizes are inconsistent: metadata runs past the end");
    };
    need(h.name_bytes);
    ds.name.assign(reinterpret_cast<const char*>(base + pos), h.name_bytes);
    pos += h.name_bytes;
    for (int32_t c = 0; c < h.num_contextual; ++c) {
      uint32_t len;
      int32_t card;
      need(4);
      std::memcpy(&len, base + pos, 4);
      pos += 4;
      need(len);
      ds.contextual_names.emplace_back(reinterpret_cast<const char*>(base + pos), len);
      pos += len;
      need(4);
      std::memcpy(&card, base + pos, 4);
      pos += 4;
      ds.contextual_cardinalities.push_back(card);
    }
    r.take(pos - meta_start, "the metadata");
  }
  ds.num_items = h.num_items;
  ds.num_actions = h.num_actions;
  ds.user_offsets = r.array<int64_t>(checked_add(h.num_users, 1, "user_offsets"), "user_offsets");
  if (raw_keys) {
    ds.item_keys = r.array<int64_t>(h.num_events, "item keys");
  } else {
    ds.items = r.array<int32_t>(h.num_events, "items");
  }
  if (h.flags & kFlagActions) ds.actions = r.array<int32_t>(h.num_events, "actions");
  ds.timestamps = r.array<int64_t>(h.num_events, "timestamps");
  ds.contextual_values = r.array<int32_t>(
      checked_mul(h.num_users, h.num_contextual, "contextual_values"), "contextual_values");
  if (raw_keys) {
    HSTU_CHECK(h.num_items >= 2, path, ": num_items = ", h.num_items, " (need >= 2)");
    ds.catalogue_keys = r.array<int64_t>(h.num_items - 1, "catalogue keys");
  }
  if (r.position() != size) {
    HSTU_THROW(path, ": sizes are inconsistent: the arrays end at byte ", r.position(), " of ",
               size);
  }
  ds.storage = std::move(map);
  validate_dataset(ds, path);
  return ds;
}

void write_id_maps(const RawData& raw, const IdMaps& maps, const std::string& dir) {
  auto write_map = [&](const std::string& file, const std::vector<int64_t>& ids, size_t first,
                       const std::vector<std::string>& names) {
    std::string text = "index,raw_id\n";
    for (size_t i = first; i < ids.size(); ++i) {
      text += std::to_string(i);
      text += ',';
      text += names.empty() ? std::to_string(ids[i]) : csv_field(names.at(ids[i]));
      text += '\n';
    }
    atomic_write_file((std::filesystem::path(dir) / file).string(), text);
  };
  if (!maps.item_raw.empty()) write_map("item_ids.csv", maps.item_raw, 1, raw.item_names);
  write_map("user_ids.csv", maps.user_raw, 0, raw.user_names);
}

SequenceDataset preprocess_raw(const DatasetArgs& args, const std::string& out_dir,
                               bool skip_malformed, DatasetReport* report) {
  const Json description = cache_description(args, skip_malformed);
  const RawData raw = read_raw(args.dataset_name, args.dataset_path, skip_malformed);
  IdMaps maps;
  const SequenceDataset built = build_dataset(raw, &maps, args.tie_break, args.raw_ids);

  const std::filesystem::path dir(out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) HSTU_THROW(out_dir, ": cannot create the dataset folder (", ec.message(), ")");
  std::filesystem::remove(dir / "source.json", ec);  // written last: marks a complete cache
  write_sequence_file(built, (dir / "sequences.bin").string());
  write_id_maps(raw, maps, out_dir);
  Json source = description;
  source["cache_files"] = cache_file_checksums(dir, args.raw_ids);
  atomic_write_file((dir / "source.json").string(), json::dump(source, 2) + "\n");
  if (report != nullptr) {
    report->dir = out_dir;
    report->reused_cache = false;
    report->num_malformed = raw.num_malformed;
    report->num_filtered = raw.num_filtered;
    report->malformed_examples = raw.malformed_examples;
  }
  return load_preprocessed(out_dir);
}

SequenceDataset load_preprocessed(const std::string& dir) {
  return read_sequence_file((std::filesystem::path(dir) / "sequences.bin").string());
}

std::string dataset_cache_dir(const Config& cfg) {
  const std::string& root =
      cfg.dataset.cache_dir.empty() ? cfg.trainer.run_dir : cfg.dataset.cache_dir;
  return (std::filesystem::path(root) /
          (cfg.dataset.dataset_name + (cfg.dataset.raw_ids ? "-raw" : "")))
      .string();
}

namespace {
SequenceDataset open_dataset_untimed(const Config& cfg, bool skip_malformed,
                                     DatasetReport* report) {
  const DatasetArgs& args = cfg.dataset;
  HSTU_CHECK(args.dataset_name != "benchmark",
             "DatasetArgs.dataset_name = \"benchmark\" (recsys-examples' random benchmark data) "
             "trains the ranking task only (RankingArgs)");
  if (args.dataset_name == "synthetic") {
    if (report != nullptr) *report = DatasetReport{};
    SequenceDataset ds = generate_synthetic(cfg.synthetic);
    if (!args.raw_ids) return ds;
    std::vector<int64_t> identity(static_cast<size_t>(ds.num_items));
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int64_t>(i);
    return with_raw_keys(ds, identity, "synthetic");
  }
  const std::string dir = dataset_cache_dir(cfg);
  const std::filesystem::path source = std::filesystem::path(dir) / "source.json";
  const Json description = cache_description(args, skip_malformed);  // checks the name
  std::string why;
  if (std::filesystem::exists(source)) {
    why = cache_mismatch(dir, description, args.raw_ids);
    if (why.empty()) {
      if (report != nullptr) {
        *report = DatasetReport{};
        report->dir = dir;
        report->reused_cache = true;
      }
      return load_preprocessed(dir);
    }
    // A changed raw file is the ordinary reason to preprocess again; anything else is news.
    if (why != "the raw files or the preprocessing options changed")
      std::cerr << "warning: the dataset cache " << dir
                << " does not match its source.json: " << why << "; preprocessing again\n";
  }
  SequenceDataset ds = preprocess_raw(args, dir, skip_malformed, report);
  if (report != nullptr) report->rebuild_reason = why;
  return ds;
}
}  // namespace

SequenceDataset open_dataset(const Config& cfg, bool skip_malformed, DatasetReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  SequenceDataset ds = open_dataset_untimed(cfg, skip_malformed, report);
  if (report != nullptr)
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ds;
}

}  // namespace hstu
