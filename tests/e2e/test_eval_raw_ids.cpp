// test_eval_raw_ids.cpp — `hstu eval` of a raw-id run whose dynamic item table is smaller than
// the catalogue: it ranks each target against the items whose keys the checkpoint's table holds,
// as the run's own evaluations do (train/retrieval_task.cpp), so evaluating the run's final
// checkpoint reproduces the run's last evaluation exactly; ranking the whole catalogue instead
// (absent keys at their initial value) would change the metrics.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "common/io_test_util.h"
#include "common/test_util.h"
#include "common/tiny_gin.h"
#include "io/json.h"

namespace hstu {
namespace {

TEST(EvalRawIds, CheckpointEvalEqualsTheRunsLastEvaluation) {
  const char* bin = std::getenv("HSTU_BIN");
  if (!bin || !std::filesystem::exists(bin)) GTEST_SKIP() << "HSTU_BIN not built";
  test::TempDir dir;
  const std::string run = dir.file("run");
  test::write_file(dir.file("raw.gin"),
                   test::raw_id_dynamic_gin(300, 4, 8, R"(TrainerArgs.eval_batch_size = 8
TrainerArgs.max_train_iters = 6
TrainerArgs.eval_interval = 6
TrainerArgs.ckpt_save_interval = 6
RetrievalArgs.eval_rank_cap = 250
DynamicTableArgs.capacity_ratio = 0.5
)"));
  const std::string hstu = bin;
  ASSERT_TRUE(test::run_command_ok(hstu + " train " + dir.file("raw.gin") + " --run-dir " + run +
                                   " --quiet"));
  ASSERT_TRUE(test::run_command_ok(hstu + " eval " + run + " --json " + dir.file("eval.json")));
  Json last, table;
  std::istringstream lines(test::read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const Json r = json::parse(line, "metrics.jsonl");
    if (r.value("event", "") == "eval") last = r;
    if (r.value("event", "") == "item_table") table = r;
  }
  ASSERT_TRUE(last.contains("test")) << "no evaluation in metrics.jsonl";
  // The table held fewer keys than the catalogue's 300 items, so the subset mattered.
  ASSERT_TRUE(table.contains("eval_catalogue"));
  EXPECT_LT(json::int_at(table, "eval_catalogue"), 300);
  const Json ours = json::at(json::parse_file(dir.file("eval.json")), "test");
  for (const char* m : {"HR@10", "NDCG@10", "MRR"})
    EXPECT_EQ(json::double_at(ours, m), json::double_at(json::at(last, "test"), m)) << m;
}

}  // namespace
}  // namespace hstu
