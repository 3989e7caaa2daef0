// dynamic_item_table.h — a dynamic hash-table item table (embed/, issue 18) behind the step's
// item window interface (item_window.h): ids become int64 keys, each step's distinct keys are
// found or inserted (admission, growth, eviction) and gathered into the window, and the fused
// sparse optimiser applies the window's gradient rows in the table. For full-catalogue
// evaluation the catalogue's rows are materialised into a dense table (keys absent from the
// table read their initial value, as a dense table's untrained rows do).
//
// Keys: with a dense-id dataset the key of id i is i. With raw ids (DatasetArgs.raw_ids) the
// batches' int32 ids are catalogue indices (data/batch.h) and the key of index i >= 1 is
// catalogue_keys[i - 1] + 1, so the table, its checkpoints and its counters are keyed by the
// raw ids (+ 1: table key 0 is the padding id, raw key 0 a real item).
//
// On the GPU the step's ids may stay on the device (ItemWindow::on_device): they are
// deduplicated and rewritten to window rows there (ops/window_gpu.h, the host window's order:
// key 0, then ascending), widened to keys, found or inserted with the keys padded to the window's
// rows by the reserved key (DynamicTable::find_or_insert_padded: the distinct count never comes
// to the host), gathered, and after the model the window's gradient rows applied by the fused
// optimiser. While the table needs no host decision (find_or_insert_waits() false: at maximum
// capacity with LRU / LFU eviction, no admission sketch) nothing in the step waits for the device
// (device_only): the trainer captures fetch, model and update in one CUDA graph, and the counters
// stay on the device until counters() reads them. Otherwise the fetch runs before the graph and
// may synchronise (growth, eviction "none"). HSTU_HOST_WINDOW=1 (or set_host_path(true)) selects
// the host path, the reference the GPU tests compare with. Sharded (below), the device dedupe's
// distinct keys and sightings are read back (one synchronisation; the window's rows, not the
// step's [T, R] negatives) and routed to their owners on the host.
//
// Raw-id data with the uniform sampler draws its negatives from the ids whose keys the table
// holds (table_negatives(): negative_pool / negative_pool_device, train/table_negatives.h), and
// its full-catalogue evaluation ranks the targets against those ids only (present_ids(), passed
// to RetrievalEvaluator::run as the candidates; one rank or sharded).
//
// On several data-parallel ranks (a communicator passed in) the table is sharded by key
// (dynamic_shard.h): this rank's table holds the keys dist::key_owner routes to it, fetch and
// update exchange the window's keys, rows and gradients with their owners, materialize
// all-gathers the catalogue, and counters() are the ranks' sums as of the last update. Every
// method but table() and counters() is then collective.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/host_staging.h"
#include "data/dataset.h"
#include "dist/comm.h"
#include "dist/sharding.h"
#include "embed/dynamic_table.h"
#include "embed/item_window.h"
#include "ops/window_gpu.h"
#include "train/dynamic_shard.h"
#include "train/item_window.h"

namespace hstu {

class DynamicItemTable final : public ItemWindow {
 public:
  // A table of `spec` on `device` whose window holds at most max_unique rows (the most
  // distinct ids of one step, id 0 included: model/memory_plan.h item_window_rows).
  // catalogue_keys: the sorted raw keys of a raw-id dataset (empty: dense ids are the keys).
  // With `comm`, `spec` is this rank's shard (shard_table_spec) and keys are routed by `owner`.
  DynamicItemTable(const embed::DynamicTableSpec& spec, Device device, int64_t max_unique,
                   std::vector<int64_t> catalogue_keys = {}, dist::Comm* comm = nullptr,
                   dist::OwnerKind owner = dist::OwnerKind::kModulo);

  EmbeddingTable& window() override { return win_.window(); }
  int64_t fetch(Ctx& ctx, int64_t step, std::span<const std::span<int32_t>> ids) override;
  // The catalogue ids the batches hold are [0, num_ids) (raw ids: the catalogue's size + 1);
  // allocates the device window's buffers (a CUDA table). make_dynamic_item_table calls it; the
  // device path needs it.
  void set_num_ids(int64_t num_ids);
  bool on_device() const override;
  bool device_only() const override {
    return on_device() && !shard_ && !table_->find_or_insert_waits();
  }
  // Returns -1 when the distinct count stays on the device, else the count (it was read back:
  // sharded, where the distinct keys go to the host for the routing).
  int64_t fetch_device(Ctx& ctx, int64_t step, std::span<const Tensor> ids) override;
  void set_host_path(bool host) { host_path_ = host; }
  bool table_negatives() const override { return !catalogue_.empty() && !shard_; }
  std::span<const int32_t> negative_pool(Ctx& ctx) override;
  void negative_pool_device(Ctx& ctx, Tensor& pool, Tensor& count) override;
  int64_t fetch_read_only(Ctx& ctx, std::span<const std::span<int32_t>> ids) override;
  // OptimizerArgs.sparse_optimizer_str must be the table's optimiser ("dense_adam" has no
  // dynamic form); the table's own betas and epsilon apply.
  void update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
              const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) override;

