// test_config_bind.cpp — binding gin into a Config through the schema: types, ranges, unknown
// names with suggestions, compatibility warnings, task selection, RandomDistribution scopes,
// cross-field validation, and a recsys-examples ranking config.
//
// Everything goes through load_config_text, the path the CLI takes, so messages are checked
// exactly as a user sees them.
#include <gtest/gtest.h>

#include <set>

#include "common/config_test_util.h"
#include "config/load.h"
#include "config/schema.h"

namespace hstu {
namespace {

using test::error_of;

Config load(const std::string& text, std::vector<std::string>* warnings = nullptr) {
  return load_config_text(text, "t.gin", {}, warnings);
}
std::string load_error(const std::string& text) {
  return error_of([&] { load(text); });
}

TEST(ConfigBind, EveryFieldTypeLands) {
  const Config c = load(
      "TrainerArgs.train_batch_size = 32\n"                         // int
      "OptimizerArgs.learning_rate = 3e-4\n"                        // float
      "OptimizerArgs.weight_decay = 1\n"                            // int where a float is expected
      "DatasetArgs.shuffle = False\n"                               // bool
      "DatasetArgs.dataset_name = \"ml-1m\"\n"                      // string (allowed set)
      "TrainerArgs.run_dir = 'runs/x y'\n"                          // string (free)
      "RetrievalArgs.eval_metrics = ('HR@1', 'NDCG@200', 'MRR')\n"  // string list (tuple)
      "TrainerArgs.max_train_iters = None\n");                      // None = the field's "unset"
  EXPECT_EQ(c.trainer.train_batch_size, 32);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 1.0);
  EXPECT_FALSE(c.dataset.shuffle);
  EXPECT_EQ(c.dataset.dataset_name, "ml-1m");
  EXPECT_EQ(c.trainer.run_dir, "runs/x y");
  EXPECT_EQ(c.retrieval.eval_metrics, (std::vector<std::string>{"HR@1", "NDCG@200", "MRR"}));
  EXPECT_EQ(c.trainer.max_train_iters, 0);
  EXPECT_EQ(c.task, "retrieval");

