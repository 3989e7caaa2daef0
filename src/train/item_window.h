// item_window.h — an item table the retrieval step reaches through a compact per-step *window*:
// the step's distinct ids are fetched into window() rows [0, U) (the ids rewritten in place to
// window indices), the unchanged model trains on the window as its item table, and afterwards the
// window's gradient rows are applied to the table. Two tables work this way: a table sharded
// row-wise over the ranks (ShardedItemWindow: rows fetched from their owners, gradients pushed
// back, the sparse optimiser on each owner's shard) and a dynamic hash table keyed by raw ids
// (embed/, issue 18).
//
// One step, in order: fetch (collective for a sharded table), the model's forward and backward
// on window(), update (collective for a sharded table) after the dense optimiser has filled
// dense.health() and dense.grad_sumsq(). An evaluation batch: fetch, forward, end_read_only.
#pragma once

#include <cstdint>
#include <span>

#include "config/config.h"
#include "core/context.h"
#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "model/params.h"

namespace hstu {

class ItemWindow {
 public:
  virtual ~ItemWindow() = default;
  // The step's item table: rows [0, U) hold the step's distinct ids after fetch (row 0: id 0).
  virtual EmbeddingTable& window() = 0;
  // Deduplicates the ids of every span (inputs, targets, negatives), rewrites them in place to
  // window rows and fills window().weight[0, U). Returns U.
  virtual int64_t fetch(Ctx& ctx, std::span<const std::span<int32_t>> ids) = 0;
  // Ends a fetch whose window was only read (an evaluation batch) instead of update.
  virtual void end_read_only() = 0;
  // Applies the window's gradient rows (window().grad, window().touched) to the table with the
  // sparse optimiser for 1-based step `step` and clears them. skip_if_nonfinite and grad_sumsq as
  // for sparse_table_step (optimizer_step.h).
  virtual void update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
                      const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) = 0;
};

// A row-sharded item table (dist/sharded_table.h) behind the window interface.
class ShardedItemWindow final : public ItemWindow {
 public:
  ShardedItemWindow(dist::ShardedTable& table, dist::Comm& comm) : table_(table), comm_(comm) {}
  EmbeddingTable& window() override { return table_.window(); }
  int64_t fetch(Ctx& ctx, std::span<const std::span<int32_t>> ids) override;
  void end_read_only() override { table_.end_read_only_fetch(); }
  void update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
              const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) override;

 private:
  dist::ShardedTable& table_;
  dist::Comm& comm_;
};

}  // namespace hstu
