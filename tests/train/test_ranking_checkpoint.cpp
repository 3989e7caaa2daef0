// test_ranking_checkpoint.cpp — ranking checkpoints: N steps straight give bit-identical weights
// (dense parameters and the item / action / contextual tables) to N/2 steps, save, --resume,
// N/2 steps; the head's weights are stored in nn.Linear's layout; a retrieval checkpoint is
// refused by a ranking resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "common/data_test_util.h"
#include "common/ranking_test_util.h"
#include "config/config.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hstu {
namespace {

// A small synthetic ranking run: 3 contextual features, 3 tasks, 2 layers on the CPU.
Config tiny_ranking(const std::string& run_dir) {
  Config c = test::ranking_config(
      {.num_layers = 2,
       .hidden_size = 16,
       .num_attention_heads = 2,
       .kv_channels = 8,
       .num_position_buckets = 64,
       .head_arch = {16, 3},
       .num_tasks = 3,
       .max_history_seqlen = 12,
       .max_num_candidates = 4},
      {.train_batch_size = 16, .eval_batch_size = 32, .seed = 5, .run_dir = run_dir},
      {.num_users = 120,
       .num_items = 80,
       .num_clusters = 8,
       .min_seqlen = 10,
       .max_seqlen = 30,
       .num_contextual_features = 3,
       .contextual_cardinality = 5,
       .num_tasks = 3});
  c.trainer.eval_interval = 100;  // no evaluation in between
  c.trainer.num_threads = 1;
  return c;
}

std::map<std::string, std::string> tensors(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, std::string> out;
  for (const auto& n : f.names()) {
    const auto& e = f.get(n);
    out[n] = std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  return out;
}

TEST(RankingCheckpoint, ResumeIsBitIdentical) {
  test::TempDir dir;
  TrainOptions opts;
  opts.quiet = true;
  Config a = tiny_ranking(dir.file("straight"));
  a.trainer.max_train_iters = 8;
  train(a, opts);

  Config b = tiny_ranking(dir.file("resumed"));
  b.trainer.max_train_iters = 4;
  train(b, opts);
  b.trainer.max_train_iters = 8;
  TrainOptions resume = opts;
  resume.resume_dir = b.trainer.run_dir + "/checkpoints";
  const TrainSummary sb = train(b, resume);
  EXPECT_EQ(sb.steps, 8);

  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto wa = tensors(find_checkpoint(a.trainer.run_dir) + "/" + file);
    const auto wb = tensors(find_checkpoint(b.trainer.run_dir) + "/" + file);
    ASSERT_EQ(wa.size(), wb.size()) << file;
    for (const auto& [name, bytes] : wa) {
      ASSERT_TRUE(wb.count(name)) << file << ": " << name;
      EXPECT_TRUE(bytes == wb.at(name)) << file << ": " << name << " differs after resume";
    }
  }
  // Every table is in the checkpoint, and training moved the weights (not vacuous).
  const auto w8 = tensors(checkpoint_model_path(find_checkpoint(a.trainer.run_dir)));
  for (const char* t : {"item_embedding", "action_embedding", "contextual_embedding"})
    EXPECT_TRUE(w8.count(t)) << t;
  // The MLP head's weights are linear maps, stored as nn.Linear's [out, in] (head.1: 16 -> 3).
  EXPECT_EQ(SafetensorsFile(checkpoint_model_path(find_checkpoint(a.trainer.run_dir)))
                .get("head.1.weight")
                .shape,
            (std::vector<int64_t>{3, 16}));
  Config c = tiny_ranking(dir.file("short"));
  c.trainer.max_train_iters = 4;
  train(c, opts);
  const auto w4 = tensors(checkpoint_model_path(find_checkpoint(c.trainer.run_dir)));
  EXPECT_FALSE(w4.at("item_embedding") == w8.at("item_embedding"));
}

TEST(RankingCheckpoint, RefusesARetrievalCheckpoint) {
  test::TempDir dir;
  Config c = tiny_ranking(dir.file("run"));
  c.trainer.max_train_iters = 2;
  TrainOptions opts;
  opts.quiet = true;
  train(c, opts);
  // Rewrite the trainer state without the task, as retrieval runs wrote it before the task key
  // existed (and drop the manifest, which would refuse the changed file).
  const std::string ckpt = find_checkpoint(c.trainer.run_dir);
  std::filesystem::remove(ckpt + "/manifest.json");
  Json st = json::parse_file(checkpoint_state_path(ckpt));
  st.erase("task");
  atomic_write_file(checkpoint_state_path(ckpt), json::dump(st, 2));
  opts.resume_dir = ckpt;
  c.trainer.max_train_iters = 4;
  try {
    train(c, opts);
    FAIL() << "resumed from a checkpoint without task = ranking";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a retrieval checkpoint cannot resume a ranking run"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hstu
