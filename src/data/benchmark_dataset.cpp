// benchmark_dataset.cpp — recsys-examples' benchmark batches as a ranking dataset (see
// benchmark_dataset.h).
#include "data/benchmark_dataset.h"

#include <algorithm>
#include <unordered_map>

#include "config/gin.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/benchmark_data.h"

namespace hstu {
namespace {

constexpr uint64_t kEvalStream = 0xE7A1;  // the evaluation batches' seed: derive_seed(seed, this)

const BenchmarkTable& table_of(const BenchmarkDatasetArgs& a, const std::string& feature) {
  for (const BenchmarkTable& t : a.tables)
    for (const std::string& n : t.feature_names)
      if (n == feature) return t;
  HSTU_THROW("BenchmarkDatasetArgs: feature '", feature, "' has no embedding table");
}

// Maps a feature's raw values to table rows: a static table's value v to v + base, a dynamic
// table's distinct values (over everything generated) to base .. base + N - 1 in value order.
class RowMap {
 public:
  RowMap(const BenchmarkTable& table, int64_t base) : table_(table), base_(base) {}
  void see(const std::vector<int64_t>& values) {
    if (table_.dynamic) seen_.insert(seen_.end(), values.begin(), values.end());
  }
  void freeze() {
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
    HSTU_CHECK(static_cast<int64_t>(seen_.size()) + base_ < INT32_MAX, "benchmark table '",
               table_.table_name, "': ", seen_.size(), " distinct ids exceed 2^31 rows");
  }
  // Rows of the table (the range of row() is [base, rows())).
  int64_t rows() const {
    return base_ + (table_.dynamic ? static_cast<int64_t>(seen_.size()) : table_.vocab_size);
  }
  int32_t row(int64_t v) const {
    if (!table_.dynamic) {
      HSTU_CHECK(v >= 0 && v < table_.vocab_size, "benchmark table '", table_.table_name, "': id ",
                 v, " outside its ", table_.vocab_size, " rows");
      return static_cast<int32_t>(v + base_);
    }
    const auto it = std::lower_bound(seen_.begin(), seen_.end(), v);
    return static_cast<int32_t>(base_ + (it - seen_.begin()));
  }

