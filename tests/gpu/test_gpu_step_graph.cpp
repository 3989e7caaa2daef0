// test_gpu_step_graph.cpp — the training step launched as a CUDA graph (core/step_graph.h) does
// exactly what the same step does launched kernel by kernel.
//
// Two runs from the same seed, one with TrainerArgs.cuda_graph on and one off, take the same
// jagged batches (every batch a different token count, so the graph's grids change), a learning
// rate that changes every step, per-step dropout and negative-sampling seeds, and gradient
// clipping whose norm is read on the device. With the deterministic kernels the two runs must
// agree bit for bit: every loss, every dense parameter and Adam moment, the item table. The graph
// run must also have run all steps after the first as graphs, with no capture failure.
// The same retrieval run also checks the loss's bf16 copy of the item table against the fp32
// table (RetrievalArgs.loss_rows_dtype), and runs once more on the sm_90a attention kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu_harness.h"
#include "common/harness.h"
#include "config/load.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/splits.h"
#include "model/model.h"
#include "model/ranking_model.h"
#include "ops/cuda/sm90/attention_sm90.h"
#include "train/runtime.h"
#include "train/step.h"

namespace hstu::test {
namespace {

constexpr int kSteps = 6;

std::vector<float> host_copy(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(float));
  return v;
}

struct StepRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> state;  // dense params, m, v, then the tables
  StepGraph::Stats stats;
};

double lr_at(int64_t step) {
  return 1e-3 * static_cast<double>(step + 1) / kSteps;  // changes every step
}

Config config_with_graph(const char* gin, bool graph, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {std::string("TrainerArgs.cuda_graph=") +
                                   (graph ? "True" : "False")};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config_text(gin, "<step-graph>", sets, nullptr);
}

// kSteps steps of `stepper` on `model`, losses and graph statistics into r.
template <typename Stepper, typename Model>
void train(Stepper& stepper, Model& model, Batcher& batcher, Runtime& runtime, StepRun& r) {
  SequenceBatch batch;
  for (int64_t step = 0; step < kSteps; ++step) {
    batcher.next(batch);
    stepper.run(runtime.ctx(), model, batch, step, lr_at(step));
    for (const StepLoss& l : stepper.drain(false)) r.losses.push_back(l.loss);
  }
  for (const StepLoss& l : stepper.drain(true)) r.losses.push_back(l.loss);
  runtime.synchronize();
  r.stats = stepper.graph().stats();
}

const char* kRetrievalGin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 64
SyntheticArgs.num_users = 400
SyntheticArgs.num_items = 500
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 64
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 64
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 32
NetworkArgs.hidden_dropout = 0.2
NetworkArgs.relative_attention_bias = True
TrainerArgs.train_batch_size = 32
OptimizerArgs.grad_clip_norm = 0.05
RetrievalArgs.num_negatives = 32
)";

StepRun run_retrieval(bool graph, const std::vector<std::string>& extra = {}) {
  const Config cfg = config_with_graph(kRetrievalGin, graph, extra);
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = cfg.trainer.train_batch_size;
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = cfg.retrieval.num_negatives;
  // 2048 tokens x 33 candidates >= 3 x 500 rows: the loss reads a bf16 copy unless told not to.
  EXPECT_EQ(lowp_loss_rows(cfg, shape, DType::kBF16), cfg.retrieval.loss_rows_dtype == "auto");
  HstuModel model(cfg, shape, Device::kCUDA, DType::kBF16);
  model.plan(11);
  Runtime runtime(Device::kCUDA, cfg, shape);
  TrainStep stepper(cfg, ds.num_items);
  StepRun r;
  train(stepper, model, batcher, runtime, r);
  for (const Tensor& t : {model.dense().flat_params(), model.dense().flat_m(),
                          model.dense().flat_v(), model.items().weight})
    r.state.push_back(host_copy(t));
  return r;
}

const char* kRankingGin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 48
DatasetArgs.max_num_candidates = 8
SyntheticArgs.num_users = 300
SyntheticArgs.num_items = 400
SyntheticArgs.min_seqlen = 12
SyntheticArgs.max_seqlen = 60
SyntheticArgs.num_contextual_features = 2
SyntheticArgs.num_tasks = 3
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 64
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 32
NetworkArgs.hidden_dropout = 0.2
RankingArgs.prediction_head_arch = [32, 3]
RankingArgs.num_tasks = 3
TrainerArgs.train_batch_size = 16
OptimizerArgs.grad_clip_norm = 0.05
)";

