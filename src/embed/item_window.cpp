// item_window.cpp — the dynamic table's per-step window (item_window.h): host dedupe of the raw
// ids, device find_or_insert + gather, and the fused optimiser from the window's gradients.
#include "embed/item_window.h"

#include <algorithm>

#include "core/error.h"
#include "embed/table_math.h"

namespace hstu::embed {

DynamicItemWindow::DynamicItemWindow(DynamicTable& table, int64_t max_unique)
    : table_(table), cap_(max_unique) {
  HSTU_CHECK(max_unique >= 1, "dynamic item window of table '", table.spec().name,
             "': max_unique must be >= 1, got ", max_unique);
  // The window holds embeddings only: the optimiser state lives in the table's rows.
  window_.allocate(table.spec().name + ".window", max_unique, table.spec().dim, table.device(),
                   "sgd");
  arena_ = std::make_unique<Arena>(table.device(),
                                   static_cast<size_t>(max_unique) * 20 + 4 * Arena::kAlign,
                                   "dynamic_window:" + table.spec().name);
  keys_dev_ = arena_->alloc(DType::kI64, {max_unique});
  counts_dev_ = arena_->alloc(DType::kI32, {max_unique});
  refs_dev_ = arena_->alloc(DType::kI64, {max_unique});
}

int64_t DynamicItemWindow::prepare(Ctx& ctx, std::span<const std::span<const int64_t>> raw,
                                   std::span<const std::span<int32_t>> out) {
  HSTU_CHECK(raw.size() == out.size(), "dynamic item window of table '", table_.spec().name,
             "': ", raw.size(), " id spans but ", out.size(), " output spans");
  HSTU_CHECK(!fetched_, "dynamic item window of table '", table_.spec().name,
             "': fetch called again before apply");
  std::vector<int64_t> all = {0};  // padding id 0 is always window row 0
  for (size_t s = 0; s < raw.size(); ++s) {
    HSTU_CHECK(raw[s].size() == out[s].size(), "dynamic item window: span ", s, " has ",
               raw[s].size(), " ids but ", out[s].size(), " outputs");
    all.insert(all.end(), raw[s].begin(), raw[s].end());
  }
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  HSTU_CHECK(sorted.front() != kEmptyKey, "dynamic item window of table '", table_.spec().name,
             "': the ids contain the reserved key INT64_MIN");
  // Window order: key 0, then the other distinct keys ascending.
  keys_.assign({0});
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != 0 && (i == 0 || sorted[i] != sorted[i - 1])) keys_.push_back(sorted[i]);
  const int64_t u = static_cast<int64_t>(keys_.size());
  HSTU_CHECK(u <= cap_, "dynamic item window of table '", table_.spec().name, "': ", u,
             " distinct ids in one step exceed max_unique = ", cap_);
  counts_.assign(static_cast<size_t>(u), 0);
  auto index_of = [&](int64_t k) -> int32_t {
    if (k == 0) return 0;
    return static_cast<int32_t>(std::lower_bound(keys_.begin() + 1, keys_.end(), k) -
                                keys_.begin());
  };
  for (size_t s = 0; s < raw.size(); ++s)
    for (size_t i = 0; i < raw[s].size(); ++i) {
      const int32_t w = index_of(raw[s][i]);
      out[s][i] = w;
      ++counts_[static_cast<size_t>(w)];
    }
  counts_[0] = std::max(counts_[0], 1);
  copy_tensor(keys_dev_.rows(0, u), Tensor(keys_.data(), DType::kI64, Device::kCPU, {u}));
  copy_tensor(counts_dev_.rows(0, u), Tensor(counts_.data(), DType::kI32, Device::kCPU, {u}));
  (void)ctx;
  return u;
}

int64_t DynamicItemWindow::fetch(Ctx& ctx, int64_t step,
                                 std::span<const std::span<const int64_t>> raw,
                                 std::span<const std::span<int32_t>> out) {
  const int64_t u = prepare(ctx, raw, out);
  table_.begin_step(step);
  const Tensor keys = keys_dev_.rows(0, u), refs = refs_dev_.rows(0, u);
  table_.find_or_insert(ctx, keys, counts_dev_.rows(0, u), refs);
  table_.gather(ctx, keys, refs, window_.weight.rows(0, u), true);
  fetched_ = true;
  return u;
}

void DynamicItemWindow::apply(Ctx& ctx, const SparseOptimizerSpec& opt) {
  HSTU_CHECK(fetched_, "dynamic item window of table '", table_.spec().name,
             "': apply without a fetch");
  const int64_t u = num_unique();
  table_.apply(ctx, opt, refs_dev_.rows(0, u), window_.grad.rows(0, u), window_.touched.rows(0, u));
  fetched_ = false;
}

int64_t DynamicItemWindow::fetch_read_only(Ctx& ctx, std::span<const std::span<const int64_t>> raw,
                                           std::span<const std::span<int32_t>> out,
                                           bool init_missing) {
  const int64_t u = prepare(ctx, raw, out);
  const Tensor keys = keys_dev_.rows(0, u), refs = refs_dev_.rows(0, u);
  table_.find(ctx, keys, refs);
  table_.gather(ctx, keys, refs, window_.weight.rows(0, u), init_missing);
  return u;
}

}  // namespace hstu::embed
