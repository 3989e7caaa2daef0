// item_window.cpp — the row-sharded item table behind the window interface: the fetch and the
// gradient push are ShardedTable's collectives, the update the sparse optimiser on the shard.
#include "train/item_window.h"

#include "core/phase_timer.h"
#include "train/optimizer_step.h"

namespace hstu {

int64_t ShardedItemWindow::fetch(Ctx& ctx, std::span<const std::span<int32_t>> ids) {
  phase(ctx, "comm.embedding_fetch");
  return table_.dedup_and_fetch(ctx, comm_, ids);
}

void ShardedItemWindow::update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
                               const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) {
  phase(ctx, "comm.embedding_grads");
  table_.push_grads(ctx, comm_);
  phase(ctx, "opt.tables");
  sparse_table_step(ctx, table_.shard(), o, lr, step, skip_if_nonfinite, grad_sumsq);
}

}  // namespace hstu
