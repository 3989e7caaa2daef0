// dataset.h — the in-memory (or memory-mapped) form of a preprocessed dataset: one chronological
// event sequence per user, in CSR layout, plus optional per-user contextual features.
//
// Everything downstream (splits, batcher, samplers, eval) reads this one structure, whatever the
// raw source (MovieLens, KuaiRand, Amazon Books, synthetic). Ids are dense: items 1..num_items-1
// (0 = padding), users 0..num_users-1.
#pragma once

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
  // [E] ranking labels drawn apart from the actions (recsys-examples' benchmark data: bitmasks
  // in [0, 2^num_tasks)); empty = the actions are the labels (every real dataset).
  std::span<const int32_t> labels;

  // Contextual (per-user categorical) features: values[u * C + c] in [0, cardinality[c]).
  std::vector<std::string> contextual_names;      // [C]
  std::vector<int32_t> contextual_cardinalities;  // [C]
  std::span<const int32_t> contextual_values;     // [U*C]

  // Which items the evaluation ranks against (the catalogue): by default every id 1..num_items-1.
  int64_t num_users() const { return static_cast<int64_t>(user_offsets.size()) - 1; }
  int64_t num_events() const { return static_cast<int64_t>(items.size()); }
  int64_t seq_len(int64_t u) const { return user_offsets[u + 1] - user_offsets[u]; }

  // Storage that the spans point into (owned vectors or a memory map).
  std::shared_ptr<const void> storage;
};

// Owned arrays of a dataset built in memory (synthetic data, preprocessing), before they are
// attached to a SequenceDataset.
struct SequenceArrays {
  std::vector<int64_t> user_offsets;       // [U+1]
  std::vector<int32_t> items;              // [E]
  std::vector<int32_t> actions;            // [E] or empty
  std::vector<int64_t> timestamps;         // [E]
  std::vector<int32_t> labels;             // [E] or empty
  std::vector<int32_t> contextual_values;  // [U*C] or empty
};

// Moves `arrays` into ds.storage and points ds's spans at them (the scalar fields and contextual
// names/cardinalities are left as the caller set them).
void attach_arrays(SequenceDataset& ds, SequenceArrays&& arrays);

// Checks the invariants every consumer relies on: offsets start at 0, never decrease and end at
// E; array sizes agree; items in [1, num_items); actions in [0, num_actions); timestamps
// non-decreasing within each user; contextual values below their cardinality. Throws
// hstu::Error naming `source` (the file or generator the data came from) and the first offence.
void validate_dataset(const SequenceDataset& ds, const std::string& source);

}  // namespace hstu
