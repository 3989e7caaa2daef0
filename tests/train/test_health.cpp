// test_health.cpp — the training loop's numerical health, resume safety and memory-plan limits:
//   - an absurd learning rate stops a run (TrainerArgs.nonfinite = "error") with an error naming
//     the step and the first parameter group, and writes no checkpoint;
//   - "skip_step" applies nothing for a non-finite step: 10 steps of which 9 are non-finite give
//     the weights of the 1 finite step bit for bit, finite, with skipped_steps = 9;
//   - the dense gradient norm is in every "train" record of metrics.jsonl (finite, > 0);
//   - a resume with another seed or batch fails listing the keys, passes with
//     allow_config_change; free keys (max_train_iters, log_interval) change freely;
//   - parse_trainer_state names the damaged field (type and range) of trainer_state.json;
//   - the memory plan check names the fields of the largest part; MemAvailable is read from a
//     meminfo file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "config/load.h"
#include "config/schema.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/memory_plan.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/resume_check.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace hstu {
namespace {

Config tiny(const std::string& run_dir, double lr = 1e-3) {
  const std::string gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 20
SyntheticArgs.num_users = 200
SyntheticArgs.num_items = 100
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 20
NetworkArgs.num_layers = 1
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 1
NetworkArgs.kv_channels = 16
NetworkArgs.num_position_buckets = 32
TrainerArgs.train_batch_size = 32
TrainerArgs.eval_batch_size = 64
TrainerArgs.eval_interval = 1000
TrainerArgs.max_eval_iters = 1
TrainerArgs.log_interval = 2
TrainerArgs.device = "cpu"
RetrievalArgs.num_negatives = 8
)";
  Config c = load_config_text(gin, "<health>", {"TrainerArgs.run_dir=" + run_dir}, nullptr);
  c.optimizer.learning_rate = lr;
  return c;
}

TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

