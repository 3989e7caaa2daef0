// test_train_loop.cpp — the trainers' shared schedule and reporting: which reports a step
// triggers, the running loss of the "train" lines, and the evaluation history's JSON.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "train/train_loop.h"

namespace hstu {
namespace {

TEST(StepEvents, IntervalsInSteps) {
  TrainerArgs ta;
  ta.log_interval = 3;
  ta.eval_interval = 4;
  ta.ckpt_save_interval = 5;
  std::vector<int64_t> logs, evals, ckpts;
  for (int64_t step = 1; step <= 10; ++step) {
    const StepEvents e = step_events(ta, step, 10, 0, false);
    if (e.log) logs.push_back(step);
    if (e.eval) evals.push_back(step);
    if (e.checkpoint) ckpts.push_back(step);
  }
  EXPECT_EQ(logs, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(evals, (std::vector<int64_t>{4, 8, 10}));  // and always after the last step
  EXPECT_EQ(ckpts, (std::vector<int64_t>{5, 10}));
}

TEST(StepEvents, EvaluationEveryNEpochsWhenNoStepInterval) {
  TrainerArgs ta;
  ta.log_interval = 0;
  ta.eval_interval = 0;
  ta.eval_every_n_epochs = 2;
  ta.ckpt_save_interval = 0;
  // 4 steps per epoch, 3 epochs: epochs end after steps 4, 8, 12.
  std::vector<int64_t> evals;
  for (int64_t step = 1; step <= 12; ++step) {
    const int64_t epoch = (step - 1) / 4;
    const StepEvents e = step_events(ta, step, 12, epoch, step % 4 == 0);
    EXPECT_FALSE(e.log);
    EXPECT_FALSE(e.checkpoint);
    EXPECT_EQ(e.epoch_done, step % 4 == 0);
    if (e.eval) evals.push_back(step);
  }
  EXPECT_EQ(evals, (std::vector<int64_t>{8, 12}));  // after epoch 2, and the last step
}

TEST(RunningLoss, TrainLineHoldsTheMeanSinceTheLastLine) {
  test::TempDir dir;
  {
    MetricsLog log(dir.path());
    RunningLoss running;
    running.add(2.0);
    running.add(4.0);
    running.write_train_line(log, nullptr, 2, 0, {100.0, 1e-3});
    running.add(1.0);
    running.write_train_line(log, nullptr, 3, 1, {50.0, 5e-4, 0.25});
  }
  std::istringstream in(test::read_file(dir.file("metrics.jsonl")));
  std::vector<Json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("event"), "train");
  EXPECT_EQ(json::int_at(lines[0], "step"), 2);
  EXPECT_DOUBLE_EQ(json::double_at(lines[0], "loss"), 3.0);
  EXPECT_DOUBLE_EQ(json::double_at(lines[0], "tokens_per_s"), 100.0);
  EXPECT_DOUBLE_EQ(json::double_at(lines[0], "lr"), 1e-3);
  EXPECT_EQ(json::int_at(lines[1], "epoch"), 1);
  EXPECT_DOUBLE_EQ(json::double_at(lines[1], "loss"), 1.0);  // started over after the first line
  EXPECT_FALSE(lines[0].contains("mfu"));                    // not known
  EXPECT_DOUBLE_EQ(json::double_at(lines[1], "mfu"), 0.25);
}

TEST(EvalsToJson, ValidationOnlyWhenAsked) {
  std::vector<EvalRecord> evals(2);
  evals[0].epoch = 1, evals[0].step = 10;
  evals[0].validation = {{"HR@10", 0.25}};
  evals[0].test = {{"HR@10", 0.5}};
  evals[1].epoch = 2, evals[1].step = 20;
  evals[1].test = {{"HR@10", 0.75}};
  const Json with = evals_to_json(evals, true), without = evals_to_json(evals, false);
  ASSERT_EQ(with.size(), 2u);
  EXPECT_EQ(json::int_at(with[1], "step"), 20);
  EXPECT_EQ(with[0]["validation"]["HR@10"], 0.25);
  EXPECT_EQ(with[1]["test"]["HR@10"], 0.75);
  EXPECT_FALSE(without[0].contains("validation"));
  EXPECT_EQ(without[0]["test"]["HR@10"], 0.5);
}

}  // namespace
}  // namespace hstu
