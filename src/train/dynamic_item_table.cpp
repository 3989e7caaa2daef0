// dynamic_item_table.cpp — the dynamic item table behind the window interface
// (dynamic_item_table.h).
#include "train/dynamic_item_table.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "config/dynamic_table.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "embed/table_math.h"

namespace hstu {

DynamicItemTable::DynamicItemTable(const embed::DynamicTableSpec& spec, Device device,
                                   int64_t max_unique, std::vector<int64_t> catalogue_keys,
                                   dist::Comm* comm, dist::OwnerKind owner)
    : table_(std::make_unique<embed::DynamicTable>(spec, device)),
      win_(*table_, max_unique),
      catalogue_(std::move(catalogue_keys)) {
  if (comm) {
    comm_ = comm;
    shard_ = std::make_unique<DynamicShard>(*table_, *comm, owner, max_unique);
    summed_ = shard_->sum_counters();
  }
  const char* env = std::getenv("HSTU_HOST_WINDOW");
  host_path_ = env != nullptr && std::string_view(env) == "1";
}

void DynamicItemTable::set_num_ids(int64_t num_ids) {
  const std::string& name = table_->spec().name;
  HSTU_CHECK(num_ids >= 2, "dynamic item table '", name, "': ", num_ids, " catalogue ids");
  HSTU_CHECK(catalogue_.empty() || static_cast<int64_t>(catalogue_.size()) + 1 == num_ids,
             "dynamic item table '", name, "': ", num_ids, " catalogue ids for ", catalogue_.size(),
             " raw keys (+ padding)");
  num_ids_ = num_ids;
  if (!shard_) {  // the keys a step can bring: while they fit, find_or_insert never waits
    std::vector<int64_t> universe(static_cast<size_t>(num_ids));
    for (int64_t i = 0; i < num_ids; ++i)
      universe[static_cast<size_t>(i)] = key_of(static_cast<int32_t>(i));
    Ctx ctx;  // nothing is queued on the table yet
    ctx.device = table_->device();
    table_->set_key_universe(ctx, std::move(universe));
  }
#if defined(HSTU_WITH_CUDA)
  if (table_->device() != Device::kCUDA) return;
  const int64_t cap = win_.max_unique(), n = num_ids - 1;
  const bool raw = !catalogue_.empty();
  dev_arena_ = Arena::planned(Device::kCUDA, "dynamic_window_device:" + name, [&](Arena& a) {
    dd_ = cuda::allocate_window_dedup(a, num_ids, cap);
    dkeys_ = a.alloc(DType::kI64, {cap});
    dcounts_ = a.alloc(DType::kI32, {cap});
    drefs_ = a.alloc(DType::kI64, {cap});
    if (!raw) return;
    key_of_id_ = a.alloc(DType::kI64, {num_ids});
    if (shard_) return;  // negatives from the table's ids: one rank only
    pool_refs_ = a.alloc(DType::kI64, {n});
    pool_flags_ = a.alloc(DType::kI32, {n});
    pool_index_ = a.alloc(DType::kI32, {n});
    pool_temp_ = a.alloc(DType::kU8, {static_cast<int64_t>(cuda::present_pool_temp_bytes(n))});
    pool_ = a.alloc(DType::kI32, {n});
    pool_count_ = a.alloc(DType::kI32, {1});
  });
  count_host_ = std::make_unique<HostStaging>(Device::kCUDA, sizeof(int64_t));
  if (shard_)
    route_host_ = std::make_unique<HostStaging>(
        Device::kCUDA, static_cast<size_t>(cap) * (sizeof(int64_t) + sizeof(int32_t)));
  if (raw) {
    std::vector<int64_t> keys(static_cast<size_t>(num_ids));
    for (int64_t i = 0; i < num_ids; ++i)
      keys[static_cast<size_t>(i)] = key_of(static_cast<int32_t>(i));
    copy_bytes(key_of_id_.data, Device::kCUDA, keys.data(), Device::kCPU,
               keys.size() * sizeof(int64_t));
  }
#endif
}

bool DynamicItemTable::on_device() const {
#if defined(HSTU_WITH_CUDA)
  return table_->device() == Device::kCUDA && !host_path_ && dev_arena_ != nullptr;
#else
  return false;
#endif
}

#if defined(HSTU_WITH_CUDA)
int64_t DynamicItemTable::read_count(Ctx& ctx) {
  count_host_->wait();
  copy_bytes_async(count_host_->data(), Device::kCPU, dd_.count.data, Device::kCUDA,
                   sizeof(int32_t), ctx.stream);
  count_host_->record(ctx.stream);
  count_host_->wait();
  const int64_t n = *reinterpret_cast<const int32_t*>(count_host_->data());
  HSTU_CHECK(n >= 1 && n <= dd_.cap, "dynamic item table '", table_->spec().name, "': ", n,
             " distinct ids from the device dedupe, outside [1, ", dd_.cap, "]");
  return n;
}
#endif

int64_t DynamicItemTable::fetch_device(Ctx& ctx, int64_t step, std::span<const Tensor> ids) {
#if defined(HSTU_WITH_CUDA)
  const std::string& name = table_->spec().name;
  HSTU_CHECK(on_device(), "dynamic item table '", name,
             "': fetch_device needs a CUDA table after set_num_ids (and no HSTU_HOST_WINDOW=1)");
  HSTU_CHECK(!dev_fetched_, "dynamic item table '", name, "': fetch called again before update");
  phase(ctx, "embedding_fetch");
  // Ids -> window rows (0 first, then ascending: ids are ordered as their keys), the window's
  // keys padded to its rows with the reserved key, and each row's sightings.
  cuda::window_dedup(ctx, dd_, ids);
  cuda::window_keys(ctx, dd_, key_of_id_, embed::kEmptyKey, ids, dkeys_, dcounts_);
  if (shard_) {  // the distinct keys (key 0 first, then ascending) go to their owners
    const int64_t u = read_count(ctx);
    char* h = route_host_->data();  // the last step's read-back was waited for
    char* hc = h + static_cast<size_t>(dd_.cap) * sizeof(int64_t);
    copy_bytes_async(h, Device::kCPU, dkeys_.data, Device::kCUDA,
                     static_cast<size_t>(u) * sizeof(int64_t), ctx.stream);
    copy_bytes_async(hc, Device::kCPU, dcounts_.data, Device::kCUDA,
                     static_cast<size_t>(u) * sizeof(int32_t), ctx.stream);
    route_host_->record(ctx.stream);
    route_host_->wait();
    const auto n = static_cast<size_t>(u);
    shard_->fetch(ctx, step, {reinterpret_cast<const int64_t*>(h), n},
                  {reinterpret_cast<const int32_t*>(hc), n}, win_.window(), /*insert=*/true);
    return u;
  }
  table_->begin_step(step);
  // In the steady state the keys go to find_or_insert padded to the window's rows (nothing
  // waits). A table whose find_or_insert waits anyway (growth, eviction "none", a sketch) takes
  // the count first: its host decisions (admitted counts) must not see the padding.
  const int64_t n = table_->find_or_insert_waits() ? read_count(ctx) : dd_.cap;
  const Tensor keys = dkeys_.rows(0, n), refs = drefs_.rows(0, n);
  table_->find_or_insert_padded(ctx, keys, dcounts_.rows(0, n), refs);
  // Absent keys (not admitted, or the padding) read zeros; the rows among them below the count
  // then get their initial value, as the host window's gather with init_missing.
  const Tensor w = win_.window().weight.rows(0, n);
  table_->gather(ctx, keys, refs, w, /*init_missing=*/false);
  // (Rows below the device count only: with the count read back n equals it.)
  cuda::window_init_missing(ctx, dd_, dkeys_, drefs_, win_.window().weight.rows(0, dd_.cap),
                            table_->table_seed(), static_cast<float>(table_->spec().init_std));
  dev_rows_ = n;
  dev_fetched_ = true;
  return -1;
#else
  (void)ctx, (void)step, (void)ids;
  HSTU_THROW("dynamic item table: fetch_device needs a CUDA build");
#endif
}

std::pair<Tensor, Tensor> DynamicItemTable::catalogue_keys(int32_t first, int64_t n,
                                                           std::vector<int64_t>& host) {
  const size_t bytes = static_cast<size_t>(n) * 16 + 2 * Arena::kAlign;
  if (!scratch_ || scratch_->capacity() < bytes)
    scratch_ = std::make_unique<Arena>(table_->device(), bytes, "dynamic table catalogue");
  scratch_->reset(0);
  const Tensor keys = scratch_->alloc(DType::kI64, {n}), refs = scratch_->alloc(DType::kI64, {n});
  host.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    host[static_cast<size_t>(i)] = key_of(static_cast<int32_t>(first + i));
  copy_bytes(keys.data, keys.device, host.data(), Device::kCPU, host.size() * sizeof(int64_t));
  return {keys, refs};
}

std::span<const int32_t> DynamicItemTable::negative_pool(Ctx& ctx) {
  const std::string& name = table_->spec().name;
  HSTU_CHECK(table_negatives() && num_ids_ >= 2, "dynamic item table '", name,
             "': negatives from the table's ids need raw-id data on one rank and set_num_ids");
  const int64_t n = num_ids_ - 1;
  std::vector<int32_t> flags;
  present_flags(ctx, n, flags);
  pool_host_.clear();
  for (int64_t i = 0; i < n; ++i)
    if (flags[static_cast<size_t>(i)] != 0) pool_host_.push_back(static_cast<int32_t>(i + 1));
  return pool_host_;
}

void DynamicItemTable::present_flags(Ctx& ctx, int64_t n, std::vector<int32_t>& flags) {
  std::vector<int64_t> host;
  const auto [keys, refs] = catalogue_keys(1, n, host);
  table_->find(ctx, keys, refs);
  copy_bytes(host.data(), Device::kCPU, refs.data, refs.device, host.size() * sizeof(int64_t));
  flags.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) flags[static_cast<size_t>(i)] = host[static_cast<size_t>(i)] >= 0;
}

