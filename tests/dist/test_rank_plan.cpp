// test_rank_plan.cpp — the per-rank plans of W ranks (dist/rank_plan.h):
//   - W = 1 is the single-process plan: its dense, table and activation lines are the real
//     models' describe_plan lines (HstuModel and RankingModel planned on the CPU);
//   - a sharded table's shard rows over the ranks sum to its rows (modulo and hash), each rank's
//     total is the replicated part plus its own shard and window, and the totals fall with W
//     when the window is small next to the table;
//   - the traffic: the ring all-reduce sends 2 (W-1)/W of the dense gradients (plus a replicated
//     table's gradient and flags), the all-to-all (W-1)/W of the window's ids and twice its rows;
//   - a replicated item table keeps the evaluation buffers in the activations, a sharded one
//     drops them.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/rank_plan.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/ranking_model.h"

namespace hstu::dist {
namespace {

Config retrieval_config() {
  Config cfg;
  cfg.network.num_layers = 2;
  cfg.network.hidden_size = 64;
  cfg.network.num_attention_heads = 2;
  cfg.network.kv_channels = 32;
  cfg.network.num_position_buckets = 64;
  cfg.dataset.max_history_seqlen = 50;
  cfg.trainer.train_batch_size = 8;
  cfg.trainer.eval_batch_size = 8;
  cfg.retrieval.num_negatives = 4;
  return cfg;
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

TEST(RankPlan, OneRankPrintsTheRetrievalModelsPlan) {
  const Config cfg = retrieval_config();
  const int64_t items = 5001;
  HstuModel model(cfg, retrieval_model_shape(cfg, items), Device::kCPU, DType::kF32);
  model.plan(1);
  const std::string real = model.describe_plan();
  const RankPlan p = plan_ranks(retrieval_memory(cfg, items, Device::kCPU, DType::kF32), 1,
                                {"item"}, OwnerKind::kModulo, cfg.optimizer.sparse_optimizer_str);
  const std::string mine = describe_rank_plan(p);
  for (const char* prefix :
       {"memory plan", "  dense parameters", "  item embedding", "  activations"}) {
    ASSERT_EQ(lines(real, prefix).size(), 1u) << prefix;
    EXPECT_EQ(lines(mine, prefix), lines(real, prefix)) << prefix;
  }
  ASSERT_EQ(p.rank_bytes.size(), 1u);
  EXPECT_EQ(p.rank_bytes[0], p.single_rank_bytes);
  EXPECT_EQ(p.all_reduce_bytes, 0);
  EXPECT_EQ(p.all_to_all_bytes, 0);
  EXPECT_TRUE(p.tables[0].shards.empty());
}

TEST(RankPlan, OneRankPrintsTheRankingModelsPlan) {
  Config cfg = retrieval_config();
  cfg.task = "ranking";
  cfg.dataset.max_num_candidates = 10;
  cfg.ranking.prediction_head_arch = {32, 1};
  cfg.ranking.num_tasks = 1;
  RankingShape shape;
  shape.num_items = 3001;
  shape.num_actions = 4;
  shape.contextual_cardinalities = {5, 9};
  shape.max_batch = 8;
  shape.max_events = 8 * 60;
  shape.max_candidates = 8 * 10;
  RankingModel model(cfg, shape, Device::kCPU, DType::kF32);
  model.plan(1);
  const std::string real = model.describe_plan();
  const ModelMemory m = ranking_memory(cfg, shape, Device::kCPU, DType::kF32);
  const std::string mine =
      describe_rank_plan(plan_ranks(m, 1, {"item", "contextual"}, OwnerKind::kHash, "adam"));
  for (const char* prefix :
       {"memory plan", "  dense parameters", "  embedding tables", "  activations"}) {
    ASSERT_EQ(lines(real, prefix).size(), 1u) << prefix;
    EXPECT_EQ(lines(mine, prefix), lines(real, prefix)) << prefix;
  }
  // On 4 ranks the item table is sharded; ranking keeps the action and contextual tables
  // replicated even when model_parallel_tables names them (ranking_task.cpp), and the plan says
  // what the trainer does.
  const RankPlan p4 = plan_ranks(m, 4, {"item", "contextual"}, OwnerKind::kHash, "adam");
  ASSERT_EQ(p4.tables.size(), 3u);
  EXPECT_TRUE(p4.tables[0].sharded);
  EXPECT_FALSE(p4.tables[1].sharded);
  EXPECT_FALSE(p4.tables[2].sharded);
  EXPECT_EQ(p4.tables[0].table.max_unique, 8 * 60 + 1);  // a batch's events + the padding id
  EXPECT_EQ(p4.gradient_bytes, m.dense_floats * 4 + (4 * 64 * 4 + 4) + (14 * 64 * 4 + 14));
  EXPECT_EQ(lines(describe_rank_plan(p4), "  action embedding").size(), 1u);
}

TEST(RankPlan, ShardsSumToTheTableAndTotalsFallWithTheWorld) {
  const Config cfg = retrieval_config();  // window 8 x 50 x 6 + 1 = 2401 rows of 1,000,000
  const int64_t items = 1000000;
  const ModelMemory m = retrieval_memory(cfg, items, Device::kCUDA, DType::kBF16);
  ASSERT_EQ(m.tables[0].max_unique, 2401);
  for (const OwnerKind owner : {OwnerKind::kModulo, OwnerKind::kHash}) {
    int64_t last = plan_ranks(m, 1, {"item"}, owner, "adam").rank_bytes[0];
    for (const int w : {2, 4, 8}) {
      const RankPlan p = plan_ranks(m, w, {"item"}, owner, "adam");
      ASSERT_EQ(p.tables.size(), 1u);
      const TablePlacement& t = p.tables[0];
      ASSERT_TRUE(t.sharded);
      ASSERT_EQ(t.shards.size(), static_cast<size_t>(w));
      int64_t rows = 0;
      for (const ShardSize& z : t.shards) {
        rows += z.rows;
        const int64_t expected = m.dense_bytes + m.compute_copy_bytes + m.step_activation_bytes +
                                 embedding_table_bytes(z.rows, 64, "adam") +
                                 window_bytes(2401, 64, w, z.rows);
        EXPECT_EQ(p.rank_bytes[static_cast<size_t>(z.rank)], expected) << w << " " << z.rank;
      }
      EXPECT_EQ(rows, items) << w;
      EXPECT_EQ(p.activation_bytes, m.step_activation_bytes);  // no evaluation buffers
      const int64_t most = *std::max_element(p.rank_bytes.begin(), p.rank_bytes.end());
      EXPECT_LT(most, last) << w;
      last = most;
      EXPECT_EQ(p.single_rank_bytes, plan_ranks(m, 1, {"item"}, owner, "adam").rank_bytes[0]);
      // Traffic: ring all-reduce of the dense gradients; ids and twice the rows of the window.
      EXPECT_EQ(p.gradient_bytes, m.dense_floats * 4);
      EXPECT_EQ(p.all_reduce_bytes,
                2 * (m.dense_floats * 4 / w * (w - 1) + m.dense_floats * 4 % w * (w - 1) / w));
      const int64_t ids = 2401 * 4, rows_b = 2401 * 4 * 64;
      EXPECT_EQ(p.all_to_all_bytes, ids / w * (w - 1) + ids % w * (w - 1) / w +
                                        2 * (rows_b / w * (w - 1) + rows_b % w * (w - 1) / w));
    }
  }
}

TEST(RankPlan, ReplicatedItemTableKeepsItsEvaluationBuffersAndJoinsTheAllReduce) {
  const Config cfg = retrieval_config();
  const ModelMemory m = retrieval_memory(cfg, 20001, Device::kCPU, DType::kF32);
  const RankPlan p = plan_ranks(m, 4, {}, OwnerKind::kModulo, "row_wise_adagrad");
  EXPECT_FALSE(p.tables[0].sharded);
  EXPECT_EQ(p.activation_bytes, m.activation_bytes);
  EXPECT_EQ(p.gradient_bytes, m.dense_floats * 4 + 20001 * 64 * 4 + 20001);
  EXPECT_EQ(p.all_to_all_bytes, 0);
  for (const int64_t b : p.rank_bytes) EXPECT_EQ(b, p.single_rank_bytes);
}

// TrainerArgs.table_budget_mb: an item table larger than one rank's budget fits once sharded over
// enough ranks; the error names each table of the worst rank and the key.
TEST(RankPlan, TableBudgetIsMetBySharding) {
  const Config cfg = retrieval_config();
  const ModelMemory m = retrieval_memory(cfg, 1000000, Device::kCUDA, DType::kBF16);
  const int64_t whole = embedding_table_bytes(m.tables[0].rows, 64, "adam");  // + grad, m, v
  const int64_t budget = whole / 3;
  const RankPlan one = plan_ranks(m, 1, {"item"}, OwnerKind::kModulo, "adam", budget);
  ASSERT_EQ(one.rank_table_bytes.size(), 1u);
  EXPECT_EQ(one.rank_table_bytes[0], whole);
  const std::string e1 = table_budget_error(one);
  EXPECT_NE(e1.find("TrainerArgs.table_budget_mb"), std::string::npos) << e1;
  EXPECT_NE(e1.find("'item' replicated"), std::string::npos) << e1;
  EXPECT_NE(describe_rank_plan(one).find("EXCEEDS the budget"), std::string::npos);
  // Two ranks: each shard is half the table, still above a third.
  EXPECT_NE(table_budget_error(plan_ranks(m, 2, {"item"}, OwnerKind::kModulo, "adam", budget)), "");
  // Four ranks: a quarter of the table + the window fits.
  const RankPlan four = plan_ranks(m, 4, {"item"}, OwnerKind::kModulo, "adam", budget);
  EXPECT_EQ(table_budget_error(four), "");
  const std::string d = describe_rank_plan(four);
  EXPECT_NE(d.find(": fits"), std::string::npos) << d;
  EXPECT_NE(d.find(" the budget: sharded over the ranks"), std::string::npos) << d;
  // Not sharded (model_parallel_tables empty): four ranks do not help.
  EXPECT_NE(table_budget_error(plan_ranks(m, 4, {}, OwnerKind::kModulo, "adam", budget)), "");
  // No budget: never an error.
  EXPECT_EQ(table_budget_error(plan_ranks(m, 1, {"item"}, OwnerKind::kModulo, "adam")), "");
}

// A dynamic item table sharded by key: every rank holds its share of the slots (printed), the
// budget check and the per-rank totals count that share, not the whole table.
TEST(RankPlan, DynamicItemTableIsSplitByKey) {
  Config cfg = retrieval_config();
  cfg.optimizer.sparse_optimizer_str = "adam";
  cfg.dynamic.tables = {"item"};
  const ModelMemory m = retrieval_memory(cfg, 100001, Device::kCUDA, DType::kBF16);
  ASSERT_GE(m.tables[0].dynamic_bytes, 0);
  const RankPlan one = plan_ranks(m, 1, {"item"}, OwnerKind::kModulo, "adam");
  const RankPlan four = plan_ranks(m, 4, {"item"}, OwnerKind::kHash, "adam");
  ASSERT_TRUE(four.tables[0].sharded);
  EXPECT_EQ(four.tables[0].dynamic_rank_bytes, dynamic_table_bytes(m.tables[0].dynamic, 4));
  EXPECT_LT(four.tables[0].dynamic_rank_bytes, m.tables[0].dynamic_bytes);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(placed_bytes(four.tables[0], r), four.tables[0].dynamic_rank_bytes);
    EXPECT_EQ(four.rank_table_bytes[static_cast<size_t>(r)], four.tables[0].dynamic_rank_bytes);
  }
  EXPECT_EQ(one.rank_table_bytes[0], m.tables[0].dynamic_bytes);
  const std::string d = describe_rank_plan(four);
  EXPECT_NE(d.find("sharded by key over 4 ranks"), std::string::npos) << d;
  // A budget between one rank's share and the whole table: met on 4 ranks, not on 1.
  const int64_t budget = (four.tables[0].dynamic_rank_bytes + m.tables[0].dynamic_bytes) / 2;
  EXPECT_NE(table_budget_error(plan_ranks(m, 1, {"item"}, OwnerKind::kModulo, "adam", budget)), "");
  EXPECT_EQ(table_budget_error(plan_ranks(m, 4, {"item"}, OwnerKind::kHash, "adam", budget)), "");
}

}  // namespace
}  // namespace hstu::dist