  const Config r = load(
      "RankingArgs.prediction_head_arch = [256, 128, 4]\n"  // int list
      "RankingArgs.num_tasks = 4\n"
      "gin_config_args.NetworkArgs.num_layers = 5\n");  // a module-qualified selector
  EXPECT_EQ(r.ranking.prediction_head_arch, (std::vector<int64_t>{256, 128, 4}));
  EXPECT_EQ(r.network.num_layers, 5);
  EXPECT_EQ(r.task, "ranking");
}

TEST(ConfigBind, LaterBindingsWin) {
  EXPECT_EQ(load("NetworkArgs.num_layers = 3\nNetworkArgs.num_layers = 6\n").network.num_layers, 6);
}

TEST(ConfigBind, UnknownClassListsKnownClasses) {
  EXPECT_EQ(load_error("NetworkArgs.num_layers = 3\nNetwrkArgs.num_layers = 3\n"),
            "t.gin:2: unknown class 'NetwrkArgs' in NetwrkArgs.num_layers (did you mean "
            "'NetworkArgs'?); known classes: TrainerArgs, DatasetArgs, SyntheticArgs, "
            "RandomDistribution, NetworkArgs, OptimizerArgs, RetrievalArgs, RankingArgs, "
            "DynamicTableArgs");
  EXPECT_EQ(load_error("Model.x = 1\n"),
            "t.gin:1: unknown class 'Model' in Model.x; known classes: TrainerArgs, DatasetArgs, "
            "SyntheticArgs, RandomDistribution, NetworkArgs, OptimizerArgs, RetrievalArgs, "
            "RankingArgs, DynamicTableArgs");
}

TEST(ConfigBind, UnknownFieldSuggestsTheClosest) {
  EXPECT_EQ(load_error("\n\nNetworkArgs.num_layer = 3\n"),
            "t.gin:3: unknown field 'num_layer' of NetworkArgs (did you mean "
            "'NetworkArgs.num_layers'?)");
  EXPECT_EQ(load_error("TrainerArgs.learning_rate = 0.1\n"),
            "t.gin:1: unknown field 'learning_rate' of TrainerArgs (did you mean "
            "'OptimizerArgs.learning_rate'?)");
  EXPECT_EQ(load_error("RankingArgs.zzzzzzzz = 1\n"),
            "t.gin:1: unknown field 'zzzzzzzz' of RankingArgs; fields of RankingArgs: "
            "prediction_head_arch, prediction_head_act_type, prediction_head_bias, num_tasks, "
            "eval_metrics");
}

TEST(ConfigBind, WrongTypes) {
  EXPECT_EQ(load_error("NetworkArgs.num_layers = \"4\"\n"),
            "t.gin:1: NetworkArgs.num_layers expects an int, got a string \"4\"");
  EXPECT_EQ(load_error("NetworkArgs.num_layers = 4.0\n"),
            "t.gin:1: NetworkArgs.num_layers expects an int, got a float 4.0");
  EXPECT_EQ(load_error("DatasetArgs.shuffle = 1\n"),
            "t.gin:1: DatasetArgs.shuffle expects True or False, got an int 1");
  EXPECT_EQ(load_error("OptimizerArgs.learning_rate = '1e-3'\n"),
            "t.gin:1: OptimizerArgs.learning_rate expects a number, got a string \"1e-3\"");
  EXPECT_EQ(load_error("RankingArgs.prediction_head_arch = [512, '8']\n"),
            "t.gin:1: RankingArgs.prediction_head_arch expects a list of ints, got a list "
            "[512, \"8\"]");
  EXPECT_EQ(load_error("RetrievalArgs.eval_metrics = 'HR@10'\n"),
            "t.gin:1: RetrievalArgs.eval_metrics expects a list of strings, got a string "
            "\"HR@10\"");
  EXPECT_EQ(load_error("NetworkArgs.num_layers = None\n"),
            "t.gin:1: NetworkArgs.num_layers expects an int, got None None");
  EXPECT_EQ(load_error("SyntheticArgs.seqlen_dist = 5\n"),
            "t.gin:1: SyntheticArgs.seqlen_dist expects @RandomDistribution() (optionally "
            "@scope/...), got an int 5");
}

TEST(ConfigBind, OutOfRangeAndNotAllowed) {
  EXPECT_EQ(load_error("NetworkArgs.hidden_dropout = 1.0\n"),
            "t.gin:1: NetworkArgs.hidden_dropout = 1.0 is out of range: must be in [0, 1)");
  EXPECT_EQ(load_error("NetworkArgs.kv_channels = 0\n"),
            "t.gin:1: NetworkArgs.kv_channels = 0 is out of range: must be >= 1");
  EXPECT_EQ(load_error("RetrievalArgs.num_negatives = 0\n"),
            "t.gin:1: RetrievalArgs.num_negatives = 0 is out of range: must be -1 or >= 1");
  EXPECT_EQ(load_error("DatasetArgs.split = 'test'\n"),
            "t.gin:1: DatasetArgs.split = \"test\" is not allowed: must be one of paper, "
            "validation");
  EXPECT_EQ(load_error("RetrievalArgs.eval_metrics = ['HR@10', 'HR@0']\n"),
            "t.gin:1: RetrievalArgs.eval_metrics = [\"HR@10\", \"HR@0\"] is not allowed: element "
            "\"HR@0\" must be one of HR@K, NDCG@K, MRR");
  EXPECT_EQ(load_error("RankingArgs.prediction_head_arch = [512, 0]\n"),
            "t.gin:1: RankingArgs.prediction_head_arch = [512, 0] is out of range: element 0 "
            "must be >= 1");
  // -1 (recsys-examples' "one per query of the batch") is a valid retrieval setting.
  EXPECT_EQ(load("RetrievalArgs.num_negatives = -1\n").retrieval.num_negatives, -1);
}

TEST(ConfigBind, CompatibilityFieldsAndClassesAreIgnoredWithWarnings) {
  std::vector<std::string> warnings;
  const Config c = load(
      "NetworkArgs.kernel_backend = 'triton'\n"
      "NetworkArgs.embedding_backend = None\n"
      "TrainerArgs.pipeline_type = 'prefetch'\n"
      "TensorModelParallelArgs.tensor_model_parallel_size = 1\n"
      "feat/RandomDistribution.dist_type = 'zipf'\n",
      &warnings);
  EXPECT_EQ(c, Config{});
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_EQ(warnings[0],
            "t.gin:1: NetworkArgs.kernel_backend is accepted for compatibility with "
            "recsys-examples and ignored (hstu has one attention kernel per device)");
  EXPECT_EQ(warnings[3],
            "t.gin:4: TensorModelParallelArgs.tensor_model_parallel_size is accepted for "
            "compatibility with recsys-examples and ignored (tensor_model_parallel_size = 1 only: "
            "a no-op; larger sizes are errors in hstu files and the TP group's batch in "
            "recsys-examples files)");
  EXPECT_EQ(warnings[4],
            "t.gin:5: feat/RandomDistribution.dist_type is accepted for compatibility with "
            "recsys-examples and ignored (no field refers to it; bind e.g. "
            "SyntheticArgs.seqlen_dist = @feat/RandomDistribution())");
  // Ignored fields with a known value set are still checked.
  EXPECT_EQ(load_error("TrainerArgs.pipeline_type = 'fast'\n"),
            "t.gin:1: TrainerArgs.pipeline_type = \"fast\" is not allowed: must be one of none, "
            "native, prefetch");
  // Keys that would change the run are errors, never ignored: tensor parallelism in an hstu
  // file, recsys-examples' benchmark data.
  EXPECT_EQ(load_error("TensorModelParallelArgs.tensor_model_parallel_size = 2\n"),
            "t.gin:1: TensorModelParallelArgs.tensor_model_parallel_size = 2: hstu has no tensor "
            "parallelism; in a recsys-examples file it stands for the batch of the TP group "
            "(train_batch_size x size), which hstu honours there; in an hstu file set "
            "TrainerArgs.train_batch_size to that batch and remove this key");
  EXPECT_EQ(load_error("FeatureArgs.seqlen_dist = @feat/RandomDistribution()\n"),
            "t.gin:1: FeatureArgs.seqlen_dist: recsys-examples' random benchmark data "
            "(BenchmarkDatasetArgs, FeatureArgs) is read from a recsys-examples file (only their "
            "keys), which trains on it as written; an hstu file names that file instead: "
            "DatasetArgs.dataset_name = \"benchmark\" and DatasetArgs.dataset_path = the file "
            "(hstu's own synthetic ranking data: SyntheticArgs, configs/synthetic-ranking.gin)");
}

TEST(ConfigBind, EveryProblemIsListedWithItsLine) {
  EXPECT_EQ(load_error("NetworkArgs.num_layerz = 2\n"
                       "NetworkArgs.hidden_dropout = 2\n"
                       "Foo.bar = 1\n"),
            "3 problems in the config:\n"
            "  t.gin:1: unknown field 'num_layerz' of NetworkArgs (did you mean "
            "'NetworkArgs.num_layers'?)\n"
            "  t.gin:2: NetworkArgs.hidden_dropout = 2 is out of range: must be in [0, 1)\n"
            "  t.gin:3: unknown class 'Foo' in Foo.bar; known classes: TrainerArgs, DatasetArgs, "
            "SyntheticArgs, RandomDistribution, NetworkArgs, OptimizerArgs, RetrievalArgs, "
            "RankingArgs, DynamicTableArgs");
  // Validation problems too, each located at the binding it names.
  EXPECT_EQ(load_error("RankingArgs.num_tasks = 8\n"
                       "TrainerArgs.profile = True\n"
                       "TrainerArgs.profile_step_end = 10\n"),
            "t.gin: invalid config (2 problems):\n"
            "  t.gin:3: TrainerArgs.profile_step_end (10) must be greater than "
            "TrainerArgs.profile_step_start (100)\n"
            "  t.gin:1: RankingArgs.prediction_head_arch ends with 1 but RankingArgs.num_tasks = "
            "8: with several tasks the head needs one logit per task");
}

TEST(ConfigBind, TaskFollowsTheBoundClass) {
  EXPECT_EQ(load("NetworkArgs.num_layers = 2\n").task, "retrieval");
  EXPECT_EQ(load("RetrievalArgs.temperature = 0.1\n").task, "retrieval");
  EXPECT_EQ(load("RankingArgs.num_tasks = 1\n").task, "ranking");
  EXPECT_EQ(load_error("RankingArgs.num_tasks = 1\nRetrievalArgs.num_negatives = 8\n"),
            "t.gin:1: RankingArgs.num_tasks makes this a ranking config, but t.gin:2: "
            "RetrievalArgs.num_negatives makes it a retrieval config; bind only one of "
            "RankingArgs and RetrievalArgs (or set TrainerArgs.task)");
  // An explicit task wins; binding the other task's class then is an error.
  EXPECT_EQ(load("TrainerArgs.task = 'ranking'\nDatasetArgs.max_num_candidates = 5\n").task,
            "ranking");
  EXPECT_EQ(load_error("TrainerArgs.task = 'ranking'\nRetrievalArgs.num_negatives = 8\n"),
            "t.gin:2: RetrievalArgs.num_negatives does not apply to a ranking config (t.gin:1: "
            "TrainerArgs.task = \"ranking\"); remove it or change the task");
  // Candidates without a ranking class or task: ambiguous, not silently retrieval.
  EXPECT_EQ(load_error("DatasetArgs.max_num_candidates = 20\n"),
            "t.gin:1: the task is ambiguous: DatasetArgs.max_num_candidates = 20 asks for ranking "
            "candidates but nothing binds RankingArgs; set TrainerArgs.task = \"ranking\" (or "
            "bind RankingArgs), or \"retrieval\" with max_num_candidates = 0");
}

TEST(ConfigBind, ScopesOnlyOnRandomDistribution) {
  EXPECT_EQ(load_error("big/NetworkArgs.num_layers = 2\n"),
            "t.gin:1: big/NetworkArgs.num_layers: scopes are only used on RandomDistribution "
            "bindings (hstu reads NetworkArgs unscoped); remove 'big/'");
}

TEST(ConfigBind, RandomDistributionThroughScopes) {
  std::vector<std::string> warnings;
  const Config c = load(
      "seqlen/RandomDistribution.dist_type = 'zipf'\n"
      "seqlen/RandomDistribution.alpha = 1.2\n"
      "RandomDistribution.alpha = 2.0\n"  // unscoped: applies to every scope, scoped wins
      "RandomDistribution.low = 3\n"
      "seqlen/RandomDistribution.high = None\n"
      "other/RandomDistribution.low = 5\n"
      "SyntheticArgs.seqlen_dist = @seqlen/RandomDistribution()\n",
      &warnings);
  const RandomDistribution& d = c.synthetic.seqlen_dist;
  EXPECT_EQ(d.dist_type, "zipf");
  EXPECT_DOUBLE_EQ(d.alpha, 1.2);
  EXPECT_DOUBLE_EQ(d.low, 3);
  EXPECT_DOUBLE_EQ(d.high, -1);
  EXPECT_DOUBLE_EQ(d.mean, RandomDistribution{}.mean);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].substr(0, 48), "t.gin:6: other/RandomDistribution.low is accepte");

  // Without a scope: the class defaults plus the unscoped bindings.
  const Config u = load(
      "SyntheticArgs.seqlen_dist = @RandomDistribution()\n"
      "RandomDistribution.dist_type = 'normal'\n");
  EXPECT_EQ(u.synthetic.seqlen_dist.dist_type, "normal");
  EXPECT_DOUBLE_EQ(u.synthetic.seqlen_dist.high, -1);

  EXPECT_EQ(load_error("SyntheticArgs.seqlen_dist = @Foo()\n"),
            "t.gin:1: SyntheticArgs.seqlen_dist expects @RandomDistribution() (optionally "
            "@scope/...), got a reference @Foo()");
  EXPECT_EQ(load_error("s/RandomDistribution.alpha = 0.5\n"),
            "t.gin:1: s/RandomDistribution.alpha = 0.5 is out of range: must be > 1");
  EXPECT_EQ(load_error("s/RandomDistribution.kind = 'zipf'\n"),
            "t.gin:1: unknown field 'kind' of RandomDistribution; fields of RandomDistribution: "
            "dist_type, low, high, mean, std, alpha");
}

