// test_memory_plan.cpp — the memory plan computed without allocating (model/memory_plan.h) equals
// the real models' plans:
//   - retrieval, byte for byte: the activation arena of a planned HstuModel is located through
//     the first and the last buffers it hands out (the batch offsets at the arena's base, the
//     loss at the end of the step buffers, the normalised item table after it), over layer
//     options that change the buffers (final LayerNorm, recomputed LayerNorm / SiLU, rab, head
//     widths that pad the uvqk layout, no layers at all);
//   - the loss's copy of the item table with 16-bit activations (RetrievalArgs.loss_rows_dtype),
//     counted where lowp_loss_rows takes it, as the model's arena holds it;
//   - the dense parameter layout (tensors, floats) of HstuModel and RankingModel;
//   - ranking, the activations line of RankingModel::describe_plan (0.1 MiB) on shapes whose
//     buffers are each larger than that, with and without actions and contextual features.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>

#include "config/config.h"
#include "core/arena.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/ranking_model.h"

namespace hstu {
namespace {

int64_t aligned(int64_t bytes) {
  const int64_t a = static_cast<int64_t>(Arena::kAlign);
  return (bytes + a - 1) / a * a;
}

struct RetrievalCase {
  const char* name;
  int64_t layers, hidden, heads, head_dim;
  bool final_ln, recompute_ln, recompute_silu, rab;
};

void PrintTo(const RetrievalCase& c, std::ostream* os) {
  *os << c.name;
}

class RetrievalPlan : public ::testing::TestWithParam<RetrievalCase> {};

// The retrieval config of case c: batches of 5 (train) / 7 (eval) x 30 tokens, 6 negatives.
Config plan_config(const RetrievalCase& c) {
  Config cfg;
  cfg.network.num_layers = c.layers;
  cfg.network.hidden_size = c.hidden;
  cfg.network.num_attention_heads = c.heads;
  cfg.network.kv_channels = c.head_dim;
  cfg.network.final_layernorm = c.final_ln;
  cfg.network.recompute_input_layernorm = c.recompute_ln;
  cfg.network.recompute_input_silu = c.recompute_silu;
  cfg.network.relative_attention_bias = c.rab;
  cfg.network.num_position_buckets = 40;
  cfg.dataset.max_history_seqlen = 30;
  cfg.trainer.train_batch_size = 5;
  cfg.trainer.eval_batch_size = 7;
  cfg.retrieval.num_negatives = 6;
  return cfg;
}

TEST_P(RetrievalPlan, EqualsTheModelsArena) {
  const RetrievalCase c = GetParam();
  const Config cfg = plan_config(c);
  const int64_t items = 123;
  const ModelShape shape = retrieval_model_shape(cfg, items);
  EXPECT_EQ(shape.max_batch, 7);
  EXPECT_EQ(shape.max_tokens, 7 * 30);

  HstuModel model(cfg, shape, Device::kCPU, DType::kF32);
  model.plan(3);
  const char* base = static_cast<const char*>(model.batch_tensors().offsets.data);
  const char* loss = static_cast<const char*>(model.loss_tensor().data);
  Ctx ctx;
  const char* norm = static_cast<const char*>(model.normalized_items(ctx).data);
  const int64_t step = loss - base + static_cast<int64_t>(Arena::kAlign);
  const int64_t whole = (norm - base) + aligned(items * c.hidden * 4) + aligned(items * 4);
  EXPECT_EQ(retrieval_activation_bytes(cfg, shape, DType::kF32, false), step);
  EXPECT_EQ(retrieval_activation_bytes(cfg, shape, DType::kF32, true), whole);

  const ModelMemory m = retrieval_memory(cfg, items, Device::kCPU, DType::kF32);
  EXPECT_EQ(m.step_activation_bytes, step);
  EXPECT_EQ(m.activation_bytes, whole);
  EXPECT_EQ(m.dense_floats, model.dense().size());
  EXPECT_EQ(m.dense_tensors, static_cast<int64_t>(model.dense().table().size()));
  EXPECT_EQ(m.dense_bytes, model.dense().size() * 4 * 4);
  EXPECT_EQ(m.compute_copy_bytes, 0);
  ASSERT_EQ(m.tables.size(), 1u);
  EXPECT_EQ(m.tables[0].rows, items);
  EXPECT_EQ(m.tables[0].max_unique, items);  // 5 x 30 x (2 + 6) + 1 ids > 123 rows
}

INSTANTIATE_TEST_SUITE_P(
    Layers, RetrievalPlan,
    ::testing::Values(RetrievalCase{"plain", 2, 16, 2, 8, true, false, false, false},
                      RetrievalCase{"no_final_ln", 2, 16, 2, 8, false, false, false, false},
                      RetrievalCase{"recompute", 3, 24, 2, 12, true, true, true, false},
                      RetrievalCase{"padded_heads_rab", 2, 50, 2, 25, true, false, false, true},
                      RetrievalCase{"no_layers", 0, 16, 2, 8, true, false, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

// RetrievalArgs.loss_rows_dtype: with 16-bit activations (a GPU run) the plan holds the loss's copy
// of the item table, [rows, D] in the activation dtype, exactly where lowp_loss_rows says so
// (a batch gathers at least 3x the rows), as the model's own arena does; none with "float32" or
// with fp32 activations (the CPU).
TEST(RetrievalPlanLossRows, CountsTheTablesCopyWhereTheRuleTakesIt) {
  const Config cfg = plan_config({"plain", 1, 16, 2, 8, true, false, false, false});
  const int64_t items = 123;  // 7 x 30 tokens x 7 candidates >= 3 x 123 rows
  const ModelShape shape = retrieval_model_shape(cfg, items);
  ASSERT_TRUE(lowp_loss_rows(cfg, shape, DType::kBF16));
  EXPECT_FALSE(lowp_loss_rows(cfg, shape, DType::kF32));
  Config fp32 = cfg;
  fp32.retrieval.loss_rows_dtype = "float32";
  EXPECT_FALSE(lowp_loss_rows(fp32, shape, DType::kBF16));
  const int64_t copy = aligned(items * 16 * 2);
  EXPECT_EQ(retrieval_activation_bytes(cfg, shape, DType::kBF16, true),
            retrieval_activation_bytes(fp32, shape, DType::kBF16, true) + copy);
  EXPECT_EQ(retrieval_activation_bytes(cfg, shape, DType::kBF16, false),
            retrieval_activation_bytes(fp32, shape, DType::kBF16, false) + copy);
  ModelShape big = shape;
  big.num_items = 1000;  // 1470 gathers < 3000 rows: no copy
  EXPECT_FALSE(lowp_loss_rows(cfg, big, DType::kBF16));
  EXPECT_EQ(retrieval_activation_bytes(cfg, big, DType::kBF16, true),
            retrieval_activation_bytes(fp32, big, DType::kBF16, true));

  // The model's arena: the normalised item table follows the copy.
  HstuModel model(cfg, shape, Device::kCPU, DType::kBF16);
  model.plan(3);
  const char* base = static_cast<const char*>(model.batch_tensors().offsets.data);
  Ctx ctx;
  const char* norm = static_cast<const char*>(model.normalized_items(ctx).data);
  EXPECT_EQ(retrieval_activation_bytes(cfg, shape, DType::kBF16, true),
            (norm - base) + aligned(items * 16 * 4) + aligned(items * 4));
}

TEST(RetrievalPlanWindow, CountsInputsTargetsAndNegativesOfOneTrainingStep) {
  Config cfg;
  cfg.dataset.max_history_seqlen = 10;
  cfg.trainer.train_batch_size = 4;
  cfg.trainer.eval_batch_size = 16;  // 160 input ids: fewer than a training step's 200
  cfg.retrieval.num_negatives = 3;
  const ModelMemory m = retrieval_memory(cfg, 1000000, Device::kCUDA, DType::kBF16);
  EXPECT_EQ(m.tables[0].max_unique, 4 * 10 * (2 + 3) + 1);
  EXPECT_EQ(item_window_rows(cfg, 1000000), m.tables[0].max_unique);  // what the trainer sizes
  // An evaluation batch's inputs also pass through the window (evaluator.cpp): 1000 ids.
  cfg.trainer.eval_batch_size = 100;
  EXPECT_EQ(retrieval_memory(cfg, 1000000, Device::kCUDA, DType::kBF16).tables[0].max_unique,
            100 * 10 + 1);
  EXPECT_EQ(item_window_rows(cfg, 1000000), 100 * 10 + 1);
  EXPECT_EQ(item_window_rows(cfg, 500), 500);  // never more than the table's rows
  cfg.trainer.eval_batch_size = 16;
  EXPECT_EQ(m.compute_copy_bytes, m.dense_floats * 2);  // the bf16 copy of the flat buffer
  EXPECT_GT(m.activation_bytes, m.step_activation_bytes);
}

std::string activations_line(const std::string& plan) {
  const size_t at = plan.find("  activations");
  return at == std::string::npos ? "" : plan.substr(at, plan.find('\n', at) - at);
}

struct RankingCase {
  const char* name;
  int64_t actions, contextual;
  bool final_ln;
};

void PrintTo(const RankingCase& c, std::ostream* os) {
  *os << c.name;
}

class RankingPlan : public ::testing::TestWithParam<RankingCase> {};

TEST_P(RankingPlan, EqualsTheModelsPlan) {
  const RankingCase c = GetParam();
  Config cfg;
  cfg.task = "ranking";
  cfg.network.num_layers = 2;
  cfg.network.hidden_size = 128;  // [candidates, D] buffers of 160 KiB: above the 0.1 MiB shown
  cfg.network.num_attention_heads = 2;
  cfg.network.kv_channels = 64;
  cfg.network.final_layernorm = c.final_ln;
  cfg.network.num_position_buckets = 300;
  cfg.dataset.max_history_seqlen = 200;
  cfg.dataset.max_num_candidates = 20;
  cfg.ranking.prediction_head_arch = {512, 8, 1};
  cfg.ranking.num_tasks = 1;
  RankingShape shape;
  shape.num_items = 501;
  shape.num_actions = c.actions;
  for (int64_t i = 0; i < c.contextual; ++i) shape.contextual_cardinalities.push_back(7);
  shape.max_batch = 16;
  shape.max_events = 16 * 220;
  shape.max_candidates = 16 * 20;

  RankingModel model(cfg, shape, Device::kCPU, DType::kF32);
  model.plan(1);
  const ModelMemory m = ranking_memory(cfg, shape, Device::kCPU, DType::kF32);
  EXPECT_EQ(m.dense_floats, model.dense().size());
  EXPECT_EQ(m.dense_tensors, static_cast<int64_t>(model.dense().table().size()));
  EXPECT_EQ(m.max_tokens, model.token_capacity());
  EXPECT_EQ(m.step_activation_bytes, m.activation_bytes);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB",
                static_cast<double>(m.activation_bytes) / (1024.0 * 1024.0));
  EXPECT_EQ(activations_line(model.describe_plan()),
            "  activations       2 layers, " + std::to_string(m.max_tokens) + " tokens / 320 " +
                "candidates max = " + mib);
  ASSERT_EQ(m.tables.size(), 1u + (c.actions > 0) + (c.contextual > 0));
  EXPECT_EQ(m.tables[0].max_unique, 501);  // 16 x 220 + 1 ids > 501 rows
  if (c.contextual > 0) {
    EXPECT_EQ(m.tables.back().rows, 7 * c.contextual);
    EXPECT_EQ(m.tables.back().max_unique,
              std::min<int64_t>(7 * c.contextual, 16 * c.contextual + 1));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RankingPlan,
                         ::testing::Values(RankingCase{"actions", 5, 0, true},
                                           RankingCase{"actions_contextual", 5, 3, true},
                                           RankingCase{"no_final_ln", 5, 2, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// A dynamic item table is planned as its device slots (a power of two of buckets, each a row of
// embedding + Adam state + key and score), the step's window and the evaluation catalogue; a host
// tier keeps only its HBM cache on the device.
TEST(RetrievalPlanDynamic, SlotsWindowAndCatalogue) {
  Config cfg;
  cfg.dataset.max_history_seqlen = 10;
  cfg.trainer.train_batch_size = 4;
  cfg.trainer.eval_batch_size = 4;
  cfg.retrieval.num_negatives = 3;
  cfg.network.hidden_size = 16;
  cfg.optimizer.sparse_optimizer_str = "adam";
  cfg.dynamic.tables = {"item"};
  const int64_t items = 1001;  // 1000 keys + padding
  const PlannedTable t = retrieval_memory(cfg, items, Device::kCUDA, DType::kBF16).tables[0];
  const int64_t window = 4 * 10 * (2 + 3) + 1;
  ASSERT_EQ(t.max_unique, window);
  EXPECT_TRUE(t.shardable);  // sharded by key over data-parallel ranks
  // 1000 keys -> 32 buckets of 32 = 1024 slots; a row: 16 floats + 32 of Adam state, + 24 B of
  // key, score and last-use step; 4 B per bucket;
  // on CUDA the device window: 24 B per window row, the sort's key + index per window row (the
  // catalogue is larger than the window), and with raw ids 8 B per catalogue id more (its key)
  // and, unsharded, the present-key pool: 20 B per id.
  const int64_t dev = window * 24 + window * 8;
  EXPECT_EQ(dynamic_window_bytes(window, items, false), dev);
  EXPECT_EQ(dynamic_window_bytes(window, items, true), dev + items * 8);
  EXPECT_EQ(dynamic_pool_bytes(items - 1), (items - 1) * 20);
  EXPECT_EQ(dynamic_window_bytes(2000, items, false), 2000 * 24 + items * 8);  // flag scan
  EXPECT_EQ(t.dynamic_bytes,
            1024 * (48 * 4 + 24) + 32 * 4 + window * 16 * 8 + items * 16 * 8 + dev);
  EXPECT_EQ(retrieval_memory(cfg, items, Device::kCPU, DType::kF32).tables[0].dynamic_bytes,
            t.dynamic_bytes - dev);
  EXPECT_NE(t.dynamic_formula.find("1024 slots"), std::string::npos) << t.dynamic_formula;
  // On W ranks each holds ceil(1000 / W) keys in whole buckets, as a power of two of buckets;
  // the window and the catalogue stay whole: 2 ranks 512 slots, 4 ranks 256, 3 ranks 352 -> 512.
  const int64_t fixed = window * 16 * 8 + items * 16 * 8 + dev;
  EXPECT_EQ(dynamic_table_bytes(t.dynamic, 1), t.dynamic_bytes);
  EXPECT_EQ(dynamic_table_bytes(t.dynamic, 2), 512 * (48 * 4 + 24) + 16 * 4 + fixed);
  EXPECT_EQ(dynamic_table_bytes(t.dynamic, 3), 512 * (48 * 4 + 24) + 16 * 4 + fixed);
  EXPECT_EQ(dynamic_table_bytes(t.dynamic, 4), 256 * (48 * 4 + 24) + 8 * 4 + fixed);
  {  // raw ids: the catalogue's keys on every rank, the present-key pool on one rank only
    Config raw = cfg;
    raw.dataset.raw_ids = true;
    const PlannedTable r = retrieval_memory(raw, items, Device::kCUDA, DType::kBF16).tables[0];
    EXPECT_EQ(dynamic_table_bytes(r.dynamic, 1), t.dynamic_bytes + items * 8 + (items - 1) * 20);
    EXPECT_EQ(r.dynamic_bytes, dynamic_table_bytes(r.dynamic, 1));
    EXPECT_EQ(dynamic_table_bytes(r.dynamic, 2), dynamic_table_bytes(t.dynamic, 2) + items * 8);
  }
  cfg.dynamic.host_tier = true;
  cfg.dynamic.hbm_ratio = 0.25;  // 256 rows in HBM: 8 buckets
  const PlannedTable h = retrieval_memory(cfg, items, Device::kCUDA, DType::kBF16).tables[0];
  EXPECT_EQ(h.dynamic_bytes, 256 * (48 * 4 + 24) + 8 * 4 + fixed);
  EXPECT_NE(h.dynamic_formula.find("host tier"), std::string::npos) << h.dynamic_formula;
  cfg.dynamic.tables = {};
  EXPECT_EQ(retrieval_memory(cfg, items, Device::kCUDA, DType::kBF16).tables[0].dynamic_bytes, -1);
}

}  // namespace
}  // namespace hstu
