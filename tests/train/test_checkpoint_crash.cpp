// test_checkpoint_crash.cpp — crash-consistent checkpoints: a save that fails at any of its file
// writes (io/atomic_file's injected fault) leaves the previous save loadable and `latest` naming a
// complete save, and a resume from it ends bit-identical to an uninterrupted run; a damaged file
// is refused by name; ckpt_keep bounds the saves kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/data_test_util.h"
#include "common/ranking_test_util.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

// A tiny ranking run saving every 2 steps.
Config tiny_run(const std::string& run_dir, int64_t steps) {
  Config c = test::ranking_config(
      {.num_layers = 1,
       .hidden_size = 16,
       .num_attention_heads = 2,
       .kv_channels = 8,
       .num_position_buckets = 32,
       .head_arch = {8, 2},
       .num_tasks = 2,
       .max_history_seqlen = 10,
       .max_num_candidates = 2},
      {.train_batch_size = 8, .eval_batch_size = 16, .seed = 3, .run_dir = run_dir},
      {.num_users = 60,
       .num_items = 40,
       .num_clusters = 4,
       .min_seqlen = 8,
       .max_seqlen = 20,
       .num_contextual_features = 1,
       .contextual_cardinality = 3,
       .num_tasks = 2});
  c.trainer.eval_interval = 1000;
  c.trainer.num_threads = 1;
  c.trainer.max_train_iters = steps;
  c.trainer.ckpt_save_interval = 2;
  return c;
}

// Every tensor of the model and optimizer files of the save `dir` resolves to, as raw bytes.
std::map<std::string, std::string> saved_bytes(const std::string& dir) {
  const std::string ckpt = find_checkpoint(dir);
  std::map<std::string, std::string> out;
  for (const std::string& path : {checkpoint_model_path(ckpt), checkpoint_optimizer_path(ckpt)}) {
    const SafetensorsFile f(path);
    for (const auto& n : f.names()) {
      const auto& e = f.get(n);
      out[path.substr(ckpt.size()) + ":" + n] =
          std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    }
  }
  return out;
}

TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

TEST(CheckpointCrash, EveryFailedWriteLeavesAResumableSave) {
  test::TempDir dir;
  constexpr int64_t kSteps = 8;                   // saves at steps 2, 4, 6, 8
  train(tiny_run(dir.file("warm"), 2), quiet());  // any dataset cache shared between runs
  inject_write_fault(0);
  train(tiny_run(dir.file("first"), 2), quiet());
  const int64_t first = atomic_file_commits();  // the run's set-up and its first save
  const Config ref = tiny_run(dir.file("straight"), kSteps);
  inject_write_fault(0);
  train(ref, quiet());
  const int64_t writes = atomic_file_commits();
  ASSERT_EQ((writes - first) % 3, 0) << writes - first << " writes in saves 2 to 4";
  const auto want = saved_bytes(ref.trainer.run_dir);
  int trials = 0;
  for (const int64_t keep : {1, 2}) {
    for (int64_t n = first + 1; n <= writes; ++n) {  // each write of saves 2 to 4
      SCOPED_TRACE("fault at write " + std::to_string(n) + ", keep " + std::to_string(keep));
      Config c = tiny_run(dir.file("k" + std::to_string(keep) + "_w" + std::to_string(n)), kSteps);
      c.trainer.ckpt_keep = keep;
      inject_write_fault(n);
      EXPECT_THROW(train(c, quiet()), Error);
      inject_write_fault(0);
      const std::string ckpt_dir = c.trainer.run_dir + "/checkpoints";
      for (const fs::directory_entry& e : fs::directory_iterator(ckpt_dir))
        EXPECT_NE(e.path().extension().string(), ".tmp") << e.path().string() << " left behind";
      std::ifstream latest(checkpoint_latest_path(ckpt_dir));
      std::string name;
      std::getline(latest, name);
      const std::string save = find_checkpoint(ckpt_dir);
      EXPECT_EQ(save, ckpt_dir + "/" + name);  // latest names a complete, verified save
      TrainOptions resume = quiet();
      resume.resume_dir = c.trainer.run_dir;
      train(c, resume);
      EXPECT_TRUE(saved_bytes(c.trainer.run_dir) == want) << "resume from " << save << " differs";
      ++trials;
    }
  }
  EXPECT_GE(trials, 24);
}

TEST(CheckpointCrash, KeepsTheNewestSaves) {
  test::TempDir dir;
  Config c = tiny_run(dir.file("run"), 8);
  c.trainer.ckpt_keep = 2;
  fs::create_directories(c.trainer.run_dir + "/checkpoints/step-000000001.tmp");  // a stale one
  train(c, quiet());
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(c.trainer.run_dir + "/checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000000006", "step-000000008"}));
}

TEST(CheckpointCrash, ADamagedFileIsRefusedByName) {
  test::TempDir dir;
  const Config c = tiny_run(dir.file("run"), 2);
  train(c, quiet());
  const std::string save = find_checkpoint(c.trainer.run_dir);
  for (const std::string& path : {checkpoint_model_path(save), checkpoint_optimizer_path(save),
                                  checkpoint_state_path(save)}) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-2, std::ios::end);
    const char old = static_cast<char>(f.get());
    f.seekp(-2, std::ios::end);
    f.put(static_cast<char>(old ^ 1));
    f.close();
    try {
      find_checkpoint(c.trainer.run_dir);
      FAIL() << "loaded a checkpoint whose " << path << " was modified";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CRC-32C"), std::string::npos) << e.what();
    }
    std::fstream g(path, std::ios::in | std::ios::out | std::ios::binary);
    g.seekp(-2, std::ios::end);
    g.put(old);
  }
  EXPECT_EQ(find_checkpoint(c.trainer.run_dir), save);  // restored, it loads again
}

TEST(CheckpointCrash, AMissingLatestFallsBackToTheNewestSave) {
  test::TempDir dir;
  const Config c = tiny_run(dir.file("run"), 4);
  train(c, quiet());
  const std::string ckpt_dir = c.trainer.run_dir + "/checkpoints";
  fs::remove(checkpoint_latest_path(ckpt_dir));
  EXPECT_EQ(find_checkpoint(ckpt_dir), ckpt_dir + "/step-000000004");
  EXPECT_EQ(find_checkpoint(ckpt_dir + "/step-000000002"), ckpt_dir + "/step-000000002");
}

}  // namespace
}  // namespace hstu
