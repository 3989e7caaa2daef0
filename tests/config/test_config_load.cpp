// test_config_load.cpp — loading files, `--set` overrides (values and errors), and the round
// trip Config -> to_gin -> parse -> identical Config.
//
// The round trip is checked on configs that differ from the defaults in every class, so a row
// that to_gin forgot or wrote in a form the parser reads differently shows up as a mismatch.
#include <gtest/gtest.h>

#include "common/config_test_util.h"
#include "config/load.h"
#include "config/schema.h"

namespace hstu {
namespace {

using test::error_of;

TEST(ConfigLoad, FileWithIncludeAndErrorsNamingTheFile) {
  test::TempDir dir;
  dir.write("base.gin", "NetworkArgs.num_layers = 3\nNetworkArgs.hidden_size = 128\n");
  const std::string path = dir.write("run.gin", "include 'base.gin'\nNetworkArgs.num_layers = 4\n");
  std::vector<std::string> warnings;
  const Config c = load_config(path, {}, &warnings);
  EXPECT_EQ(c.network.num_layers, 4);
  EXPECT_EQ(c.network.hidden_size, 128);
  EXPECT_TRUE(warnings.empty());

  const std::string bad = dir.write("bad.gin",
                                    "# ok\nNetworkArgs.num_layers = 3\n"
                                    "NetworkArgs.hidden_dropout = 2\n");
  EXPECT_EQ(error_of([&] { load_config(bad, {}, nullptr); }),
            bad + ":3: NetworkArgs.hidden_dropout = 2 is out of range: must be in [0, 1)");
  const std::string syntax = dir.write("syntax.gin", "NetworkArgs.num_layers = [3\n");
  EXPECT_EQ(error_of([&] { load_config(syntax, {}, nullptr); }),
            syntax +
                ":2:1: syntax error: expected ',' or ']' to continue the '[' opened at 1:26, "
                "found the end of the file");
  const std::string cross = dir.write("cross.gin", "RankingArgs.num_tasks = 3\n");
  EXPECT_EQ(error_of([&] { load_config(cross, {}, nullptr); }),
            cross +
                ":1: invalid config: RankingArgs.prediction_head_arch ends with 1 but "
                "RankingArgs.num_tasks = 3: with several tasks the head needs one logit per "
                "task");
}

TEST(ConfigLoad, MissingFile) {
  EXPECT_EQ(error_of([] { load_config("configs/does-not-exist.gin", {}, nullptr); }),
            "config file 'configs/does-not-exist.gin' does not exist");
}

TEST(ConfigOverride, ValuesInGinSyntaxAndBareWords) {
  const Config c =
      load_config_text("NetworkArgs.num_layers = 2\nDatasetArgs.dataset_name = 'ml-20m'\n", "t.gin",
                       {"NetworkArgs.num_layers=4", "OptimizerArgs.learning_rate = 5e-4",
                        "DatasetArgs.dataset_name=\"ml-1m\"", "TrainerArgs.run_dir=runs/exp 1",
                        "RetrievalArgs.eval_metrics=HR@10, NDCG@10",
                        "DatasetArgs.dataset_path=", "TrainerArgs.ckpt_load_dir=123"},
                       nullptr);
  EXPECT_EQ(c.network.num_layers, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 5e-4);
  EXPECT_EQ(c.dataset.dataset_name, "ml-1m");
  EXPECT_EQ(c.trainer.run_dir, "runs/exp 1");
  EXPECT_EQ(c.retrieval.eval_metrics, (std::vector<std::string>{"HR@10", "NDCG@10"}));
  EXPECT_EQ(c.dataset.dataset_path, "");
  EXPECT_EQ(c.trainer.ckpt_load_dir, "123");
  EXPECT_EQ(load_config_text("", "t.gin", {"DatasetArgs.dataset_name=ml-1m"}, nullptr)
                .dataset.dataset_name,
            "ml-1m");
  EXPECT_EQ(load_config_text("", "t.gin", {"RetrievalArgs.eval_metrics=['MRR']"}, nullptr)
                .retrieval.eval_metrics,
            (std::vector<std::string>{"MRR"}));
}

TEST(ConfigOverride, JoinTheFileBindings) {
  const Config r = load_config_text(
      "", "t.gin", {"RankingArgs.num_tasks=8", "RankingArgs.prediction_head_arch=[512, 8]"},
      nullptr);
  EXPECT_EQ(r.task, "ranking");
  EXPECT_EQ(r.ranking.prediction_head_arch, (std::vector<int64_t>{512, 8}));
  const Config d = load_config_text(
      "SyntheticArgs.seqlen_dist = @len/RandomDistribution()\n"
      "len/RandomDistribution.dist_type = 'zipf'\n",
      "t.gin", {"len/RandomDistribution.alpha=3"}, nullptr);
  EXPECT_EQ(d.synthetic.seqlen_dist.dist_type, "zipf");
  EXPECT_DOUBLE_EQ(d.synthetic.seqlen_dist.alpha, 3.0);
  EXPECT_EQ(error_of([] {
              load_config_text("RetrievalArgs.num_negatives = 8\n", "t.gin",
                               {"RankingArgs.num_tasks=1"}, nullptr);
            }),
            "--set RankingArgs.num_tasks=1: RankingArgs.num_tasks makes this a ranking config, "
            "but t.gin:1: RetrievalArgs.num_negatives makes it a retrieval config; bind only one "
            "of RankingArgs and RetrievalArgs (or set TrainerArgs.task)");
}

TEST(ConfigOverride, Errors) {
  auto err = [](const std::string& o) {
    return error_of([&] { load_config_text("", "t.gin", {o}, nullptr); });
  };
  EXPECT_EQ(err("NetworkArgs.num_layers"),
            "--set NetworkArgs.num_layers: expected Class.field=value (e.g. --set "
            "NetworkArgs.num_layers=4)");
  EXPECT_EQ(err("num_layers=4"),
            "--set num_layers=4: expected Class.field=value (e.g. --set NetworkArgs.num_layers=4)");
  EXPECT_EQ(err("NetworkArgs.num_layers=four"),
            "--set NetworkArgs.num_layers=four (column 1): syntax error: expected a value "
            "(strings need quotes; True/False/None are capitalised), found 'four'");
  EXPECT_EQ(err("NetworkArgs.num_layers=2.5"),
            "--set NetworkArgs.num_layers=2.5: NetworkArgs.num_layers expects an int, got a float "
            "2.5");
  EXPECT_EQ(err("NetworkArgs.num_layer=4"),
            "--set NetworkArgs.num_layer=4: unknown field 'num_layer' of NetworkArgs (did you "
            "mean 'NetworkArgs.num_layers'?)");
  EXPECT_EQ(err("NetworkArgs.hidden_dropout=1.5"),
            "--set NetworkArgs.hidden_dropout=1.5: NetworkArgs.hidden_dropout = 1.5 is out of "
            "range: must be in [0, 1)");
  EXPECT_EQ(err("DatasetArgs.split=test"),
            "--set DatasetArgs.split=test: DatasetArgs.split = \"test\" is not allowed: must be "
            "one of paper, validation");
}

TEST(ConfigOverride, ApplyToAFinishedConfig) {
  Config c;
  std::vector<std::string> warnings;
  apply_override(c, "NetworkArgs.num_layers=6", &warnings);
  apply_override(c, "NetworkArgs.kernel_backend=triton", &warnings);
  EXPECT_EQ(c.network.num_layers, 6);
  EXPECT_EQ(c.network.kernel_backend, "cutlass");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "--set NetworkArgs.kernel_backend=triton: NetworkArgs.kernel_backend is accepted for "
            "compatibility with recsys-examples and ignored (hstu has one attention kernel per "
            "device)");
  EXPECT_EQ(error_of([&] { apply_override(c, "RankingArgs.num_tasks=2"); }),
            "--set RankingArgs.num_tasks=2: RankingArgs.num_tasks does not apply to this "
            "retrieval config (RankingArgs configures ranking runs)");
}

void expect_round_trip(const Config& c) {
  const std::string text = to_gin(c);
  std::vector<std::string> warnings;
  const Config again = load_config_text(text, "effective.gin", {}, &warnings);
  EXPECT_EQ(again, c) << text;
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(to_gin(again), text);
}

TEST(ConfigToGin, RoundTripsDefaults) {
  expect_round_trip(Config{});
}

TEST(ConfigToGin, RoundTripsARetrievalConfigChangedEverywhere) {
  const Config c = load_config_text(
      "TrainerArgs.run_dir = 'runs/\"quoted\" \\\\ dir\\n'\n"
      "TrainerArgs.max_train_iters = 1000\n"
      "TrainerArgs.device = 'cpu'\n"
      "DatasetArgs.dataset_name = 'ml-1m'\n"
      "DatasetArgs.split = 'validation'\n"
      "SyntheticArgs.cluster_stickiness = 0.1\n"
      "SyntheticArgs.seqlen_dist = @x/RandomDistribution()\n"
      "x/RandomDistribution.dist_type = 'zipf'\n"
      "x/RandomDistribution.alpha = 1.0000000000000002\n"
      "NetworkArgs.hidden_size = 50\n"
      "NetworkArgs.norm_epsilon = 1e-6\n"
      "NetworkArgs.attention_alpha = 0.3333333333333333\n"
      "NetworkArgs.relative_attention_bias = True\n"
      "OptimizerArgs.learning_rate = 0.001\n"
      "OptimizerArgs.adam_beta2 = 0.98\n"
      "OptimizerArgs.lr_schedule = 'warmup_cosine'\n"
      "RetrievalArgs.eval_metrics = ['HR@1', 'HR@10', 'NDCG@200', 'MRR']\n"
      "RetrievalArgs.num_negatives = 7\n",
      "t.gin", {}, nullptr);
  expect_round_trip(c);
}

TEST(ConfigToGin, RoundTripsARankingConfig) {
  const Config c = load_config_text(
      "DatasetArgs.dataset_name = 'kuairand-1k'\n"
      "DatasetArgs.max_num_candidates = 100\n"
      "RankingArgs.prediction_head_arch = [512, 256, 8]\n"
      "RankingArgs.num_tasks = 8\n"
      "RankingArgs.eval_metrics = ['AUC', 'LogLoss']\n"
      "RankingArgs.prediction_head_act_type = 'gelu'\n",
      "t.gin", {}, nullptr);
  const std::string text = to_gin(c);
  EXPECT_NE(text.find("RankingArgs.num_tasks = 8"), std::string::npos);
  EXPECT_NE(text.find("# RetrievalArgs: not bound"), std::string::npos);
  EXPECT_NE(text.find("SyntheticArgs.seqlen_dist = @seqlen_dist/RandomDistribution()"),
            std::string::npos);
  expect_round_trip(c);
}

}  // namespace
}  // namespace hstu
