// test_dynamic_item_table.cpp — the retrieval step with a dynamic item table (embed/, through
// train/dynamic_item_table.h) trains exactly like the dense table when nothing is evicted: the
// dynamic table starts from the dense table's initial rows, both runs take the same batches,
// negatives and dropout, and after several steps every dense parameter, Adam moment and item
// row is bitwise equal (CPU), for each sparse optimiser the table has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/dynamic_rig.h"
#include "common/tiny_gin.h"
#include "config/load.h"
#include "data/batcher.h"
#include "data/key_negatives.h"
#include "data/negatives.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/dynamic_item_table.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/table_negatives.h"

namespace hstu {
namespace {

constexpr int kSteps = 5;

std::vector<float> host_copy(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(float));
  return v;
}

Config config(const std::string& sparse_optimizer) {
  const char* gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 24
SyntheticArgs.num_users = 120
SyntheticArgs.num_items = 90
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 24
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 8
NetworkArgs.hidden_dropout = 0.2
TrainerArgs.train_batch_size = 8
TrainerArgs.eval_batch_size = 8
TrainerArgs.num_threads = 1
RetrievalArgs.num_negatives = 6
)";
  return load_config_text(gin, "<dynamic item table>",
                          {"OptimizerArgs.sparse_optimizer_str=\"" + sparse_optimizer + "\""},
                          nullptr);
}

struct TrainedState {
  std::vector<float> params, m, v, items;
};

ModelShape shape_of(const Config& cfg, int64_t items) {
  ModelShape s = retrieval_model_shape(cfg, items);
  return s;
}

void train(TrainStep& stepper, HstuModel& model, Batcher& batcher, Ctx& ctx,
           const StepShare& share) {
  SequenceBatch batch;
  for (int64_t step = 0; step < kSteps; ++step) {
    batcher.next(batch);
    stepper.run(ctx, model, batch, step, 1e-2 * static_cast<double>(step + 1), share);
  }
  stepper.drain(true);
}

TrainedState dense_run(const Config& cfg, const SequenceDataset& ds, const DataSplits& splits) {
  HstuModel model(cfg, shape_of(cfg, ds.num_items), Device::kCPU, DType::kF32);
  model.plan(static_cast<uint64_t>(cfg.trainer.seed));
  Runtime runtime(Device::kCPU, cfg, shape_of(cfg, ds.num_items));
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  TrainStep stepper(cfg, ds.num_items);
  train(stepper, model, batcher, runtime.ctx(), {});
  return {host_copy(model.dense().flat_params()), host_copy(model.dense().flat_m()),
          host_copy(model.dense().flat_v()), host_copy(model.items().weight)};
}

TrainedState dynamic_run(const Config& cfg, const SequenceDataset& ds, const DataSplits& splits) {
  ModelShape shape = shape_of(cfg, ds.num_items);
  shape.window_rows = item_window_rows(cfg, ds.num_items);
  shape.full_eval_buffers = true;
  HstuModel model(cfg, shape, Device::kCPU, DType::kF32);
  const uint64_t seed = static_cast<uint64_t>(cfg.trainer.seed);
  model.plan(seed);
  Runtime runtime(Device::kCPU, cfg, shape);
  embed::DynamicTableSpec spec;
  spec.name = "item_embedding";
  spec.dim = cfg.network.hidden_size;
  spec.capacity_rows = spec.max_capacity_rows = 4 * ds.num_items;  // nothing is evicted
  spec.eviction = "none";
  spec.optimizer = cfg.optimizer.sparse_optimizer_str;
  spec.beta1 = static_cast<float>(cfg.optimizer.adam_beta1);
  spec.beta2 = static_cast<float>(cfg.optimizer.adam_beta2);
  spec.eps = static_cast<float>(cfg.optimizer.adam_eps);
  spec.seed = seed;
  DynamicItemTable items(spec, Device::kCPU, shape.window_rows);
  // The dense table's initial rows (model.cpp), one per key.
  std::vector<float> init(static_cast<size_t>(ds.num_items * spec.dim));
  init_tensor(Tensor(init.data(), DType::kF32, Device::kCPU, {ds.num_items, spec.dim}),
              Init::trunc_normal(0.02), seed, "item_embedding");
  std::vector<int64_t> keys(static_cast<size_t>(ds.num_items));
  std::iota(keys.begin(), keys.end(), int64_t{0});
  items.table().import_rows(runtime.ctx(), keys, init, spec.dim);
  model.set_item_table(&items.window());
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  TrainStep stepper(cfg, ds.num_items);
  StepShare share;
  share.items = &items;
  train(stepper, model, batcher, runtime.ctx(), share);
  EXPECT_EQ(items.counters().evictions, 0);
  EXPECT_EQ(items.counters().size, ds.num_items);
  // The catalogue materialised for evaluation holds the trained rows.
  EmbeddingTable catalogue;
  catalogue.allocate("catalogue", ds.num_items, spec.dim, Device::kCPU, "sgd");
  items.materialize(runtime.ctx(), catalogue);
  return {host_copy(model.dense().flat_params()), host_copy(model.dense().flat_m()),
          host_copy(model.dense().flat_v()), host_copy(catalogue.weight)};
}