// recsys-examples' kuairand_1k_ranking.gin: its keys, with the values its reference notes give.
TEST(ConfigBind, RecsysExamplesKuaiRand1kRanking) {
  std::vector<std::string> warnings;
  const Config c = load(
      "TrainerArgs.train_batch_size = 8\n"
      "TrainerArgs.eval_batch_size = 8\n"
      "TrainerArgs.eval_interval = 10\n"
      "TrainerArgs.log_interval = 10\n"
      "TrainerArgs.seed = 1234\n"
      "TrainerArgs.max_train_iters = 550\n"
      "\n"
      "DatasetArgs.dataset_name = 'kuairand-1k'\n"
      "DatasetArgs.max_history_seqlen = 4096\n"
      "DatasetArgs.max_num_candidates = 100\n"
      "DatasetArgs.shuffle = False\n"
      "\n"
      "NetworkArgs.dtype_str = \"bfloat16\"\n"
      "NetworkArgs.num_layers = 3\n"
      "NetworkArgs.num_attention_heads = 4\n"
      "NetworkArgs.hidden_size = 512\n"
      "NetworkArgs.kv_channels = 128\n"
      "NetworkArgs.target_group_size = 1\n"
      "NetworkArgs.disable_contextual_mask = True\n"
      "\n"
      "RankingArgs.prediction_head_arch = [\n"
      "    512, 8\n"
      "]\n"
      "RankingArgs.prediction_head_bias = True\n"
      "RankingArgs.num_tasks = 8\n"
      "RankingArgs.eval_metrics = (\"AUC\",)\n"
      "\n"
      "OptimizerArgs.optimizer_str = 'adam'\n"
      "OptimizerArgs.learning_rate = 1e-3\n"
      "OptimizerArgs.adam_beta1 = 0.9\n"
      "OptimizerArgs.adam_beta2 = 0.999\n"
      "OptimizerArgs.adam_eps = 1e-8\n"
      "\n"
      "TensorModelParallelArgs.tensor_model_parallel_size = 1\n",
      &warnings);
  EXPECT_EQ(c.task, "ranking");
  EXPECT_EQ(c.trainer.train_batch_size, 8);
  EXPECT_EQ(c.trainer.eval_batch_size, 8);
  EXPECT_EQ(c.trainer.eval_interval, 10);
  EXPECT_EQ(c.trainer.log_interval, 10);
  EXPECT_EQ(c.trainer.max_train_iters, 550);
  EXPECT_EQ(c.dataset.dataset_name, "kuairand-1k");
  EXPECT_EQ(c.dataset.max_history_seqlen, 4096);
  EXPECT_EQ(c.dataset.max_num_candidates, 100);
  EXPECT_FALSE(c.dataset.shuffle);
  EXPECT_EQ(c.network.num_layers, 3);
  EXPECT_EQ(c.network.num_attention_heads, 4);
  EXPECT_EQ(c.network.hidden_size, 512);
  EXPECT_EQ(c.network.kv_channels, 128);
  EXPECT_TRUE(c.network.disable_contextual_mask);
  EXPECT_EQ(c.ranking.prediction_head_arch, (std::vector<int64_t>{512, 8}));
  EXPECT_EQ(c.ranking.num_tasks, 8);
  EXPECT_EQ(c.ranking.eval_metrics, (std::vector<std::string>{"AUC"}));
  // A recsys-examples file: Megatron's Adam (decoupled weight decay 0.01) for dense parameters,
  // the same optimiser for the tables, its user split and truncation, no checkpoint.
  EXPECT_EQ(c.optimizer.optimizer_str, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_EQ(c.optimizer.sparse_optimizer_str, "adam");
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.adam_eps, 1e-8);
  EXPECT_EQ(c.dataset.ranking_split, "user_70_30");
  EXPECT_EQ(c.dataset.truncate, "oldest");
  EXPECT_EQ(c.trainer.ckpt_save_interval, -1);
  ASSERT_EQ(warnings.size(), 1u);  // tensor_model_parallel_size = 1: a no-op, said so
  EXPECT_EQ(warnings[0].rfind("t.gin:34: TensorModelParallelArgs.tensor_model_parallel_size is "
                              "accepted for compatibility",
                              0),
            0u)
      << warnings[0];
}