std::string error_of(const Config& cfg, const TrainOptions& opts) {
  try {
    train(cfg, opts);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::map<std::string, std::string> weights(const std::string& ckpt) {
  SafetensorsFile f(checkpoint_model_path(find_checkpoint(ckpt)));
  std::map<std::string, std::string> out;
  for (const auto& n : f.names()) {
    const auto& e = f.get(n);
    out[n] = std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  return out;
}

std::vector<Json> records(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(NumericalHealth, AbsurdLearningRateStopsNamingStepAndGroup) {
  test::TempDir dir;
  Config cfg = tiny(dir.file("run"), 1e30);
  cfg.trainer.max_train_iters = 10;
  const std::string err = error_of(cfg, quiet());
  EXPECT_NE(err.find("step 2: the training loss is"), std::string::npos) << err;
  EXPECT_NE(err.find("First parameter group with non-finite values after that step's update: "
                     "dense parameter '"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("TrainerArgs.nonfinite = \"skip_step\""), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(cfg.trainer.run_dir + "/checkpoints/latest"));
}

TEST(NumericalHealth, ErrorKeepsTheLastGoodCheckpointAndSaysHowToResume) {
  test::TempDir dir;
  Config cfg = tiny(dir.file("run"));
  cfg.trainer.max_train_iters = 2;
  train(cfg, quiet());
  Config bad = cfg;
  bad.trainer.max_train_iters = 6;
  bad.optimizer.learning_rate = 1e30;
  TrainOptions o = quiet();
  o.resume_dir = cfg.trainer.run_dir;
  o.allow_config_change = true;
  const std::string err = error_of(bad, o);
  EXPECT_NE(err.find("step 4: the training loss"), std::string::npos) << err;
  EXPECT_NE(err.find("the last good one is kept: " + cfg.trainer.run_dir), std::string::npos)
      << err;
  EXPECT_NE(err.find("--resume " + cfg.trainer.run_dir + "/checkpoints --allow-config-change"),
            std::string::npos)
      << err;
  // The save of step 2 is still the latest, and loads.
  const Json st = json::parse_file(find_checkpoint(cfg.trainer.run_dir) + "/trainer_state.json");
  EXPECT_EQ(json::int_at(st, "step"), 2);
}

TEST(NumericalHealth, SkipStepAppliesNothingForNonfiniteSteps) {
  test::TempDir dir;
  Config ten = tiny(dir.file("ten"), 1e30);
  ten.trainer.nonfinite = "skip_step";
  ten.trainer.max_train_iters = 10;
  const TrainSummary s = train(ten, quiet());
  EXPECT_EQ(s.skipped_steps, 9);  // step 1 blows the weights up to ~1e30; the rest overflow
  Config one = tiny(dir.file("one"), 1e30);
  one.trainer.nonfinite = "skip_step";
  one.trainer.max_train_iters = 1;
  EXPECT_EQ(train(one, quiet()).skipped_steps, 0);
  const auto a = weights(ten.trainer.run_dir), b = weights(one.trainer.run_dir);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) EXPECT_TRUE(bytes == b.at(name)) << name;
  int skipped = 0;
  for (const Json& r : records(ten.trainer.run_dir))
    if (r.value("event", "") == "skipped_step") ++skipped;
  EXPECT_EQ(skipped, 9);
}

TEST(NumericalHealth, GradNormInTrainRecords) {
  test::TempDir dir;
  Config cfg = tiny(dir.file("run"));
  cfg.trainer.max_train_iters = 6;
  train(cfg, quiet());
  int lines = 0;
  for (const Json& r : records(cfg.trainer.run_dir)) {
    if (r.value("event", "") != "train") continue;
    ++lines;
    const double g = json::double_at(r, "grad_norm");
    EXPECT_TRUE(std::isfinite(g) && g > 0) << json::dump(r);
    EXPECT_GE(json::double_at(r, "grad_norm_max"), g);
  }
  EXPECT_EQ(lines, 3);
}

TEST(ResumeSafety, ChangedSeedOrBatchFailsListingKeysUnlessAllowed) {
  test::TempDir dir;
  Config cfg = tiny(dir.file("run"));
  cfg.trainer.max_train_iters = 2;
  train(cfg, quiet());
  TrainOptions o = quiet();
  o.resume_dir = cfg.trainer.run_dir;
  Config changed = cfg;
  changed.trainer.max_train_iters = 4;  // free
  changed.trainer.log_interval = 3;     // free
  changed.trainer.seed = 99;
  changed.trainer.train_batch_size = 16;
  const std::string err = error_of(changed, o);
  EXPECT_NE(err.find("2 setting(s)"), std::string::npos) << err;
  EXPECT_NE(err.find("TrainerArgs.seed: checkpoint 1234, now 99"), std::string::npos) << err;
  EXPECT_NE(err.find("global batch (TrainerArgs.train_batch_size x world size): checkpoint 32 x "
                     "1 = 32, now 16 x 1 = 16"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("max_train_iters:"), std::string::npos) << err;
  EXPECT_EQ(err.find("log_interval"), std::string::npos) << err;
  o.allow_config_change = true;
  EXPECT_EQ(train(changed, o).steps, 4);
  // Free keys alone need no flag.
  Config free_only = changed;
  free_only.trainer.max_train_iters = 5;
  free_only.trainer.ckpt_keep = 3;
  o.allow_config_change = false;
  EXPECT_EQ(train(free_only, o).steps, 5);
}

TEST(ResumeSafety, DifferencesOfDataAndWorldSize) {
  test::TempDir dir;
  const Config cfg = tiny(dir.file("run"));
  TrainerState st;
  st.config = to_gin(cfg);
  st.seed = cfg.trainer.seed;
  st.world_size = 2;
  st.data_fingerprint = "a";
  Config now = cfg;
  now.trainer.train_batch_size = 64;  // 64 x 1 = 32 x 2: the same global batch
  auto d = resume_differences(st, now, 1, "a", "ckpt");
  EXPECT_TRUE(d.empty()) << d.front().key;
  d = resume_differences(st, now, 2, "b", "ckpt");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "global batch (TrainerArgs.train_batch_size x world size)");
  EXPECT_EQ(d[1].key, "data fingerprint (the training data's content)");
  now.network.hidden_size = 32;
  now.optimizer.learning_rate = 0.5;
  d = resume_differences(st, now, 1, "a", "ckpt");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "NetworkArgs.hidden_size");
  EXPECT_EQ(d[1].key, "OptimizerArgs.learning_rate");
  EXPECT_THROW(check_resume_differences(d, false, "ckpt", nullptr), Error);
  std::ostringstream os;
  check_resume_differences(d, true, "ckpt", &os);
  EXPECT_NE(os.str().find("NetworkArgs.hidden_size: checkpoint 16, now 32"), std::string::npos)
      << os.str();
}

// A valid trainer_state.json with `key` replaced by `value` (JSON text).
std::string damaged(const std::string& key, const std::string& value) {
  Json st = json::parse(R"({"task": "retrieval", "step": 30, "epoch": 1, "batch_index": 2,
    "seed": 7, "world_size": 1, "best_validation": 0.5, "selected_epoch": 1,
    "selected_test": {"HR@10": 0.1}, "evals": [{"epoch": 1, "step": 20, "test": {"HR@10": 0.1}}],
    "config": "", "data_fingerprint": "x"})");
  if (key == "evals[0].step")
    st["evals"][0]["step"] = json::parse(value);
  else if (key == "evals[0].test.HR@10")
    st["evals"][0]["test"]["HR@10"] = json::parse(value);
  else
    st[key] = json::parse(value);
  try {
    parse_trainer_state(st, "ts.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ResumeSafety, ParseTrainerStateNamesTheDamagedField) {
  EXPECT_EQ(damaged("seed", "7"), "");  // the valid state parses
  const std::pair<std::string, std::string> bad[] = {{"step", "-1"},
                                                     {"step", "\"30\""},
                                                     {"step", "2.5"},
                                                     {"epoch", "null"},
                                                     {"batch_index", "-3"},
                                                     {"seed", "-2"},
                                                     {"world_size", "0"},
                                                     {"selected_epoch", "-5"},
                                                     {"best_validation", "\"x\""},
                                                     {"task", "\"other\""},
                                                     {"evals", "{}"},
                                                     {"evals[0].step", "31"},
                                                     {"selected_test", "[1]"},
                                                     {"evals[0].test.HR@10", "\"a\""},
                                                     {"config", "3"},
                                                     {"data_fingerprint", "[]"}};
  for (const auto& [key, value] : bad) {
    const std::string err = damaged(key, value);
    EXPECT_NE(err.find("ts.json: field \"" + key + "\""), std::string::npos)
        << key << " = " << value << ": " << err;
  }
  EXPECT_NE(damaged("evals[0].step", "31").find("outside [0, 30]"), std::string::npos);
}

TEST(MemoryPlan, OversizedPlanNamesTheFields) {
  test::TempDir dir;
  Config cfg = tiny(dir.file("run"));
  cfg.trainer.train_batch_size = 1000;
  const ModelMemory m = retrieval_memory(cfg, 101, Device::kCPU, DType::kF32);
  EXPECT_NO_THROW(check_plan_fits(cfg, m, 1, 0, {int64_t(1) << 40, "test"}));
  EXPECT_NO_THROW(check_plan_fits(cfg, m, 1, 0, {-1, "unknown"}));
  try {
    check_plan_fits(cfg, m, 1, 0, {1 << 20, "a test budget"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string s = e.what();
    EXPECT_NE(s.find("more than the 1.00 MiB available (a test budget)"), std::string::npos) << s;
    EXPECT_NE(s.find("TrainerArgs.train_batch_size = 1000"), std::string::npos) << s;
    EXPECT_NE(s.find("DatasetArgs.max_history_seqlen = 20"), std::string::npos) << s;
    EXPECT_NE(s.find("embedding table 'item' (101 rows"), std::string::npos) << s;
    // Largest first: the activations of 20000 tokens outweigh the rest.
    EXPECT_LT(s.find("activations"), s.find("dense parameters")) << s;
  }
}

TEST(MemoryPlan, ReadsMemAvailable) {
  test::TempDir dir;
  std::ofstream(dir.file("meminfo")) << "MemTotal:       1000 kB\nMemFree:         500 kB\n"
                                        "MemAvailable:    700 kB\n";
  const MemoryBudget b = host_memory_budget(dir.file("meminfo"));
  EXPECT_EQ(b.bytes, 700 * 1024);
  EXPECT_NE(b.source.find("MemAvailable"), std::string::npos);
  std::ofstream(dir.file("none")) << "MemTotal: 1 kB\n";
  EXPECT_EQ(host_memory_budget(dir.file("none")).bytes, -1);
  EXPECT_GT(host_memory_budget().bytes, 0);  // this machine's
}

}  // namespace
}  // namespace hstu