std::vector<int32_t> DynamicItemTable::present_ids(Ctx& ctx) {
  HSTU_CHECK(evaluates_present_keys(), "dynamic item table '", table_->spec().name,
             "': present_ids needs raw-id data (DatasetArgs.raw_ids)");
  const int64_t n = static_cast<int64_t>(catalogue_.size());
  std::vector<int32_t> flags;
  present_flags(ctx, n, flags);  // a shard holds only the keys it owns: the flags are disjoint
  if (comm_ && n > 0)
    comm_->host_all_reduce(Tensor(flags.data(), DType::kI32, Device::kCPU, {n}),
                           dist::ReduceOp::kSum);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i)
    if (flags[static_cast<size_t>(i)] != 0) ids.push_back(static_cast<int32_t>(i + 1));
  return ids;
}

void DynamicItemTable::negative_pool_device(Ctx& ctx, Tensor& pool, Tensor& count) {
#if defined(HSTU_WITH_CUDA)
  HSTU_CHECK(table_negatives() && on_device() && !key_of_id_.empty(), "dynamic item table '",
             table_->spec().name, "': negative_pool_device needs raw-id data on the device path");
  table_->find(ctx, key_of_id_.rows(1, num_ids_), pool_refs_);
  cuda::present_pool(ctx, pool_refs_, 1, pool_flags_, pool_index_, pool_temp_, pool_, pool_count_);
  pool = pool_;
  count = pool_count_;
#else
  (void)ctx, (void)pool, (void)count;
  HSTU_THROW("dynamic item table: negative_pool_device needs a CUDA build");
#endif
}

