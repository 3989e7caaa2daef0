// preprocess.h — raw events -> the dense, time-sorted, memory-mapped sequence file that training
// reads, plus the id maps and the dataset cache used by open_dataset().
//
// The shaping decision: preprocessing is done once and written as one flat binary file whose
// arrays are exactly SequenceDataset's spans, so loading is an mmap plus a validation pass.
//
// sequences.bin (little-endian; every section starts on an 8-byte boundary, zero-padded):
//   offset 0   char[8]  magic "HSTUSEQ1"
//          8   u32      version (kSequenceFileVersion)
//         12   u32      flags (bit 0: actions present)
//         16   u64      file_bytes (total size; a truncated file fails this check)
//         24   u64      checksum: FNV-1a over 64-bit words, h = (h ^ w) * 0x100000001b3 from
//                       0xcbf29ce484222325, over every word of the file except this one
//         32   i64      num_users U, i64 num_events E, i64 num_items V (incl. padding 0)
//         56   i32      num_actions, i32 num_contextual C
//         64   u32      name_bytes, u32 reserved (0)
//         72   metadata: name bytes; then per contextual feature: u32 length, name bytes,
//                        i32 cardinality
//         then arrays: user_offsets i64[U+1], items i32[E], actions i32[E] (if flag 0),
//                      timestamps i64[E], contextual_values i32[U*C]
// item_ids.csv: "index,raw_id" for dense items 1..V-1; user_ids.csv: "index,raw_id" for
// 0..U-1 (string ids CSV-quoted when needed). source.json: what the cache was built from.
//
// Raw-id files (DatasetArgs.raw_ids; version 2, flags bit 1): the items section holds the raw
// item keys i64[E] instead of i32 dense ids, and a last section the catalogue keys i64[V-1]
// (sorted, unique); no item_ids.csv is written. Their cache folder is <dataset_name>-raw, and
// source.json records "raw_ids": true and the CRC-32C of sequences.bin and user_ids.csv.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "data/readers.h"

namespace hstu {

inline constexpr uint32_t kSequenceFileVersion = 1;        // dense item ids
inline constexpr uint32_t kRawKeySequenceFileVersion = 2;  // raw item keys (DatasetArgs.raw_ids)

// Dense id -> raw id (an index into RawData::item_names / user_names for string ids).
struct IdMaps {
  std::vector<int64_t> item_raw;  // [V] item_raw[i] = raw id of dense item i (entry 0 unused)
  std::vector<int64_t> user_raw;  // [U] user_raw[u] = raw id of dense user u
};

// What open_dataset / preprocess_raw did (for the log).
struct DatasetReport {
  std::string dir;            // the folder of sequences.bin ("" for synthetic)
  bool reused_cache = false;  // loaded an existing preprocessed file
  int64_t num_malformed = 0;  // raw rows skipped (skip_malformed)
  int64_t num_filtered = 0;   // raw rows removed by the dataset's filter
  std::vector<std::string> malformed_examples;
  double seconds = 0;  // wall time of open_dataset (generation, cache load or preprocessing)
  // Why an existing cache was preprocessed again ("" when none was there or it was reused).
  std::string rebuild_reason;
};

// Groups events by user, stable-sorts each user's events by timestamp (ties keep file order),
// maps items to 1..V-1 in raw-id order over catalogue + rated items and users to 0..U-1 in
// raw-id order. Returns an in-memory dataset (owned arrays).
// tie_break orders a user's events with equal timestamps: "file" keeps file order (a stable
// sort); "shuffle" uses a fixed hash of (user, item) instead — the statistics of Meta's
// preprocessing, whose pandas quicksort leaves ties in an arbitrary order (on ml-latest-small
// 22% of events share a timestamp, and 19% of users' last two events).
// raw_ids: the result holds raw item keys (SequenceDataset::item_keys): a numeric id is its own
// key (a negative one is an error naming its file:line), a string id the key of key_hash.h (two
// strings with one key are an error naming both); maps->item_raw is left empty. The event order
// is the same as without raw_ids.
SequenceDataset build_dataset(const RawData& raw, IdMaps* maps = nullptr,
                              const std::string& tie_break = "file", bool raw_ids = false);

// Writes sequences.bin (atomically: a temporary file renamed into place).
void write_sequence_file(const SequenceDataset& ds, const std::string& path);

// Memory-maps a sequences.bin read-only and validates it; errors name `path`.
SequenceDataset read_sequence_file(const std::string& path);

// Writes item_ids.csv (unless maps.item_raw is empty: raw-id mode) and user_ids.csv into `dir`.
void write_id_maps(const RawData& raw, const IdMaps& maps, const std::string& dir);

// Reads the raw files of args.dataset_name from args.dataset_path, writes sequences.bin, the id
// maps and source.json into out_dir (created if needed) and returns the memory-mapped result.
SequenceDataset preprocess_raw(const DatasetArgs& args, const std::string& out_dir,
                               bool skip_malformed = false, DatasetReport* report = nullptr);

// Loads <dir>/sequences.bin.
SequenceDataset load_preprocessed(const std::string& dir);

// The cache folder of a config's dataset: <cache_dir or run_dir>/<dataset_name>, with "-raw"
// appended under DatasetArgs.raw_ids.
std::string dataset_cache_dir(const Config& cfg);

// The dataset of a run: "synthetic" is generated from cfg.synthetic (under raw_ids each
// generated id is its own key); a raw dataset is loaded
// from its cache folder when source.json matches the raw files (path, name, size and mtime of
// each) and the options, and sequences.bin, item_ids.csv and user_ids.csv match the sizes and
// CRC-32Cs source.json records for them ("cache_files"); otherwise it is preprocessed into it
// again (a damaged or missing cache file, or a source.json without checksums, with a warning on
// stderr naming the file).
SequenceDataset open_dataset(const Config& cfg, bool skip_malformed = false,
                             DatasetReport* report = nullptr);

}  // namespace hstu
