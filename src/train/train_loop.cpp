// train_loop.cpp — the trainers' shared schedule and reporting (see train_loop.h).
#include "train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "train/eval_report.h"

namespace hstu {

StepEvents step_events(const TrainerArgs& ta, int64_t step, int64_t total_steps, int64_t epoch,
                       bool epoch_done) {
  StepEvents e;
  e.epoch_done = epoch_done;
  e.log = ta.log_interval > 0 && step % ta.log_interval == 0;
  const bool by_steps = ta.eval_interval > 0 && step % ta.eval_interval == 0;
  const bool by_epochs = ta.eval_interval <= 0 && epoch_done &&
                         (epoch + 1) % std::max<int64_t>(ta.eval_every_n_epochs, 1) == 0;
  e.eval = by_steps || by_epochs || step == total_steps;
  e.checkpoint = ta.ckpt_save_interval > 0 && step % ta.ckpt_save_interval == 0;
  return e;
}

EpochProgress::EpochProgress(bool quiet, int64_t steps_per_epoch, int64_t total_steps)
    : quiet_(quiet), per_epoch_(steps_per_epoch), total_steps_(total_steps) {}

void EpochProgress::open(int64_t epoch) {
  if (quiet_ || bar_) return;
  const int64_t epochs = (total_steps_ + per_epoch_ - 1) / per_epoch_;
  bar_ = std::make_unique<ProgressBar>(
      "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), per_epoch_);
  tokens_ = 0;
}

void EpochProgress::update(int64_t batch_index, int64_t tokens, double loss) {
  tokens_ += tokens;
  if (bar_) bar_->update(batch_index == 0 ? per_epoch_ : batch_index, tokens_, loss);
}

void EpochProgress::close() {
  if (!bar_) return;
  bar_->finish();
  bar_.reset();
}

void RunningLoss::write_train_line(MetricsLog& log, TensorBoardWriter* tb, int64_t step,
                                   int64_t epoch, const TrainRates& rates) {
  const double loss = sum_ / static_cast<double>(std::max<int64_t>(count_, 1));
  Json r = {{"event", "train"},
            {"step", step},
            {"epoch", epoch},
            {"loss", loss},
            {"tokens_per_s", rates.tokens_per_s},
            {"lr", rates.lr}};
  if (std::isfinite(rates.mfu)) r["mfu"] = rates.mfu;
  log.write(r);
  if (tb) {
    tb->add_scalar("train/loss", step, loss);
    tb->add_scalar("train/lr", step, rates.lr);
    tb->add_scalar("train/tokens_per_s", step, rates.tokens_per_s);
    if (std::isfinite(rates.mfu)) tb->add_scalar("train/mfu", step, rates.mfu);
  }
  sum_ = 0;
  count_ = 0;
}

void write_eval_scalars(TensorBoardWriter& tb, const EvalRecord& rec) {
  for (const auto& [name, value] : rec.validation)
    tb.add_scalar("validation/" + name, rec.step, value);
  for (const auto& [name, value] : rec.test) tb.add_scalar("test/" + name, rec.step, value);
}

Json evals_to_json(const std::vector<EvalRecord>& evals, bool with_validation) {
  Json out = Json::array();
  for (const EvalRecord& e : evals) {
    Json r = Json::object();
    r["epoch"] = e.epoch;
    r["step"] = e.step;
    if (with_validation) r["validation"] = metrics_to_json(e.validation);
    r["test"] = metrics_to_json(e.test);
    out.push_back(r);
  }
  return out;
}

}  // namespace hstu
