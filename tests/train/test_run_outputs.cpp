// test_run_outputs.cpp — what a run leaves to look at, read back by the tools users open it with:
//   - TensorBoard: TensorBoard's own EventAccumulator (tests/io/read_tensorboard.py) reads the
//     run folder's event files and finds exactly the scalars of metrics.jsonl — train/loss,
//     train/grad_norm, train/lr, train/tokens_per_s at every "train" line and test/<metric> at
//     every evaluation, with the same steps and values (as float32);
//   - the timeline (TrainerArgs.profile): trace.json holds the profiled steps, the evaluations
//     and each profiled step's phases on their own track;
//   - metrics.jsonl after a resume from an older save: every step logged once, the same records
//     as a run that was never stopped; a checkpoint beyond the run's end is refused.
// Skips where python3 or its tensorboard package is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/io_test_util.h"
#include "common/test_util.h"
#include "config/load.h"
#include "io/json.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hstu {
namespace {

Config tiny_run(const std::string& run_dir) {
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
TrainerArgs.train_batch_size = 32
TrainerArgs.eval_batch_size = 64
TrainerArgs.num_epochs = 2
TrainerArgs.log_interval = 3
TrainerArgs.eval_every_n_epochs = 1
RetrievalArgs.num_negatives = 16
)";
  return load_config_text(gin, "<run outputs>", {"TrainerArgs.run_dir=" + run_dir}, nullptr);
}

TEST(RunOutputs, TensorBoardShowsWhatMetricsJsonlHolds) {
  if (const std::string why = test::python_lacks("tensorboard"); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  const Config cfg = tiny_run(dir.file("run"));
  TrainOptions opts;
  opts.quiet = true;
  train(cfg, opts);

  // The expected scalars, from metrics.jsonl: {"tag": [[step, value], ...]}.
  Json expected = Json::object();
  std::istringstream lines(test::read_file(cfg.trainer.run_dir + "/metrics.jsonl"));
  int train_lines = 0, evals = 0;
  for (std::string line; std::getline(lines, line);) {
    const Json r = json::parse(line);
    const int64_t step = r.contains("step") ? json::int_at(r, "step") : -1;
    if (r["event"] == "train") {
      ++train_lines;
      for (const char* k : {"loss", "grad_norm", "lr", "tokens_per_s"})
        expected[std::string("train/") + k].push_back({step, json::double_at(r, k)});
    } else if (r["event"] == "eval") {
      ++evals;
      for (const auto& [name, value] : json::at(r, "test").items())
        expected["test/" + name].push_back({step, value.get<double>()});
    }
  }
  ASSERT_GE(train_lines, 3);
  ASSERT_EQ(evals, 2);  // one per epoch
  ASSERT_TRUE(expected.contains("test/HR@10") && expected.contains("test/NDCG@10"));
  const std::string want = dir.file("expected.json");
  std::ofstream(want) << json::dump(expected);

  const test::CommandResult r =
      test::run_command("python3 " HSTU_SOURCE_DIR "/tests/io/read_tensorboard.py " +
                        cfg.trainer.run_dir + " " + want);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

TEST(RunOutputs, TimelineHasStepsEvalsAndPhases) {
  test::TempDir dir;
  Config cfg = tiny_run(dir.file("run"));
  cfg.trainer.profile = true;
  cfg.trainer.profile_step_start = 0;
  cfg.trainer.profile_step_end = 1000;  // every step and so every evaluation
  TrainOptions opts;
  opts.quiet = true;
  const TrainSummary s = train(cfg, opts);
  const Json trace = json::parse_file(cfg.trainer.run_dir + "/trace.json");
  int steps = 0, evals = 0, attn = 0, track_names = 0;
  for (const Json& e : trace) {
    const std::string name = e["name"];
    steps += name == "train_step";
    evals += name == "eval";
    attn += name == "fwd.attn";
    track_names += name == "thread_name" && e["args"]["name"] == "CPU phases";
  }
  EXPECT_EQ(steps, s.steps);
  EXPECT_EQ(evals, 2);  // one per epoch
  // One layer: one "fwd.attn" phase per profiled step, plus those of the evaluations' forward
  // passes, which are not timed (no timer attached), so exactly one per step.
  EXPECT_EQ(attn, s.steps);
  EXPECT_EQ(track_names, 1);
}

// metrics.jsonl's records without their timing fields, one string per line.
std::vector<std::string> records(const std::string& run_dir) {
  std::vector<std::string> out;
  std::istringstream lines(test::read_file(run_dir + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    Json r = json::parse(line);
    for (const char* k : {"tokens_per_s", "train_seconds", "checkpoint"}) r.erase(k);
    out.push_back(json::dump(r));
  }
  return out;
}

TEST(RunOutputs, AResumeFromAnOlderSaveLogsEveryStepOnce) {
  test::TempDir dir;
  auto eight_steps = [&](const std::string& name) {
    Config c = tiny_run(dir.file(name));
    c.trainer.max_train_iters = 8;
    c.trainer.log_interval = 1;
    c.trainer.eval_interval = 2;
    c.trainer.ckpt_save_interval = 4;
    return c;
  };
  TrainOptions opts;
  opts.quiet = true;
  const Config straight = eight_steps("straight");
  train(straight, opts);
  // A run killed after its step-8 save had logged steps 5..8 that a resume from step 4 logs again.
  const Config killed = eight_steps("killed");
  train(killed, opts);
  const std::string ckpt = killed.trainer.run_dir + "/checkpoints";
  std::filesystem::remove_all(ckpt + "/step-000000008");
  test::write_file(checkpoint_latest_path(ckpt), "step-000000004\n");
  TrainOptions resume = opts;
  resume.resume_dir = killed.trainer.run_dir;
  train(killed, resume);
  EXPECT_EQ(records(killed.trainer.run_dir), records(straight.trainer.run_dir));
}

TEST(RunOutputs, ACheckpointBeyondTheRunIsRefused) {
  test::TempDir dir;
  Config c = tiny_run(dir.file("run"));
  c.trainer.max_train_iters = 6;
  TrainOptions opts;
  opts.quiet = true;
  train(c, opts);
  c.trainer.max_train_iters = 4;
  opts.resume_dir = c.trainer.run_dir;
  EXPECT_NE(test::error_of([&] { train(c, opts); }).find("beyond the 4 steps of this run"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