TEST(ConfigBind, RecsysExamplesRankingMetricsAreClassificationMetrics) {
  const std::string base =
      "TrainerArgs.train_batch_size = 8\n"
      "TrainerArgs.eval_batch_size = 8\n"
      "DatasetArgs.dataset_name = 'kuairand-1k'\n"
      "DatasetArgs.max_history_seqlen = 16\n"
      "DatasetArgs.max_num_candidates = 4\n"
      "NetworkArgs.num_layers = 1\n"
      "NetworkArgs.num_attention_heads = 2\n"
      "NetworkArgs.hidden_size = 8\n"
      "NetworkArgs.kv_channels = 4\n"
      "RankingArgs.prediction_head_arch = [4, 8]\n"
      "RankingArgs.num_tasks = 8\n"
      "OptimizerArgs.optimizer_str = 'adam'\n"
      "OptimizerArgs.learning_rate = 1e-3\n";
  // AUC, ACC and LogLoss are in the eval table of every task.
  EXPECT_EQ(
      load(base + "RankingArgs.eval_metrics = ('AUC', 'ACC', 'LogLoss')\n").ranking.eval_metrics,
      (std::vector<std::string>{"AUC", "ACC", "LogLoss"}));
  // NDCG: rejected with the reason, naming the line.
  const std::string ndcg = load_error(base + "RankingArgs.eval_metrics = ('AUC', 'NDCG')\n");
  EXPECT_NE(ndcg.find("t.gin:14: RankingArgs.eval_metrics"), std::string::npos) << ndcg;
  EXPECT_NE(ndcg.find("\"NDCG\" is a retrieval metric"), std::string::npos) << ndcg;
  // recsys-examples' other MetricType names (AP spelled as its value, or as hstu's short name).
  EXPECT_EQ(
      load(base + "RankingArgs.eval_metrics = ['RECALL', 'PRECISION', 'F1Score', "
                  "'AVERAGE PRECISION', 'AP']\n")
          .ranking.eval_metrics,
      (std::vector<std::string>{"RECALL", "PRECISION", "F1Score", "AVERAGE PRECISION", "AP"}));
  const std::string typo = load_error(base + "RankingArgs.eval_metrics = ['Recall']\n");
  EXPECT_NE(typo.find("RankingArgs.eval_metrics"), std::string::npos) << typo;
  EXPECT_NE(typo.find("Recall"), std::string::npos) << typo;
}

