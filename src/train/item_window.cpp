// item_window.cpp — the row-sharded item table behind the window interface: the fetch and the
// gradient push are ShardedTable's collectives (on CUDA with the ids deduplicated on the device),
// the update the sparse optimiser on the shard.
#include "train/item_window.h"

#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "core/phase_timer.h"
#include "train/optimizer_step.h"

namespace hstu {

int64_t ShardedItemWindow::fetch(Ctx& ctx, int64_t, std::span<const std::span<int32_t>> ids) {
  phase(ctx, "comm.embedding_fetch");
  return table_.dedup_and_fetch(ctx, comm_, ids);
}

ShardedItemWindow::ShardedItemWindow(dist::ShardedTable& table, dist::Comm& comm)
    : table_(table), comm_(comm) {
  const char* env = std::getenv("HSTU_HOST_WINDOW");
  host_path_ = env != nullptr && std::string_view(env) == "1";
}

int64_t ItemWindow::fetch_device(Ctx&, int64_t, std::span<const Tensor>) {
  HSTU_THROW("this item table takes a step's ids on the host only (ItemWindow::fetch)");
}

std::span<const int32_t> ItemWindow::negative_pool(Ctx&) {
  HSTU_THROW("this item table draws no negatives from its own ids (ItemWindow::negative_pool)");
}

void ItemWindow::negative_pool_device(Ctx&, Tensor&, Tensor&) {
  HSTU_THROW("this item table draws no negatives from its own ids (negative_pool_device)");
}

int64_t ShardedItemWindow::fetch_device(Ctx& ctx, int64_t, std::span<const Tensor> ids) {
  phase(ctx, "comm.embedding_fetch");
  return table_.dedup_and_fetch_device(ctx, comm_, ids);
}

int64_t ShardedItemWindow::fetch_read_only(Ctx& ctx, std::span<const std::span<int32_t>> ids) {
  const int64_t u = table_.dedup_and_fetch(ctx, comm_, ids);
  table_.end_read_only_fetch();  // the window stays valid; no gradients go back
  return u;
}

void ShardedItemWindow::update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
                               const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) {
  phase(ctx, "comm.embedding_grads");
  table_.push_grads(ctx, comm_);
  phase(ctx, "opt.tables");
  sparse_table_step(ctx, table_.shard(), o, lr, step, skip_if_nonfinite, grad_sumsq);
}

}  // namespace hstu
