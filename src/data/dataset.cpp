// dataset.cpp — attaching owned arrays to a SequenceDataset, and the one validation pass that
// every dataset (memory-mapped file, synthetic, freshly preprocessed) goes through.
//
// Validation reports the first offence with its user and event index, so a corrupted cache
// file is named and located rather than trained on.
#include "data/dataset.h"

#include <algorithm>

#include "core/error.h"

namespace hstu {

void attach_arrays(SequenceDataset& ds, SequenceArrays&& arrays) {
  auto owned = std::make_shared<SequenceArrays>(std::move(arrays));
  ds.user_offsets = owned->user_offsets;
  ds.items = owned->items;
  ds.actions = owned->actions;
  ds.timestamps = owned->timestamps;
  ds.labels = owned->labels;
  ds.contextual_values = owned->contextual_values;
  ds.item_keys = owned->item_keys;
  ds.catalogue_keys = owned->catalogue_keys;
  ds.storage = std::move(owned);
}

SequenceDataset with_raw_keys(const SequenceDataset& dense, std::span<const int64_t> key_of_dense,
                              const std::string& source) {
  HSTU_CHECK(!dense.raw_ids(), source, ": the dataset already holds raw keys");
  HSTU_CHECK(static_cast<int64_t>(key_of_dense.size()) == dense.num_items, source, ": ",
             key_of_dense.size(), " keys for a catalogue of ", dense.num_items,
             " ids (incl. padding)");
  SequenceArrays a;
  a.user_offsets.assign(dense.user_offsets.begin(), dense.user_offsets.end());
  a.actions.assign(dense.actions.begin(), dense.actions.end());
  a.timestamps.assign(dense.timestamps.begin(), dense.timestamps.end());
  a.contextual_values.assign(dense.contextual_values.begin(), dense.contextual_values.end());
  a.item_keys.resize(dense.items.size());
  for (size_t e = 0; e < dense.items.size(); ++e) a.item_keys[e] = key_of_dense[dense.items[e]];
  a.catalogue_keys.assign(key_of_dense.begin() + 1, key_of_dense.end());
  std::sort(a.catalogue_keys.begin(), a.catalogue_keys.end());
  for (size_t i = 0; i < a.catalogue_keys.size(); ++i) {
    HSTU_CHECK(a.catalogue_keys[i] >= 0, source, ": raw item key ", a.catalogue_keys[i],
               " is negative (raw-id mode needs keys >= 0; -1 marks \"no item\")");
    HSTU_CHECK(i == 0 || a.catalogue_keys[i] != a.catalogue_keys[i - 1], source,
               ": two catalogue items share the raw key ", a.catalogue_keys[i]);
  }
  SequenceDataset ds;
  ds.name = dense.name;
  ds.num_items = dense.num_items;
  ds.num_actions = dense.num_actions;
  ds.contextual_names = dense.contextual_names;
  ds.contextual_cardinalities = dense.contextual_cardinalities;
  attach_arrays(ds, std::move(a));
  validate_dataset(ds, source);
  return ds;
}

void validate_dataset(const SequenceDataset& ds, const std::string& source) {
  const auto& off = ds.user_offsets;
  if (off.empty()) HSTU_THROW(source, ": no user offsets (need num_users + 1 entries)");
  const int64_t num_users = ds.num_users();
  const int64_t num_events = ds.num_events();
  if (off[0] != 0) HSTU_THROW(source, ": user_offsets[0] = ", off[0], ", expected 0");
  for (int64_t u = 0; u < num_users; ++u) {
    if (off[u + 1] < off[u]) {
      HSTU_THROW(source, ": user offsets decrease at user ", u, " (", off[u], " -> ", off[u + 1],
                 ")");
    }
  }
  if (off[num_users] != num_events) {
    HSTU_THROW(source, ": last user offset is ", off[num_users], " but there are ", num_events,
               " events");
  }
  if (static_cast<int64_t>(ds.timestamps.size()) != num_events) {
    HSTU_THROW(source, ": ", ds.timestamps.size(), " timestamps for ", num_events, " events");
  }
  if (!ds.labels.empty() && static_cast<int64_t>(ds.labels.size()) != num_events) {
    HSTU_THROW(source, ": ", ds.labels.size(), " labels for ", num_events, " events");
  }
  if (!ds.actions.empty() && static_cast<int64_t>(ds.actions.size()) != num_events) {
    HSTU_THROW(source, ": ", ds.actions.size(), " actions for ", num_events, " events");
  }
  if (ds.num_items < 2) HSTU_THROW(source, ": num_items = ", ds.num_items, " (need >= 2)");
  if (ds.raw_ids()) {
    if (!ds.items.empty()) HSTU_THROW(source, ": a raw-id dataset with dense item ids");
    if (static_cast<int64_t>(ds.item_keys.size()) != num_events) {
      HSTU_THROW(source, ": ", ds.item_keys.size(), " item keys for ", num_events, " events");
    }
    const auto& cat = ds.catalogue_keys;
    if (static_cast<int64_t>(cat.size()) != ds.num_items - 1) {
      HSTU_THROW(source, ": ", cat.size(),
                 " catalogue keys, expected num_items - 1 = ", ds.num_items - 1);
    }
    for (size_t i = 0; i < cat.size(); ++i) {
      if (cat[i] < 0 || (i > 0 && cat[i] <= cat[i - 1])) {
        HSTU_THROW(source, ": catalogue key ", i, " (", cat[i],
                   ") is negative or not above the previous one (keys must be sorted, unique, "
                   ">= 0)");
      }
    }
    for (int64_t e = 0; e < num_events; ++e) {
      if (!std::binary_search(cat.begin(), cat.end(), ds.item_keys[e])) {
        HSTU_THROW(source, ": event ", e, " has item key ", ds.item_keys[e],
                   ", which is not in the catalogue");
      }
    }
  } else {
    if (!ds.item_keys.empty()) HSTU_THROW(source, ": item keys without a key catalogue");
    if (static_cast<int64_t>(ds.items.size()) != num_events) {
      HSTU_THROW(source, ": ", ds.items.size(), " items for ", num_events, " events");
    }
    for (int64_t e = 0; e < num_events; ++e) {
      const int32_t item = ds.items[e];
      if (item < 1 || item >= ds.num_items) {
        HSTU_THROW(source, ": event ", e, " has item id ", item, " outside [1, ", ds.num_items,
                   ")");
      }
    }
  }
  if (!ds.actions.empty()) {
    for (int64_t e = 0; e < num_events; ++e) {
      if (ds.actions[e] < 0 || ds.actions[e] >= ds.num_actions) {
        HSTU_THROW(source, ": event ", e, " has action ", ds.actions[e], " outside [0, ",
                   ds.num_actions, ")");
      }
    }
  }
  for (int64_t u = 0; u < num_users; ++u) {
    for (int64_t e = off[u] + 1; e < off[u + 1]; ++e) {
      if (ds.timestamps[e] < ds.timestamps[e - 1]) {
        HSTU_THROW(source, ": user ", u, " is not sorted by time at event ", e, " (",
                   ds.timestamps[e - 1], " then ", ds.timestamps[e], ")");
      }
    }
  }
  const int64_t num_ctx = static_cast<int64_t>(ds.contextual_cardinalities.size());
  if (static_cast<int64_t>(ds.contextual_names.size()) != num_ctx) {
    HSTU_THROW(source, ": ", ds.contextual_names.size(), " contextual names for ", num_ctx,
               " cardinalities");
  }
  if (static_cast<int64_t>(ds.contextual_values.size()) != num_users * num_ctx) {
    HSTU_THROW(source, ": ", ds.contextual_values.size(), " contextual values, expected ",
               num_users, " users x ", num_ctx, " features");
  }
  for (int64_t u = 0; u < num_users; ++u) {
    for (int64_t c = 0; c < num_ctx; ++c) {
      const int32_t v = ds.contextual_values[u * num_ctx + c];
      if (v < 0 || v >= ds.contextual_cardinalities[c]) {
        HSTU_THROW(source, ": user ", u, " has ", ds.contextual_names[c], " = ", v, " outside [0, ",
                   ds.contextual_cardinalities[c], ")");
      }
    }
  }
}

}  // namespace hstu
