// item_window.h — the per-step *window* over a DynamicTable, with the API of dist::ShardedTable,
// so the training step uses a dynamic item table the way it uses a sharded one: the step's raw
// int64 ids become int32 indices into a compact EmbeddingTable (window()) that the unchanged
// model reads and writes its gradients into; afterwards the fused optimiser applies the window's
// gradient rows to the table.
//
// One training step (the calls the step makes, in this order):
//   1. U = fetch(ctx, step, {raw id spans}, {i32 output spans})
//        host: dedupe all spans (raw id 0, padding, is always window index 0), write each id's
//        window index into the output spans; device: find_or_insert (admission, growth,
//        eviction; LRU/LFU scores at `step`), gather window().weight[0:U) (keys not admitted
//        read their initial value).
//   2. the model runs on window() as its item table (forward; backward scatters into
//      window().grad and marks window().touched).
//   3. apply(ctx, optimiser spec): the fused optimiser on the table from window().grad[0:U) and
//      window().touched[0:U), which it clears (gradients of keys not admitted are dropped).
// Evaluation: fetch_read_only(ctx, spans, outputs) — find only, nothing inserted and no score
// changed; missing keys read zeros (or their initial value); no apply follows.
// With a host tier, table().prefetch(side ctx, next batch's keys) may run after step 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/arena.h"
#include "embed/dynamic_table.h"
#include "model/params.h"

namespace hstu::embed {

class DynamicItemWindow {
 public:
  // A window of at most max_unique rows (the most distinct ids of one step, id 0 included) on
  // the table's device.
  DynamicItemWindow(DynamicTable& table, int64_t max_unique);

  // Step 1 (see above). raw[i] and out[i] have the same length; returns U.
  int64_t fetch(Ctx& ctx, int64_t step, std::span<const std::span<const int64_t>> raw,
                std::span<const std::span<int32_t>> out);
  // Step 3. opt.kind must be the table's optimiser (DynamicTable::optimizer_spec builds it).
  void apply(Ctx& ctx, const SparseOptimizerSpec& opt);
  // Evaluation fetch: returns U; missing keys read zeros (init_missing = false) or their
  // initial value.
  int64_t fetch_read_only(Ctx& ctx, std::span<const std::span<const int64_t>> raw,
                          std::span<const std::span<int32_t>> out, bool init_missing = false);

  // The step's window table: rows [0, U) hold the keys unique_keys()[0:U).
  EmbeddingTable& window() { return window_; }
  // Window row -> raw key of the last fetch (row 0 = key 0).
  const std::vector<int64_t>& unique_keys() const { return keys_; }
  int64_t num_unique() const { return static_cast<int64_t>(keys_.size()); }
  int64_t max_unique() const { return cap_; }
  DynamicTable& table() { return table_; }

 private:
  // Dedupes the spans into keys_/counts_ and writes the window indices; uploads keys and counts.
  int64_t prepare(Ctx& ctx, std::span<const std::span<const int64_t>> raw,
                  std::span<const std::span<int32_t>> out);

  DynamicTable& table_;
  int64_t cap_;
  EmbeddingTable window_;
  std::unique_ptr<Arena> arena_;
  Tensor keys_dev_, counts_dev_, refs_dev_;  // i64 [cap], i32 [cap], i64 [cap]
  std::vector<int64_t> keys_;
  std::vector<int32_t> counts_;
  bool fetched_ = false;
};

}  // namespace hstu::embed