int64_t DynamicItemTable::dedupe(std::span<const std::span<int32_t>> ids) {
  std::vector<int64_t> all = {0};  // padding key 0 is always window row 0
  for (const auto& k : keys_) all.insert(all.end(), k.begin(), k.end());
  std::sort(all.begin(), all.end());
  ukeys_.assign({0});
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] != 0 && (i == 0 || all[i] != all[i - 1])) ukeys_.push_back(all[i]);
  const int64_t u = static_cast<int64_t>(ukeys_.size());
  HSTU_CHECK(u <= win_.max_unique(), "dynamic item table '", table_->spec().name, "': ", u,
             " distinct ids in one step exceed max_unique = ", win_.max_unique());
  ucounts_.assign(static_cast<size_t>(u), 0);
  for (size_t s = 0; s < ids.size(); ++s)
    for (size_t i = 0; i < ids[s].size(); ++i) {
      const int64_t k = keys_[s][i];
      const int32_t w =
          k == 0 ? 0
                 : static_cast<int32_t>(std::lower_bound(ukeys_.begin() + 1, ukeys_.end(), k) -
                                        ukeys_.begin());
      ids[s][i] = w;
      ++ucounts_[static_cast<size_t>(w)];
    }
  return u;
}

void DynamicItemTable::widen(std::span<const std::span<int32_t>> ids) {
  keys_.resize(ids.size());
  key_spans_.clear();
  for (size_t s = 0; s < ids.size(); ++s) {
    keys_[s].resize(ids[s].size());
    for (size_t i = 0; i < ids[s].size(); ++i) keys_[s][i] = key_of(ids[s][i]);
    key_spans_.emplace_back(keys_[s]);
  }
}

int64_t DynamicItemTable::fetch(Ctx& ctx, int64_t step, std::span<const std::span<int32_t>> ids) {
  phase(ctx, "embedding_fetch");
  widen(ids);
  if (shard_) {
    const int64_t u = dedupe(ids);
    shard_->fetch(ctx, step, ukeys_, ucounts_, win_.window(), /*insert=*/true);
    return u;
  }
  return win_.fetch(ctx, step, key_spans_, ids);
}

