// key_catalogue.h — the set of item keys that raw-id training ranks and samples against: sorted
// unique int64 keys with O(1) maps index -> key (the array) and key -> index (a hash map).
//
// In raw-id mode (DatasetArgs.raw_ids) there is no dense catalogue 1..V-1; retrieval negatives
// and full-catalogue evaluation use "the keys present in the item table". What the table holds
// is the trainer's business; this class is the data side: a catalogue built from the dataset's
// catalogue (every key preprocessing saw: the reader's catalogue and the rated items) or from the
// keys a training split reads. Index i of the sorted keys is the dense id i + 1 that
// preprocessing without raw_ids gives numeric ids (their dense order is raw-id order).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "data/dataset.h"
#include "data/ranking.h"
#include "data/splits.h"

namespace hstu {

class KeyCatalogue {
 public:
  KeyCatalogue() = default;
  // Sorts and deduplicates `keys`; every key must be >= 0 (kNoKey is never a key). Throws
  // hstu::Error naming the first negative key and `what`.
  explicit KeyCatalogue(std::vector<int64_t> keys, const char* what = "key catalogue");

  int64_t size() const { return static_cast<int64_t>(keys_.size()); }
  std::span<const int64_t> keys() const { return keys_; }  // strictly increasing
  int64_t key(int64_t index) const { return keys_[static_cast<size_t>(index)]; }
  // The index of `key`, or -1 when it is not in the catalogue.
  int64_t index(int64_t key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? -1 : it->second;
  }
  bool contains(int64_t key) const { return index_.count(key) != 0; }

 private:
  std::vector<int64_t> keys_;
  std::unordered_map<int64_t, int64_t> index_;
};

// The dataset's whole catalogue: its catalogue_keys (raw-id mode), or 1..num_items-1 (dense).
KeyCatalogue dataset_key_catalogue(const SequenceDataset& ds);

// The keys a retrieval training split reads: every history event and target of its samples
// (the rows a table that trained on the split holds when nothing was evicted). Dense datasets
// give their dense ids.
KeyCatalogue split_key_catalogue(const SequenceDataset& ds, const Split& train);

// The same for ranking samples: history and candidate events.
KeyCatalogue split_key_catalogue(const SequenceDataset& ds, const RankingSplit& train);

}  // namespace hstu