class DynamicItemTableStep : public testing::TestWithParam<const char*> {};

TEST_P(DynamicItemTableStep, TrainsBitwiseLikeTheDenseTable) {
  const Config cfg = config(GetParam());
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  const TrainedState a = dense_run(cfg, ds, splits), b = dynamic_run(cfg, ds, splits);
  ASSERT_EQ(a.items.size(), b.items.size());
  EXPECT_EQ(a.params, b.params) << "dense parameters";
  EXPECT_EQ(a.m, b.m) << "Adam m";
  EXPECT_EQ(a.v, b.v) << "Adam v";
  size_t differ = 0;
  for (size_t i = 0; i < a.items.size(); ++i)
    differ += std::memcmp(&a.items[i], &b.items[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "item rows differ in " << differ << " of " << a.items.size()
                        << " values";
  // The run trained: the rows moved away from their initial values.
  std::vector<float> init(a.items.size());
  init_tensor(
      Tensor(init.data(), DType::kF32, Device::kCPU, {ds.num_items, cfg.network.hidden_size}),
      Init::trunc_normal(0.02), static_cast<uint64_t>(cfg.trainer.seed), "item_embedding");
  EXPECT_NE(init, b.items);
}

INSTANTIATE_TEST_SUITE_P(Optimisers, DynamicItemTableStep,
                         testing::Values("adam", "sgd", "row_wise_adagrad"));

// A declared key universe (set_num_ids: the catalogue's keys) that fits the table lets
// find_or_insert insert with its counts on the device and never wait — even for a table that
// may still grow and has no eviction — without changing anything it computes: training with it
// equals training without it (rows, scores, counters, dense parameters), on the CPU backend
// (the same host logic drives the CUDA one). The table starts too small (it waits and grows) and
// stops waiting once the catalogue fits.
TEST(DynamicItemTableUniverse, FittingUniverseNeverWaitsAndChangesNothing) {
  const Config cfg = config("adam");
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  struct Result {
    std::vector<float> params;
    embed::TableRows rows;
    embed::DynamicTableCounters c;
    bool waits_at_start = false, waits_at_end = false;
  };
  auto run = [&](bool universe) {
    ModelShape shape = shape_of(cfg, ds.num_items);
    shape.window_rows = item_window_rows(cfg, ds.num_items);
    shape.full_eval_buffers = true;
    HstuModel model(cfg, shape, Device::kCPU, DType::kF32);
    model.plan(static_cast<uint64_t>(cfg.trainer.seed));
    Runtime runtime(Device::kCPU, cfg, shape);
    embed::DynamicTableSpec spec;
    spec.name = "item_embedding";
    spec.dim = cfg.network.hidden_size;
    spec.capacity_rows = 64;  // 2 buckets of 32: the 90-id catalogue does not fit yet
    spec.max_capacity_rows = 4096;
    spec.eviction = "none";
    spec.optimizer = "adam";
    DynamicItemTable items(spec, Device::kCPU, shape.window_rows);
    if (universe) items.set_num_ids(ds.num_items);
    Result r;
    r.waits_at_start = items.table().find_or_insert_waits();
    model.set_item_table(&items.window());
    Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
    TrainStep stepper(cfg, ds.num_items);
    StepShare share;
    share.items = &items;
    train(stepper, model, batcher, runtime.ctx(), share);
    r.waits_at_end = items.table().find_or_insert_waits();
    r.params = host_copy(model.dense().flat_params());
    r.rows = items.table().export_rows(runtime.ctx());
    r.c = items.counters();
    return r;
  };
  const Result with = run(true), without = run(false);
  EXPECT_TRUE(with.waits_at_start);
  EXPECT_FALSE(with.waits_at_end) << "the catalogue fits after " << with.c.grows << " growths";
  EXPECT_TRUE(without.waits_at_end);
  EXPECT_GT(with.c.grows, 0);
  EXPECT_EQ(with.params, without.params);
  EXPECT_EQ(with.rows.keys, without.rows.keys);
  EXPECT_EQ(with.rows.scores, without.rows.scores);
  EXPECT_EQ(with.rows.values, without.rows.values);
  const auto c = [](const embed::DynamicTableCounters& x) {
    return std::vector<int64_t>{x.inserts, x.evictions, x.rejections, x.size, x.capacity, x.grows};
  };
  EXPECT_EQ(c(with.c), c(without.c));
}

// Raw-id data (issue 18 item 5): uniform negatives come from the ids whose keys the item table
// holds. The pool is exactly those ids; the draws equal the key sampler's (data/key_negatives.h)
// over the table's sorted keys, mapped back to ids; an empty table draws over the catalogue.
TEST(DynamicItemTableNegatives, PoolIsTheTableKeysAndDrawsEqualTheKeySampler) {
  const Config cfg =
      load_config_text(test::raw_id_dynamic_gin(90, 8, 6), "<table negatives>", {}, nullptr);
  const SequenceDataset ds = open_dataset(cfg);
  ASSERT_TRUE(ds.raw_ids());
  ModelShape shape = shape_of(cfg, ds.num_items);
  shape.window_rows = item_window_rows(cfg, ds.num_items);
  Runtime runtime(Device::kCPU, cfg, shape);
  Ctx& ctx = runtime.ctx();
  auto items = make_dynamic_item_table(cfg, ds, Device::kCPU, shape.window_rows);
  ASSERT_TRUE(items->table_negatives());
  const uint64_t seed = 5, step = 3;
  const int64_t tokens = 11, r = 7;
  std::vector<int32_t> got(static_cast<size_t>(tokens * r)), want(got.size());

  // An empty table: the catalogue's uniform draws.
  EXPECT_TRUE(items->negative_pool(ctx).empty());
  sample_pool_negatives({}, ds.num_items, tokens, r, seed, step, got, 2);
  sample_uniform_negatives(ds.num_items, tokens, r, seed, step, want, 2);
  EXPECT_EQ(got, want);

  // A training fetch inserts the ids' keys (and the padding key 0, which is no negative).
  std::vector<int32_t> ids = {17, 3, 0, 17, 42, 88, 3};
  const std::span<int32_t> spans[] = {ids};
  items->fetch(ctx, 0, spans);
  const std::span<const int32_t> got_pool = items->negative_pool(ctx);
  const std::vector<int32_t> pool(got_pool.begin(), got_pool.end());
  EXPECT_EQ(pool, (std::vector<int32_t>{3, 17, 42, 88}));
  sample_pool_negatives(pool, ds.num_items, tokens, r, seed, step, got, 2);
  std::vector<int64_t>
      keys;  // the table's keys ascending: catalogue key + 1 (dynamic_item_table.h)
  for (int32_t id : pool) keys.push_back(ds.catalogue_keys[static_cast<size_t>(id - 1)] + 1);
  std::vector<int64_t> drawn(got.size());
  sample_key_negatives(keys, tokens, r, seed, step, drawn, 2);
  for (size_t e = 0; e < got.size(); ++e) {
    const int64_t key = drawn[e] - 1;  // back to the raw key, then its catalogue id
    const auto it = std::lower_bound(ds.catalogue_keys.begin(), ds.catalogue_keys.end(), key);
    ASSERT_EQ(got[e], static_cast<int32_t>(it - ds.catalogue_keys.begin()) + 1) << e;
  }
  // Every pool id is drawn somewhere in a larger sample, and nothing else.
  std::vector<int32_t> many(4000);
  sample_pool_negatives(pool, ds.num_items, 1000, 4, seed, step, many);
  std::vector<int32_t> seen(many);
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen, pool);
}

// The training step uses the pool: with raw ids and the uniform sampler, a few steps train
// (finite losses) and every negative of step s is an id the table held before it (checked
// through the pool the step drew from: its negatives, mapped back from window rows, are in it).
TEST(DynamicItemTableNegatives, TrainingStepDrawsFromTheTable) {
  const Config cfg = load_config_text(
      test::raw_id_dynamic_gin(400, 4, 8, "DynamicTableArgs.capacity_ratio = 4.0\n"),
      "<table negatives step>", {}, nullptr);
  test::DynamicRig rig(cfg, 3);
  std::vector<int32_t> seen_ids;  // every id of the batches so far
  for (int64_t step = 0; step < 4; ++step) {
    rig.next();
    // Before the step: its negatives will come from these ids (all earlier batches' and their
    // negatives, i.e. a superset of seen_ids, never an id absent from the table).
    const std::span<const int32_t> got = rig.items->negative_pool(rig.ctx());
    const std::vector<int32_t> pool(got.begin(), got.end());
    for (int32_t id : seen_ids) {
      ASSERT_TRUE(std::binary_search(pool.begin(), pool.end(), id));
    }
    if (step > 0) {
      EXPECT_LT(pool.size(), static_cast<size_t>(rig.ds.num_items - 1));
    }
    for (int32_t id : rig.batch.item_ids)
      if (id != 0) seen_ids.push_back(id);
    rig.run(step, 1e-2);
  }
  for (const double loss : rig.losses()) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(rig.items->counters().evictions, 0);  // (so every earlier id stayed in the pool)
}

}  // namespace
}  // namespace hstu