 private:
  const BenchmarkTable& table_;
  int64_t base_;
  std::vector<int64_t> seen_;  // dynamic: every value seen, then sorted unique
};

BenchmarkBatch generate(const BenchmarkLayout& l, const Config& cfg, bool eval, int64_t i) {
  const uint64_t seed = static_cast<uint64_t>(cfg.trainer.seed);
  return benchmark_batch(l.args, eval ? l.eval_batch_size : l.train_batch_size, l.num_tasks,
                         eval ? derive_seed(seed, kEvalStream) : seed, i);
}

}  // namespace

BenchmarkDatasetArgs read_benchmark_args(const std::string& path) {
  const std::optional<BenchmarkDatasetArgs> a = parse_benchmark_args(gin::parse_file(path));
  HSTU_CHECK(a.has_value(), "DatasetArgs.dataset_path = \"", path,
             "\": dataset \"benchmark\" needs a recsys-examples gin file that binds "
             "BenchmarkDatasetArgs");
  return *a;
}

BenchmarkLayout benchmark_layout(const Config& cfg) {
  BenchmarkLayout l;
  l.args = read_benchmark_args(cfg.dataset.dataset_path);
  l.train_batches = l.args.num_generated_batches;
  l.train_batch_size = cfg.trainer.train_batch_size;
  l.eval_batches = cfg.trainer.max_eval_iters > 0 ? cfg.trainer.max_eval_iters : l.train_batches;
  l.eval_batch_size = cfg.trainer.eval_batch_size;
  l.num_tasks = std::max<int64_t>(cfg.ranking.num_tasks, 1);
  HSTU_CHECK(l.args.max_num_candidates == cfg.dataset.max_num_candidates,
             "DatasetArgs.max_num_candidates = ", cfg.dataset.max_num_candidates,
             " but the benchmark data's BenchmarkDatasetArgs.max_num_candidates = ",
             l.args.max_num_candidates);
  HSTU_CHECK(!l.args.action_feature_name.empty(),
             "BenchmarkDatasetArgs.action_feature_name is not set: hstu's ranking model needs "
             "action tokens");
  return l;
}

BenchmarkData benchmark_data(const Config& cfg) {
  const BenchmarkLayout l = benchmark_layout(cfg);
  const BenchmarkDatasetArgs& a = l.args;
  const int64_t total = l.train_batches + l.eval_batches;
  // Pass 1: the dynamic tables' ids (a batch is a pure function of its index: generated again
  // in pass 2 rather than kept).
  RowMap items(table_of(a, a.item_feature_name), 1), actions(table_of(a, a.action_feature_name), 0);
  std::vector<RowMap> ctx;
  for (const std::string& n : a.contextual_feature_names) ctx.emplace_back(table_of(a, n), 0);
  const bool any_dynamic = std::any_of(a.tables.begin(), a.tables.end(),
                                       [](const BenchmarkTable& t) { return t.dynamic; });
  if (any_dynamic) {
    for (int64_t i = 0; i < total; ++i) {
      const bool eval = i >= l.train_batches;
      const BenchmarkBatch b = generate(l, cfg, eval, eval ? i - l.train_batches : i);
      items.see(b.feature(a.item_feature_name).values);
      actions.see(b.feature(a.action_feature_name).values);
      for (size_t c = 0; c < ctx.size(); ++c)
        ctx[c].see(b.feature(a.contextual_feature_names[c]).values);
    }
  }
  items.freeze();
  actions.freeze();
  for (RowMap& m : ctx) m.freeze();

  BenchmarkData out;
  SequenceArrays arr;
  arr.user_offsets.push_back(0);
  std::vector<int64_t> lengths;
  std::vector<uint8_t> is_eval;  // [users]
  for (int64_t i = 0; i < total; ++i) {
    const bool eval = i >= l.train_batches;
    const BenchmarkBatch b = generate(l, cfg, eval, eval ? i - l.train_batches : i);
    const BenchmarkFeatureData& it = b.feature(a.item_feature_name);
    const BenchmarkFeatureData& ac = b.feature(a.action_feature_name);
    HSTU_CHECK(it.offsets == ac.offsets, "BenchmarkDatasetArgs: the item feature '",
               a.item_feature_name, "' and the action feature '", a.action_feature_name,
               "' need one FeatureArgs (equal lengths)");
    int64_t label = 0;  // next generated label
    for (int64_t s = 0; s < b.batch_size; ++s) {
      const int64_t o = it.offsets[s], n = it.offsets[s + 1] - o;
      const int64_t scored = a.max_num_candidates > 0 ? b.num_candidates[s] : n;
      if (!eval) lengths.push_back(n);
      if (n == 0) {  // nothing to score: skipped (recsys-examples: an empty sample)
        ++(eval ? out.splits.eval : out.splits.train).skipped_users;
        continue;
      }
      for (int64_t e = 0; e < n; ++e) {
        arr.items.push_back(items.row(it.values[o + e]));
        arr.actions.push_back(actions.row(ac.values[o + e]));
        arr.timestamps.push_back(e);
        arr.labels.push_back(e >= n - scored ? static_cast<int32_t>(b.labels[label++]) : 0);
      }
      for (size_t c = 0; c < ctx.size(); ++c) {
        const BenchmarkFeatureData& f = b.feature(a.contextual_feature_names[c]);
        HSTU_CHECK(f.offsets[s + 1] - f.offsets[s] == 1, "contextual feature '",
                   a.contextual_feature_names[c], "' needs one value per sample, has ",
                   f.offsets[s + 1] - f.offsets[s]);
        arr.contextual_values.push_back(ctx[c].row(f.values[f.offsets[s]]));
      }
      arr.user_offsets.push_back(static_cast<int64_t>(arr.items.size()));
      is_eval.push_back(eval ? 1 : 0);
    }
    HSTU_CHECK(label == static_cast<int64_t>(b.labels.size()), "benchmark batch ", i, ": ",
               b.labels.size(), " labels for ", label, " scored events");
  }
  SequenceDataset& ds = out.ds;
  ds.name = "benchmark";
  ds.num_items = items.rows();
  ds.num_actions = static_cast<int32_t>(actions.rows());
  for (size_t c = 0; c < ctx.size(); ++c) {
    ds.contextual_names.push_back(a.contextual_feature_names[c]);
    ds.contextual_cardinalities.push_back(
        static_cast<int32_t>(std::max<int64_t>(ctx[c].rows(), 1)));
  }
  attach_arrays(ds, std::move(arr));
  validate_dataset(ds, "benchmark data");
  int64_t max_len = 1;
  for (const BenchmarkFeature& f : a.features)
    for (const std::string& n : f.feature_names)
      if (n == a.item_feature_name) max_len = std::max<int64_t>(max_len, f.max_sequence_length);
  out.histogram = length_histogram(lengths, max_len, 10);
  // Samples: a sample's last min(n, C) events are its candidates; C = 0: every event is scored.
  const int64_t c = a.max_num_candidates;
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    const int64_t begin = ds.user_offsets[u], end = ds.user_offsets[u + 1];
    const int64_t scored = c > 0 ? std::min(end - begin, c) : end - begin;
    (is_eval[static_cast<size_t>(u)] ? out.splits.eval : out.splits.train)
        .samples.push_back({static_cast<int32_t>(u), begin, end - scored, end});
  }
  return out;
}

}  // namespace hstu