TEST(ConfigValidate, DefaultsAreValid) {
  EXPECT_NO_THROW(validate(Config{}));
}

TEST(ConfigValidate, FieldRangesAreCheckedOnConfigsBuiltInCode) {
  Config c;
  c.network.kv_channels = 0;
  EXPECT_EQ(error_of([&] { validate(c); }),
            "invalid config: NetworkArgs.kv_channels = 0 is out of range: must be >= 1");
  c = Config{};
  c.synthetic.seqlen_dist.alpha = 1;
  EXPECT_EQ(error_of([&] { validate(c); }),
            "invalid config: SyntheticArgs.seqlen_dist.alpha = 1.0 is out of range: must be > 1");
  c = Config{};
  c.task = "pretraining";
  EXPECT_EQ(error_of([&] { validate(c); }),
            "invalid config: TrainerArgs.task = \"pretraining\" is not allowed: must be one of "
            "retrieval, ranking");
}

TEST(ConfigValidate, CrossFieldRules) {
  EXPECT_EQ(load_error("RankingArgs.num_tasks = 8\n"),
            "t.gin:1: invalid config: RankingArgs.prediction_head_arch ends with 1 but "
            "RankingArgs.num_tasks = 8: with several tasks the head needs one logit per task");
  EXPECT_NO_THROW(load("RankingArgs.prediction_head_arch = [512, 10]\n"));  // 10-class CE
  EXPECT_EQ(
      load_error("RankingArgs.prediction_head_arch = []\n"),
      "t.gin:1: invalid config: RankingArgs.prediction_head_arch must have at least one layer");
  EXPECT_EQ(load_error("TrainerArgs.task = 'retrieval'\nDatasetArgs.max_num_candidates = 20\n"),
            "t.gin:2: invalid config: DatasetArgs.max_num_candidates = 20 but retrieval has no "
            "candidates (set it to 0 or bind RankingArgs)");
  EXPECT_EQ(
      load_error("NetworkArgs.item_embedding_dim = 32\n"),
      "t.gin:1: invalid config: NetworkArgs.item_embedding_dim (32) must be -1 or hidden_size "
      "(64) for retrieval: item embeddings are scored against the outputs");
  EXPECT_EQ(load_error("RetrievalArgs.eval_metrics = ['HR@3000']\n"),
            "t.gin:1: invalid config: RetrievalArgs.eval_metrics: HR@3000 needs K <= "
            "RetrievalArgs.eval_rank_cap (2500)");
  EXPECT_EQ(load_error("TrainerArgs.select_best_on = 'validation'\n"),
            "t.gin:1: invalid config: TrainerArgs.select_best_on = \"validation\" needs "
            "DatasetArgs.split = \"validation\" (the paper split has no validation items)");
  EXPECT_NO_THROW(
      load("TrainerArgs.select_best_on = 'validation'\n"
           "DatasetArgs.split = 'validation'\n"));
  EXPECT_EQ(load_error("SyntheticArgs.min_seqlen = 300\n"),
            "t.gin:1: invalid config: SyntheticArgs.min_seqlen (300) must not exceed max_seqlen "
            "(200)");
  EXPECT_EQ(load_error("SyntheticArgs.num_clusters = 2\n"),
            "t.gin: invalid config: SyntheticArgs.clusters_per_user (3) must not exceed "
            "num_clusters (2)");
  EXPECT_EQ(load_error("SyntheticArgs.num_items = 10\n"),
            "t.gin: invalid config: SyntheticArgs.num_clusters (20) must not exceed num_items "
            "(10)");
  EXPECT_EQ(load_error("SyntheticArgs.seqlen_dist = @d/RandomDistribution()\n"
                       "d/RandomDistribution.low = 5\nd/RandomDistribution.high = 5\n"),
            "t.gin:1: invalid config: SyntheticArgs.seqlen_dist: high (5) must be greater than low "
            "(5) or -1");
  EXPECT_EQ(load_error("TrainerArgs.profile = True\nTrainerArgs.profile_step_end = 10\n"),
            "t.gin:2: invalid config: TrainerArgs.profile_step_end (10) must be greater than "
            "TrainerArgs.profile_step_start (100)");
  EXPECT_EQ(load_error("TrainerArgs.run_dir = ''\n"),
            "t.gin:1: invalid config: TrainerArgs.run_dir must not be empty");
}

