// test_train_e2e.cpp — end-to-end checks of the CPU trainer:
//   - the embedded-default-like synthetic run learns: test HR@10 >= 3x the popularity baseline;
//   - checkpoint round trip: N steps straight give bit-identical weights to N/2 steps, save,
//     resume, N/2 steps.
// The hstu binary's own checks are in tests/cli.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "config/load.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hstu {
namespace {

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("hstu_e2e_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

Config small_config(const std::string& run_dir) {
  const std::string gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 50
SyntheticArgs.num_users = 1000
SyntheticArgs.num_items = 1000
SyntheticArgs.num_clusters = 20
SyntheticArgs.clusters_per_user = 2
SyntheticArgs.min_seqlen = 10
SyntheticArgs.max_seqlen = 50
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 32
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 16
NetworkArgs.num_position_buckets = 64
NetworkArgs.hidden_dropout = 0.1
NetworkArgs.relative_attention_bias = True
TrainerArgs.train_batch_size = 64
TrainerArgs.eval_batch_size = 128
TrainerArgs.log_interval = 5
OptimizerArgs.learning_rate = 2e-3
OptimizerArgs.adam_beta2 = 0.98
RetrievalArgs.num_negatives = 64
)";
  return load_config_text(gin, "<e2e>", {"TrainerArgs.run_dir=" + run_dir}, nullptr);
}

TEST(TrainE2E, SyntheticRunBeatsPopularityThreeTimes) {
  Config cfg = small_config(temp_dir("learn"));
  cfg.trainer.num_epochs = 6;
  cfg.trainer.eval_every_n_epochs = 6;
  TrainOptions opts;
  opts.quiet = true;
  const TrainSummary s = train(cfg, opts);
  const double hr = metric(s.final_test, "HR@10"), pop = metric(s.baseline, "HR@10");
  std::printf("[e2e] HR@10 model %.4f, popularity %.4f\n", hr, pop);
  EXPECT_GT(pop, 0.0);
  EXPECT_GE(hr, 3.0 * pop) << "model HR@10 " << hr << " vs popularity " << pop;
  EXPECT_TRUE(std::filesystem::exists(cfg.trainer.run_dir + "/metrics.jsonl"));
}

// Reads every tensor of a checkpoint's model.safetensors as raw bytes (the save `latest` names).
std::map<std::string, std::string> weights(const std::string& ckpt) {
  SafetensorsFile f(checkpoint_model_path(find_checkpoint(ckpt)));
  std::map<std::string, std::string> out;
  for (const auto& n : f.names()) {
    const auto& e = f.get(n);
    out[n] = std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  return out;
}

TEST(TrainE2E, ResumeIsBitIdentical) {
  const std::string a_dir = temp_dir("straight"), b_dir = temp_dir("resumed");
  TrainOptions opts;
  opts.quiet = true;
  Config a = small_config(a_dir);
  a.trainer.max_train_iters = 8;
  a.trainer.eval_interval = 100;  // no evaluation in between
  train(a, opts);

  Config b = small_config(b_dir);
  b.trainer.max_train_iters = 4;
  b.trainer.eval_interval = 100;
  train(b, opts);
  b.trainer.max_train_iters = 8;
  TrainOptions resume = opts;
  resume.resume_dir = b_dir + "/checkpoints";
  train(b, resume);

  const auto wa = weights(a_dir + "/checkpoints"), wb = weights(b_dir + "/checkpoints");
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, bytes] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    EXPECT_TRUE(bytes == wb.at(name)) << name << " differs after resume";
  }
  // And training did move the weights (the comparison is not vacuous).
  Config c = small_config(temp_dir("short"));
  c.trainer.max_train_iters = 4;
  c.trainer.eval_interval = 100;
  train(c, opts);
  const auto wc = weights(c.trainer.run_dir + "/checkpoints");
  EXPECT_FALSE(wc.at("item_embedding") == wa.at("item_embedding"));
}

}  // namespace
}  // namespace hstu