  // out.weight rows [0, n) = the rows of keys 0 .. n-1 (n = out.rows), absent keys their
  // initial value: the catalogue of a full-catalogue evaluation.
  void materialize(Ctx& ctx, EmbeddingTable& out);
  // Whether evaluation ranks only the ids whose keys the table holds (raw-id data).
  bool evaluates_present_keys() const { return !catalogue_.empty(); }
  // The catalogue ids in [1, catalogue size] whose keys the table holds now, ascending (raw-id
  // data only). Sharded: the union over the ranks' shards, the same on every rank (collective:
  // one host all-reduce of a flag per id).
  std::vector<int32_t> present_ids(Ctx& ctx);

  // This rank's table (its shard when sharded).
  embed::DynamicTable& table() { return *table_; }
  // The table's counters; sharded: every rank's summed at the last update (or construction).
  embed::DynamicTableCounters counters() const { return shard_ ? summed_ : table_->counters(); }
  // The key exchange when sharded over ranks, else null.
  const DynamicShard* shard() const { return shard_.get(); }

 private:
  // The table key of catalogue index `id`.
  // The table keys of ids first .. first + n - 1 in the scratch arena (keys; refs for the
  // table's answers, both i64 [n]), `host` left holding the keys.
  std::pair<Tensor, Tensor> catalogue_keys(int32_t first, int64_t n, std::vector<int64_t>& host);
  int64_t key_of(int32_t id) const {
    if (catalogue_.empty() || id == 0) return id;
    return catalogue_[static_cast<size_t>(id) - 1] + 1;
  }
  // keys_[s] = the table keys of ids[s].
  void widen(std::span<const std::span<int32_t>> ids);
  // Sharded: the distinct keys of key_spans_ (key 0 first, then ascending) into ukeys_ and their
  // sightings into ucounts_; ids rewritten to window rows. Returns U.
  int64_t dedupe(std::span<const std::span<int32_t>> ids);
  // The device dedupe's distinct count, read back (waits for the stream).
  int64_t read_count(Ctx& ctx);
  // flags[i] = 1 if the key of id i + 1 is in this rank's table, for ids 1 .. n.
  void present_flags(Ctx& ctx, int64_t n, std::vector<int32_t>& flags);

  std::unique_ptr<embed::DynamicTable> table_;
  embed::DynamicItemWindow win_;
  std::vector<int64_t> catalogue_;
  std::vector<std::vector<int64_t>> keys_;
  std::vector<std::span<const int64_t>> key_spans_;
  std::unique_ptr<Arena> scratch_;  // materialize: keys i64 [n], refs i64 [n]
  std::unique_ptr<DynamicShard> shard_;
  dist::Comm* comm_ = nullptr;  // the shard's ranks (present_ids), else null
  embed::DynamicTableCounters summed_;
  std::vector<int64_t> ukeys_;
  std::vector<int32_t> ucounts_;
  // The device window (set_num_ids; CUDA builds and tables only).
  int64_t num_ids_ = 0;
  bool host_path_ = false;
  bool dev_fetched_ = false;  // the last training fetch was fetch_device: update applies drefs_
  int64_t dev_rows_ = 0;      // rows it looked up: the window's, or the count when read back
  std::unique_ptr<HostStaging> count_host_;  // page-locked: the count, when read back
  // Sharded (page-locked): the distinct keys i64 [cap], then their sightings i32 [cap], read
  // back for the owners' routing.
  std::unique_ptr<HostStaging> route_host_;
  std::unique_ptr<Arena> dev_arena_;
  cuda::WindowDedup dd_;            // rows num_ids, cap max_unique
  Tensor dkeys_, dcounts_, drefs_;  // i64, i32, i64 [cap]: the window's keys (padded)
  Tensor key_of_id_;                // i64 [num_ids]: raw ids' table keys (empty: dense)
  Tensor pool_refs_, pool_flags_, pool_index_, pool_temp_, pool_, pool_count_;  // [num_ids - 1]
  std::vector<int32_t> pool_host_;  // negative_pool's ids
};

// The item table of a run with "item" in DynamicTableArgs.tables: its spec resolved from the
// config (config/dynamic_table.h) for the dataset's catalogue, keyed by the dataset's raw keys in
// raw-id mode, with a window of max_unique rows. With `comm` (a data-parallel job) the table is
// sharded over its ranks by TrainerArgs.shard_owner, each rank's capacity a 1/W share
// (shard_table_spec).
std::unique_ptr<DynamicItemTable> make_dynamic_item_table(const Config& cfg,
                                                          const SequenceDataset& ds, Device device,
                                                          int64_t max_unique,
                                                          dist::Comm* comm = nullptr);

}  // namespace hstu
