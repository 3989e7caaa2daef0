// test_run_outputs.cpp — what a run leaves to look at, read back by the tools users open it with:
//   - TensorBoard: TensorBoard's own EventAccumulator (tests/io/read_tensorboard.py) reads the
//     run folder's event files and finds exactly the scalars of metrics.jsonl — train/loss,
//     train/lr, train/tokens_per_s at every "train" line and test/<metric> at every evaluation,
//     with the same steps and values (as float32);
//   - the timeline (TrainerArgs.profile): trace.json holds the profiled steps, the evaluations
//     and each profiled step's phases on their own track.
// Skips where python3 or its tensorboard package is missing.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/io_test_util.h"
#include "common/test_util.h"
#include "config/load.h"
#include "io/json.h"
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
      for (const char* k : {"loss", "lr", "tokens_per_s"})
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

}  // namespace
}  // namespace hstu