StepRun run_ranking(bool graph) {
  const Config cfg = config_with_graph(kRankingGin, graph);
  const SequenceDataset ds = open_dataset(cfg);
  const RankingSplits splits =
      make_ranking_splits(ds, cfg.dataset, cfg.dataset.ranking_split, cfg.dataset.truncate);
  Batcher batcher = ranking_batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  RankingModel model(cfg, ranking_shape(cfg, ds), Device::kCUDA, DType::kBF16);
  Runtime runtime(Device::kCUDA, cfg, model.runtime_shape());
  model.plan(11);
  RankingTrainStep stepper(cfg);
  StepRun r;
  train(stepper, model, batcher, runtime, r);
  for (const Tensor& t :
       {model.dense().flat_params(), model.dense().flat_m(), model.dense().flat_v()})
    r.state.push_back(host_copy(t));
  for (EmbeddingTable* t : model.tables()) r.state.push_back(host_copy(t->weight));
  return r;
}

void expect_same(const StepRun& graph, const StepRun& direct) {
  EXPECT_TRUE(graph.stats.failure.empty()) << "capture failed: " << graph.stats.failure;
  EXPECT_EQ(graph.stats.graph_steps, kSteps - 1) << "every step after the first is a graph";
  EXPECT_GE(graph.stats.instantiations, 1);
  EXPECT_EQ(graph.stats.instantiations + graph.stats.updates, graph.stats.graph_steps);
  EXPECT_EQ(direct.stats.graph_steps, 0);
  ASSERT_EQ(graph.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(direct.losses.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_TRUE(std::isfinite(direct.losses[i])) << "step " << i;
    EXPECT_EQ(graph.losses[i], direct.losses[i]) << "loss of step " << i;
  }
  ASSERT_EQ(graph.state.size(), direct.state.size());
  for (size_t k = 0; k < graph.state.size(); ++k) {
    ASSERT_EQ(graph.state[k].size(), direct.state[k].size());
    size_t differ = 0;
    for (size_t i = 0; i < graph.state[k].size(); ++i)
      differ += std::memcmp(&graph.state[k][i], &direct.state[k][i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "state buffer " << k << ": elements that differ in their bits";
  }
}

TEST(GpuStepGraph, RetrievalGraphStepsMatchDirectStepsBitwise) {
  HSTU_REQUIRE_GPU();
  const StepRun direct = run_retrieval(false);
  const StepRun graph = run_retrieval(true);
  expect_same(graph, direct);
}

// RetrievalArgs.loss_rows_dtype: the bf16 copy of the table (auto, the runs above) is what the
// loss reads — every loss differs from the fp32 table's in its bits — and it stays within bf16
// rounding of it (the rows' relative rounding 2^-9 moves each logit by ~1e-3 at most here).
TEST(GpuStepGraph, RetrievalLossOnBf16RowsTracksTheFp32Table) {
  HSTU_REQUIRE_GPU();
  const StepRun lowp = run_retrieval(false);
  const StepRun fp32 = run_retrieval(false, {"RetrievalArgs.loss_rows_dtype=\"float32\""});
  ASSERT_EQ(lowp.losses.size(), fp32.losses.size());
  for (size_t i = 0; i < lowp.losses.size(); ++i) {
    EXPECT_NE(lowp.losses[i], fp32.losses[i]) << "step " << i << ": the copy was not read";
    EXPECT_NEAR(lowp.losses[i], fp32.losses[i], 5e-3 * std::abs(fp32.losses[i])) << "step " << i;
  }
}

// The sm_90a attention in a captured step (HSTU_ATTN_SM90=1 forces it at these short lengths;
// head width 64, no rab): the step's launch plan with the persistent forward's tile counter, which
// every launch leaves zero for the next (graph replays included), and the fused backward,
// persistent (HSTU_ATTN_SM90_BWD_PERSIST=1: these steps are below its per-call threshold), whose
// dQ convert is its programmatic dependent (a PDL edge in the graph). Graph steps must equal
// direct steps bit for bit. Skipped where the sm_90a kernels do not run.
TEST(GpuStepGraph, Sm90AttentionGraphStepsMatchDirectStepsBitwise) {
  HSTU_REQUIRE_GPU();
  if (!cuda::attn::sm90_attention_available())
    GTEST_SKIP() << "no sm_90a attention here (not a 9.0 GPU, no kernels built, or HSTU_ATTN_SM80)";
  setenv("HSTU_ATTN_SM90", "1", 1);
  setenv("HSTU_ATTN_SM90_BWD_PERSIST", "1", 1);
  const std::vector<std::string> sm90 = {"NetworkArgs.kv_channels=64",
                                         "NetworkArgs.relative_attention_bias=False"};
  const StepRun direct = run_retrieval(false, sm90);
  const StepRun graph = run_retrieval(true, sm90);
  unsetenv("HSTU_ATTN_SM90_BWD_PERSIST");
  unsetenv("HSTU_ATTN_SM90");
  expect_same(graph, direct);
}

TEST(GpuStepGraph, RankingGraphStepsMatchDirectStepsBitwise) {
  HSTU_REQUIRE_GPU();
  const StepRun direct = run_ranking(false);
  const StepRun graph = run_ranking(true);
  expect_same(graph, direct);
}

}  // namespace
}  // namespace hstu::test
