// dataset.h — the in-memory (or memory-mapped) form of a preprocessed dataset: one chronological
// event sequence per user, in CSR layout, plus optional per-user contextual features.
//
// Everything downstream (splits, batcher, samplers, eval) reads this one structure, whatever the
// raw source (MovieLens, KuaiRand, Amazon Books, synthetic). Ids are dense: items 1..num_items-1
// (0 = padding), users 0..num_users-1.
//
// Raw-id datasets (DatasetArgs.raw_ids) hold each event's raw int64 item key (>= 0; key_hash.h)
// in item_keys instead of a dense id (items is then empty), and the catalogue as sorted unique
// keys; num_items is still the catalogue size + 1. Users stay dense.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hstu {

struct SequenceDataset {
  std::string name;         // e.g. "ml-latest-small", "synthetic"
  int64_t num_items = 0;    // catalogue size INCLUDING the padding index 0
  int32_t num_actions = 0;  // action vocabulary size (max action value + 1), 0 = no actions

  // CSR over users: user u's events are [user_offsets[u], user_offsets[u+1]), sorted by time.
  std::span<const int64_t> user_offsets;  // [U+1]
  std::span<const int32_t> items;         // [E] dense item ids, 1..num_items-1
  std::span<const int32_t> actions;       // [E] rating / engagement bitmask (may be empty)
  std::span<const int64_t> timestamps;    // [E] seconds
  // Raw-id mode only (else empty): raw item key of each event, and the catalogue's keys (sorted,
  // unique, [num_items - 1]: the reader's catalogue and every rated item).
  std::span<const int64_t> item_keys;       // [E] keys >= 0
  std::span<const int64_t> catalogue_keys;  // [V-1] strictly increasing
  // [E] ranking labels drawn apart from the actions (recsys-examples' benchmark data: bitmasks
  // in [0, 2^num_tasks)); empty = the actions are the labels (every real dataset).
  std::span<const int32_t> labels;

  // Contextual (per-user categorical) features: values[u * C + c] in [0, cardinality[c]).
  std::vector<std::string> contextual_names;      // [C]
  std::vector<int32_t> contextual_cardinalities;  // [C]
  std::span<const int32_t> contextual_values;     // [U*C]

  // Which items the evaluation ranks against (the catalogue): by default every id 1..num_items-1.
  int64_t num_users() const { return static_cast<int64_t>(user_offsets.size()) - 1; }
  int64_t num_events() const { return static_cast<int64_t>(timestamps.size()); }
  int64_t seq_len(int64_t u) const { return user_offsets[u + 1] - user_offsets[u]; }
  // Whether events carry raw keys (item_keys) rather than dense ids (items).
  bool raw_ids() const { return !catalogue_keys.empty(); }

  // Storage that the spans point into (owned vectors or a memory map).
  std::shared_ptr<const void> storage;
};

// The catalogue index of event e's item, 1..num_items-1: the dense id, or in raw-id mode 1 + the
// position of its key among the sorted catalogue keys (O(log V)). For numeric raw ids this is
// exactly the dense id preprocessing would have given.
inline int32_t item_index(const SequenceDataset& ds, int64_t e) {
  if (!ds.raw_ids()) return ds.items[e];
  const auto& cat = ds.catalogue_keys;
  return static_cast<int32_t>(std::lower_bound(cat.begin(), cat.end(), ds.item_keys[e]) -
                              cat.begin()) +
         1;
}

// Owned arrays of a dataset built in memory (synthetic data, preprocessing), before they are
// attached to a SequenceDataset.
struct SequenceArrays {
  std::vector<int64_t> user_offsets;       // [U+1]
  std::vector<int32_t> items;              // [E]
  std::vector<int32_t> actions;            // [E] or empty
  std::vector<int64_t> timestamps;         // [E]
  std::vector<int32_t> labels;             // [E] or empty
  std::vector<int32_t> contextual_values;  // [U*C] or empty
  std::vector<int64_t> item_keys;          // [E] raw-id mode (then items is empty)
  std::vector<int64_t> catalogue_keys;     // [V-1] raw-id mode
};

// Moves `arrays` into ds.storage and points ds's spans at them (the scalar fields and contextual
// names/cardinalities are left as the caller set them).
void attach_arrays(SequenceDataset& ds, SequenceArrays&& arrays);

// The raw-id form of a dense dataset: event e's key is key_of_dense[items[e]] and the catalogue
// is key_of_dense[1..num_items-1] sorted ([num_items] keys >= 0, entry 0 unused, distinct).
// The user arrays, actions, timestamps and contextual features are copied. Throws hstu::Error
// naming `source` for a negative or repeated key.
SequenceDataset with_raw_keys(const SequenceDataset& dense, std::span<const int64_t> key_of_dense,
                              const std::string& source);

// Checks the invariants every consumer relies on: offsets start at 0, never decrease and end at
// E; array sizes agree; items in [1, num_items) (raw-id mode: keys >= 0 and in the sorted,
// unique catalogue of num_items - 1 keys); actions in [0, num_actions); timestamps
// non-decreasing within each user; contextual values below their cardinality. Throws
// hstu::Error naming `source` (the file or generator the data came from) and the first offence.
void validate_dataset(const SequenceDataset& ds, const std::string& source);

}  // namespace hstu
