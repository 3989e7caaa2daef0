// test_dynamic_item_table.cpp — the retrieval step with a dynamic item table (embed/, through
// train/dynamic_item_table.h) trains exactly like the dense table when nothing is evicted: the
// dynamic table starts from the dense table's initial rows, both runs take the same batches,
// negatives and dropout, and after several steps every dense parameter, Adam moment and item
// row is bitwise equal (CPU), for each sparse optimiser the table has.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "config/load.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/dynamic_item_table.h"
#include "train/runtime.h"
#include "train/step.h"

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

}  // namespace
}  // namespace hstu
