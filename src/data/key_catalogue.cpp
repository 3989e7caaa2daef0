// key_catalogue.cpp — building KeyCatalogues (see key_catalogue.h).
#include "data/key_catalogue.h"

#include <algorithm>

#include "core/error.h"

namespace hstu {
namespace {

int64_t key_of_event(const SequenceDataset& ds, int64_t e) {
  return ds.raw_ids() ? ds.item_keys[e] : ds.items[e];
}

}  // namespace

KeyCatalogue::KeyCatalogue(std::vector<int64_t> keys, const char* what) : keys_(std::move(keys)) {
  std::sort(keys_.begin(), keys_.end());
  keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  HSTU_CHECK(keys_.empty() || keys_.front() >= 0, what, ": key ", keys_.front(),
             " is negative (keys are >= 0; -1 marks no item)");
  HSTU_CHECK(keys_.size() < (uint64_t{1} << 32), what, ": ", keys_.size(),
             " keys (at most 2^32 - 1: negatives index them with 32-bit words)");
  index_.reserve(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) index_.emplace(keys_[i], static_cast<int64_t>(i));
}

KeyCatalogue dataset_key_catalogue(const SequenceDataset& ds) {
  if (ds.raw_ids()) {
    return KeyCatalogue(std::vector<int64_t>(ds.catalogue_keys.begin(), ds.catalogue_keys.end()),
                        "the dataset's catalogue");
  }
  std::vector<int64_t> ids(static_cast<size_t>(std::max<int64_t>(ds.num_items - 1, 0)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) + 1;
  return KeyCatalogue(std::move(ids), "the dataset's catalogue");
}

KeyCatalogue split_key_catalogue(const SequenceDataset& ds, const Split& train) {
  std::vector<int64_t> keys;
  for (const Sample& s : train.samples) {
    for (int64_t e = s.begin; e < s.end; ++e) keys.push_back(key_of_event(ds, e));
    keys.push_back(key_of_event(ds, s.target));
  }
  return KeyCatalogue(std::move(keys), "the training split's keys");
}

KeyCatalogue split_key_catalogue(const SequenceDataset& ds, const RankingSplit& train) {
  std::vector<int64_t> keys;
  for (const RankingSample& s : train.samples)
    for (int64_t e = s.begin; e < s.end; ++e) keys.push_back(key_of_event(ds, e));
  return KeyCatalogue(std::move(keys), "the training split's keys");
}

}  // namespace hstu
