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
// dense.health() and dense.grad_sumsq(). An evaluation batch: fetch_read_only, forward.
//
// A table on the GPU may take the step's ids on the device instead (on_device(): fetch_device,
// the ids already uploaded, deduplicated and rewritten there); when device_only() the fetch and
// the update also wait on nothing, so the trainer captures them in the step's CUDA graph. Both
// tables do: the sharded one on one rank, the dynamic one (dynamic_item_table.h) while its
// find_or_insert needs no host decision (at its maximum capacity with LRU / LFU eviction).
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
  // Training step `step` (0-based): deduplicates the ids of every span (inputs, targets,
  // negatives), rewrites them in place to window rows and fills window().weight[0, U); update
  // follows. Returns U.
  virtual int64_t fetch(Ctx& ctx, int64_t step, std::span<const std::span<int32_t>> ids) = 0;
  // Whether fetch_device can take a training step's ids (default: no).
  virtual bool on_device() const { return false; }
  // Whether fetch_device and update then never wait for the device (default: no).
  virtual bool device_only() const { return false; }
  // As fetch, with the ids as i32 device tensors ([n] or [n, m] at a row stride) rewritten in
  // place. Returns U, or -1 when U stays on the device.
  virtual int64_t fetch_device(Ctx& ctx, int64_t step, std::span<const Tensor> ids);
  // Raw-id data with the uniform sampler: whether negatives come from the ids whose keys the
  // table holds (train/table_negatives.h) rather than the whole catalogue (default: no).
  virtual bool table_negatives() const { return false; }
  // Those ids at the start of the step, ascending (host).
  virtual std::span<const int32_t> negative_pool(Ctx& ctx);
  // The same on the device: pool i32 [>= n] and count i32 [1] (= n, never read on the host).
  virtual void negative_pool_device(Ctx& ctx, Tensor& pool, Tensor& count);
  // An evaluation batch: as fetch, but nothing is inserted or scored and no update follows.
  virtual int64_t fetch_read_only(Ctx& ctx, std::span<const std::span<int32_t>> ids) = 0;
  // Applies the window's gradient rows (window().grad, window().touched) to the table with the
  // sparse optimiser for 1-based step `step` and clears them. skip_if_nonfinite and grad_sumsq as
  // for sparse_table_step (optimizer_step.h).
  virtual void update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
                      const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) = 0;
};

// A row-sharded item table (dist/sharded_table.h) behind the window interface.
class ShardedItemWindow final : public ItemWindow {
 public:
  // HSTU_HOST_WINDOW=1 in the environment selects the host path (set_host_path(true)), to measure
  // the two side by side.
  ShardedItemWindow(dist::ShardedTable& table, dist::Comm& comm);
  EmbeddingTable& window() override { return table_.window(); }
  int64_t fetch(Ctx& ctx, int64_t step, std::span<const std::span<int32_t>> ids) override;
  // A CUDA table takes the ids on the device unless set_host_path(true) (the reference the GPU
  // test compares with); one rank needs no synchronisation at all.
  bool on_device() const override { return table_.device() == Device::kCUDA && !host_path_; }
  bool device_only() const override { return on_device() && table_.device_only(); }
  int64_t fetch_device(Ctx& ctx, int64_t step, std::span<const Tensor> ids) override;
  void set_host_path(bool host) { host_path_ = host; }
  int64_t fetch_read_only(Ctx& ctx, std::span<const std::span<int32_t>> ids) override;
  void update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
              const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) override;

 private:
  dist::ShardedTable& table_;
  dist::Comm& comm_;
  bool host_path_ = false;
};

}  // namespace hstu