int64_t DynamicItemTable::fetch_read_only(Ctx& ctx, std::span<const std::span<int32_t>> ids) {
  widen(ids);
  if (shard_) {
    const int64_t u = dedupe(ids);
    shard_->fetch(ctx, 0, ukeys_, ucounts_, win_.window(), /*insert=*/false,
                  /*init_missing=*/true);
    return u;
  }
  return win_.fetch_read_only(ctx, key_spans_, ids, /*init_missing=*/true);
}

void DynamicItemTable::update(Ctx& ctx, const OptimizerArgs& o, double lr, int64_t step,
                              const Tensor& skip_if_nonfinite, const Tensor&) {
  HSTU_CHECK(o.sparse_optimizer_str == table_->spec().optimizer,
             "dynamic item table: OptimizerArgs.sparse_optimizer_str = \"", o.sparse_optimizer_str,
             "\" but the table was built for \"", table_->spec().optimizer, "\"");
  phase(ctx, "opt.tables");
  const double sparse_lr = o.sparse_learning_rate > 0 ? o.sparse_learning_rate : lr;
  SparseOptimizerSpec s = table_->optimizer_spec(step, static_cast<float>(sparse_lr));
  s.skip_if_nonfinite = skip_if_nonfinite;
  if (dev_fetched_) {  // the device window: every row (untouched ones past the count skipped)
    dev_fetched_ = false;
    EmbeddingTable& w = win_.window();
    table_->apply(ctx, s, drefs_.rows(0, dev_rows_), w.grad.rows(0, dev_rows_),
                  w.touched.rows(0, dev_rows_));
    return;
  }
  if (shard_) {
    shard_->update(ctx, s, win_.window());
    summed_ = shard_->sum_counters();
    return;
  }
  win_.apply(ctx, s);
}

void DynamicItemTable::materialize(Ctx& ctx, EmbeddingTable& out) {
  const int64_t n = out.rows;
  if (shard_) {
    std::vector<int64_t> keys(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) keys[static_cast<size_t>(i)] = key_of(static_cast<int32_t>(i));
    shard_->materialize(ctx, keys, out);
    return;
  }
  std::vector<int64_t> host;
  const auto [keys, refs] = catalogue_keys(0, n, host);
  table_->flush(ctx);
  table_->find(ctx, keys, refs);
  table_->gather(ctx, keys, refs, out.weight, /*init_missing=*/true);
}

std::unique_ptr<DynamicItemTable> make_dynamic_item_table(const Config& cfg,
                                                          const SequenceDataset& ds, Device device,
                                                          int64_t max_unique, dist::Comm* comm) {
  const DynamicTableConfig c = dynamic_table_config(cfg, "item", ds.num_items - 1);
  embed::DynamicTableSpec spec;
  spec.name = "item_embedding";
  spec.dim = c.dim;
  spec.capacity_rows = c.capacity_rows;
  spec.max_capacity_rows = c.max_capacity_rows;
  spec.bucket_size = static_cast<int>(c.bucket_size);
  spec.max_load_factor = c.max_load_factor;
  spec.eviction = c.eviction == DynamicEviction::kNone  ? "none"
                  : c.eviction == DynamicEviction::kLfu ? "lfu"
                                                        : "lru";
  spec.admit_threshold = c.admit_threshold;
  spec.optimizer = c.optimizer;
  spec.lr = static_cast<float>(c.learning_rate);
  spec.beta1 = static_cast<float>(c.adam_beta1);
  spec.beta2 = static_cast<float>(c.adam_beta2);
  spec.eps = static_cast<float>(c.adam_eps);
  spec.init_std = c.init_std;
  spec.seed = c.seed;
  spec.gpu_cache_rows = c.gpu_cache_rows;
  spec.value_dtype = c.value_dtype == DynamicValueDtype::kBFloat16 ? "bf16" : "f32";
  std::vector<int64_t> catalogue;
  if (ds.raw_ids()) catalogue.assign(ds.catalogue_keys.begin(), ds.catalogue_keys.end());
  std::unique_ptr<DynamicItemTable> t =
      comm ? std::make_unique<DynamicItemTable>(
                 shard_table_spec(spec, comm->size()), device, max_unique, std::move(catalogue),
                 comm, dist::parse_owner(cfg.trainer.shard_owner, "TrainerArgs.shard_owner"))
           : std::make_unique<DynamicItemTable>(spec, device, max_unique, std::move(catalogue));
  t->set_num_ids(ds.num_items);
  return t;
}

}  // namespace hstu
