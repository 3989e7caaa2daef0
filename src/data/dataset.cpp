// dataset.cpp — attaching owned arrays to a SequenceDataset, and the one validation pass that
// every dataset (memory-mapped file, synthetic, freshly preprocessed) goes through.
//
// Validation reports the first offence with its user and event index, so a corrupted cache
// file is named and located rather than trained on.
#include "data/dataset.h"

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
  ds.storage = std::move(owned);
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
  for (int64_t e = 0; e < num_events; ++e) {
    const int32_t item = ds.items[e];
    if (item < 1 || item >= ds.num_items) {
      HSTU_THROW(source, ": event ", e, " has item id ", item, " outside [1, ", ds.num_items, ")");
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
