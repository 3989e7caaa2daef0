// train_loop.h — the parts of the training loop (trainer.cpp) that are tested on their own:
// which reports a finished step triggers (TrainerArgs' log / eval / checkpoint intervals), the
// progress bar of the current epoch, the running loss behind metrics.jsonl's "train" lines, and
// the evaluation history as it is saved in trainer_state.json.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "io/json.h"
#include "io/metrics_log.h"
#include "io/progress.h"
#include "io/tensorboard.h"
#include "train/trainer.h"

namespace hstu {

// What is due after step `step` (1-based: the number of steps done) of `total_steps`.
struct StepEvents {
  bool epoch_done = false;  // the step finished an epoch
  bool log = false;         // a "train" line (log_interval)
  bool eval = false;        // every eval_interval steps, or every eval_every_n_epochs epochs when
                            // eval_interval <= 0; always after the last step
  bool checkpoint = false;  // every ckpt_save_interval steps (the trainers also save at the end)
};
StepEvents step_events(const TrainerArgs& ta, int64_t step, int64_t total_steps, int64_t epoch,
                       bool epoch_done);

// The progress bar of the current epoch; none when quiet.
class EpochProgress {
 public:
  EpochProgress(bool quiet, int64_t steps_per_epoch, int64_t total_steps);
  // Opens the bar of `epoch` (0-based) unless one is open.
  void open(int64_t epoch);
  // After a step of `tokens` tokens: batch_index is the batcher's position (0 = epoch done).
  void update(int64_t batch_index, int64_t tokens, double loss);
  // Ends the line (at an epoch's end, and before an evaluation prints its table).
  void close();

 private:
  bool quiet_;
  int64_t per_epoch_, total_steps_, tokens_ = 0;
  std::unique_ptr<ProgressBar> bar_;
};

// What a "train" line reports besides the loss.
struct TrainRates {
  double tokens_per_s = 0;
  double lr = 0;
  double mfu = std::numeric_limits<double>::quiet_NaN();  // NaN: not known (CPU, or no FLOP count)
};

// The mean loss and dense gradient norm since the last "train" line, and the steps skipped as
// non-finite (TrainerArgs.nonfinite = "skip_step") since then.
class RunningLoss {
 public:
  void add(double loss, double grad_norm = 0) {
    sum_ += loss;
    grad_norm_sum_ += grad_norm;
    grad_norm_max_ = std::max(grad_norm_max_, grad_norm);
    ++count_;
  }
  void add_skipped() { ++skipped_; }
  // Appends {"event": "train", step, epoch, loss (the mean), grad_norm (the mean), grad_norm_max,
  // tokens_per_s, lr[, mfu][, skipped_steps]} and the members of `extra` (the task's:
  // Task::step_metrics) to `log` and the same values as the scalars train/<name> to `tb` (when
  // given); starts over.
  void write_train_line(MetricsLog& log, TensorBoardWriter* tb, int64_t step, int64_t epoch,
                        const TrainRates& rates, const Json& extra = Json::object());

 private:
  double sum_ = 0, grad_norm_sum_ = 0, grad_norm_max_ = 0;
  int64_t count_ = 0, skipped_ = 0;
};

// An evaluation's metrics as the TensorBoard scalars validation/<metric> and test/<metric> (the
// metrics.jsonl keys), at the evaluation's step.
void write_eval_scalars(TensorBoardWriter& tb, const EvalRecord& rec);

// The evaluation history for trainer_state.json: [{epoch, step, [validation,] test}, ...].
Json evals_to_json(const std::vector<EvalRecord>& evals, bool with_validation);

// A checkpoint's trainer_state.json as the resume reads it (docs/CHECKPOINTS.md). Optional
// fields of older checkpoints take the values noted.
struct TrainerState {
  std::string task = "retrieval";  // absent in retrieval checkpoints older than the shared loop
  int64_t step = 0, epoch = 0, batch_index = 0;  // steps done; the batcher's position
  int64_t seed = -1;                             // TrainerArgs.seed (-1: not stored)
  int64_t world_size = 1;                        // ranks of the run that saved it (absent: 1)
  double best_validation = -1;                   // the best validation NDCG@10 so far (-1: none)
  int64_t selected_epoch = -1;                   // the selected epoch (-1: none yet)
  NamedValues selected_test;                     // its test metrics (empty: none yet)
  std::vector<EvalRecord> evals;                 // the evaluation history
  bool has_validation = false;                   // whether any evaluation has a validation split
  std::string config;            // the effective config in gin syntax ("" : not stored)
  std::string data_fingerprint;  // the training data's fingerprint ("" : not stored)
};

// Reads and validates every field of a trainer_state.json (`where` names the file in errors):
// each error names the field and what was wrong with it (type or range), e.g.
// "trainer_state.json: field \"evals[2].step\" is 40, beyond the checkpoint's step 30".
TrainerState parse_trainer_state(const Json& st, const std::string& where);

}  // namespace hstu
