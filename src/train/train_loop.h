// train_loop.h — the parts of the training loop (trainer.cpp) that are tested on their own:
// which reports a finished step triggers (TrainerArgs' log / eval / checkpoint intervals), the
// progress bar of the current epoch, the running loss behind metrics.jsonl's "train" lines, and
// the evaluation history as it is saved in trainer_state.json.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
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

// The mean loss since the last "train" line.
class RunningLoss {
 public:
  void add(double loss) {
    sum_ += loss;
    ++count_;
  }
  // Appends {"event": "train", step, epoch, loss (the mean), tokens_per_s, lr[, mfu]} to `log`
  // and the same values as the scalars train/<name> to `tb` (when given); starts over.
  void write_train_line(MetricsLog& log, TensorBoardWriter* tb, int64_t step, int64_t epoch,
                        const TrainRates& rates);

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

// An evaluation's metrics as the TensorBoard scalars validation/<metric> and test/<metric> (the
// metrics.jsonl keys), at the evaluation's step.
void write_eval_scalars(TensorBoardWriter& tb, const EvalRecord& rec);

// The evaluation history for trainer_state.json: [{epoch, step, [validation,] test}, ...].
Json evals_to_json(const std::vector<EvalRecord>& evals, bool with_validation);

}  // namespace hstu