// Counts the members of aggregate T (for checking that the schema covers config.h).
struct AnyField {
  template <typename T>
  operator T() const;
};
template <typename T, typename... Fields>
constexpr size_t member_count() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return member_count<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

size_t stored_rows(const std::string& cls) {
  size_t n = 0;
  for (const FieldSpec& f : config_fields()) n += f.cls == cls && f.get ? 1 : 0;
  return n;
}

// Adding a member to config.h without a schema row fails here.
TEST(ConfigSchema, CoversEveryMemberOfConfigH) {
  EXPECT_EQ(member_count<TrainerArgs>() + 1, stored_rows("TrainerArgs"));  // + task (Config::task)
  EXPECT_EQ(member_count<DatasetArgs>(), stored_rows("DatasetArgs"));
  EXPECT_EQ(member_count<SyntheticArgs>(), stored_rows("SyntheticArgs"));
  EXPECT_EQ(member_count<RandomDistribution>(), stored_rows("RandomDistribution"));
  // + NetworkArgs::kernel_backend, which is accepted for compatibility and never set.
  EXPECT_EQ(member_count<NetworkArgs>(), stored_rows("NetworkArgs") + 1);
  EXPECT_EQ(member_count<OptimizerArgs>(), stored_rows("OptimizerArgs"));
  EXPECT_EQ(member_count<RetrievalArgs>(), stored_rows("RetrievalArgs"));
  EXPECT_EQ(member_count<RankingArgs>(), stored_rows("RankingArgs"));
  EXPECT_EQ(member_count<DynamicTableArgs>(), stored_rows("DynamicTableArgs"));
  EXPECT_EQ(member_count<Config>(), 9u);  // eight sections + task
}

TEST(ConfigSchema, RowsAreDistinctAndDocumented) {
  Config c;
  std::set<std::pair<const void*, size_t>> seen;  // a struct shares its first member's address
  std::set<std::string> keys;
  for (const FieldSpec& f : config_fields()) {
    EXPECT_TRUE(keys.insert(f.cls + "." + f.name).second) << f.cls << "." << f.name;
    EXPECT_FALSE(f.doc.empty()) << f.name;
    if (!f.get) continue;
    const FieldRef ref = f.get(c);
    const void* p = std::visit([](auto* q) -> const void* { return q; }, ref);
    EXPECT_TRUE(seen.insert({p, ref.index()}).second) << f.cls << "." << f.name;
  }
}

}  // namespace
}  // namespace hstu
