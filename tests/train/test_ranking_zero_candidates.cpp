// test_ranking_zero_candidates.cpp — ranking on a real-format dataset (the KuaiRand fixture) with
// DatasetArgs.max_num_candidates = 0, recsys-examples' "every item scored": their 70/30 user
// split, every kept event of an eval user scored and labelled (the eval candidates are all the
// kept events), training that runs to finite losses, and the classification metrics
// RankingArgs.eval_metrics selects (RECALL, PRECISION, F1Score, AVERAGE PRECISION) in the summary,
// in the baseline's row and in metrics.jsonl.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/data_test_util.h"
#include "common/ranking_test_util.h"
#include "config/config.h"
#include "train/trainer.h"

namespace hstu {
namespace {

bool has(const NamedValues& v, const std::string& name) {
  return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}

TEST(RankingZeroCandidates, KuaiRandFixtureScoresEveryEvent) {
  test::TempDir dir;
  const std::string data = dir.file("kuairand");
  if (!test::write_kuairand_fixture(data, 40))
    GTEST_SKIP() << "python3 is not available to write the fixture";
  Config cfg = test::ranking_config(
      {.num_layers = 1,
       .hidden_size = 16,
       .num_attention_heads = 1,
       .kv_channels = 16,
       .num_position_buckets = 64,
       .head_arch = {16, 8},
       .num_tasks = 8,
       .max_history_seqlen = 24,
       .max_num_candidates = 0},
      {.train_batch_size = 8, .eval_batch_size = 16, .seed = 3, .run_dir = dir.file("run")});
  cfg.dataset.dataset_name = "kuairand-1k";
  cfg.dataset.dataset_path = data;
  cfg.dataset.cache_dir = dir.file("cache");
  cfg.dataset.ranking_split = "user_70_30";
  cfg.dataset.truncate = "oldest";
  cfg.ranking.eval_metrics = {"AUC", "RECALL", "PRECISION", "F1Score", "AVERAGE PRECISION"};
  cfg.trainer.num_epochs = 2;
  cfg.trainer.eval_every_n_epochs = 1;
  cfg.trainer.log_interval = 1;
  TrainOptions opts;
  opts.quiet = true;
  const TrainSummary s = train(cfg, opts);
  ASSERT_FALSE(s.evals.empty());
  EXPECT_GT(s.steps, 0);
  EXPECT_TRUE(std::isfinite(s.last_loss));
  for (const auto& [k, v] : s.final_test) std::printf("  %s = %.4f\n", k.c_str(), v);
  // Every task's AUC plus the four selected metrics, for the model and the baseline alike.
  for (int t = 0; t < 8; ++t)
    for (const char* m : {"AUC", "Accuracy", "LogLoss", "Recall", "Precision", "F1", "AP"}) {
      const std::string name = std::string(m) + "/task" + std::to_string(t);
      EXPECT_TRUE(has(s.final_test, name)) << name;
      EXPECT_TRUE(has(s.baseline, name)) << name;
    }
  // Task 0 (click) has both classes among the eval events: its AUC is defined.
  double auc0 = NAN;
  for (const auto& [k, v] : s.final_test)
    if (k == "AUC/task0") auc0 = v;
  EXPECT_TRUE(std::isfinite(auc0));
  std::ifstream log(cfg.trainer.run_dir + "/metrics.jsonl");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"AP/task0\":"), std::string::npos);
  EXPECT_NE(text.find("\"Recall/task0\":"), std::string::npos);
}

}  // namespace
}  // namespace hstu
