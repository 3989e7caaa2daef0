// train_loop.cpp — the trainers' shared schedule and reporting (see train_loop.h).
#include "train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
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
                                   int64_t epoch, const TrainRates& rates, const Json& extra) {
  // Every step since the last line skipped (TrainerArgs.nonfinite = "skip_step"): no values.
  const double none = std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(count_);
  const double loss = count_ > 0 ? sum_ / n : none,
               grad_norm = count_ > 0 ? grad_norm_sum_ / n : none;
  Json r = {{"event", "train"},
            {"step", step},
            {"epoch", epoch},
            {"loss", loss},
            {"grad_norm", grad_norm},
            {"grad_norm_max", grad_norm_max_},
            {"tokens_per_s", rates.tokens_per_s},
            {"lr", rates.lr}};
  if (std::isfinite(rates.mfu)) r["mfu"] = rates.mfu;
  if (skipped_ > 0) r["skipped_steps"] = skipped_;
  for (const auto& [key, value] : extra.items()) r[key] = value;
  log.write(r);
  if (tb) {
    if (count_ > 0) tb->add_scalar("train/loss", step, loss);
    if (count_ > 0) tb->add_scalar("train/grad_norm", step, grad_norm);
    tb->add_scalar("train/lr", step, rates.lr);
    tb->add_scalar("train/tokens_per_s", step, rates.tokens_per_s);
    if (std::isfinite(rates.mfu)) tb->add_scalar("train/mfu", step, rates.mfu);
  }
  sum_ = grad_norm_sum_ = grad_norm_max_ = 0;
  count_ = skipped_ = 0;
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

namespace {

// `field` of trainer_state.json in an error: the file, the field and what is wrong.
[[noreturn]] void bad_field(const std::string& where, const std::string& field,
                            const std::string& what) {
  HSTU_THROW(where, ": field \"", field, "\" ", what,
             " (the checkpoint is damaged or was not written by hstu)");
}

const Json& member(const Json& o, const std::string& key, const std::string& field,
                   const std::string& where) {
  if (!o.is_object()) bad_field(where, field, "is inside something that is not a JSON object");
  const auto it = o.find(key);
  if (it == o.end()) bad_field(where, field, "is missing");
  return *it;
}

int64_t int_field(const Json& o, const std::string& key, const std::string& field,
                  const std::string& where, int64_t lo, int64_t hi) {
  const Json& v = member(o, key, field, where);
  if (!v.is_number_integer()) bad_field(where, field, "must be an integer, got " + json::dump(v));
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi)
    bad_field(where, field,
              "is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  return x;
}

std::string string_field(const Json& o, const std::string& key, const std::string& field,
                         const std::string& where) {
  const Json& v = member(o, key, field, where);
  if (!v.is_string()) bad_field(where, field, "must be a string, got " + json::dump(v));
  return v.get<std::string>();
}

// A metrics object {name: number or null (a NaN metric)}.
NamedValues metrics_field(const Json& o, const std::string& key, const std::string& field,
                          const std::string& where) {
  const Json& v = member(o, key, field, where);
  if (!v.is_object()) bad_field(where, field, "must be an object of metrics, got " + json::dump(v));
  NamedValues out;
  for (const auto& [name, x] : v.items()) {
    if (!x.is_null() && !x.is_number())
      bad_field(where, field + "." + name, "must be a number or null, got " + json::dump(x));
    out.emplace_back(name,
                     x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
  }
  return out;
}

}  // namespace

TrainerState parse_trainer_state(const Json& st, const std::string& where) {
  if (!st.is_object()) HSTU_THROW(where, ": not a JSON object (a damaged checkpoint)");
  constexpr int64_t kMax = INT64_MAX;
  TrainerState s;
  if (st.contains("task")) {
    s.task = string_field(st, "task", "task", where);
    if (s.task != "retrieval" && s.task != "ranking")
      bad_field(where, "task", "is \"" + s.task + "\", expected \"retrieval\" or \"ranking\"");
  }
  s.step = int_field(st, "step", "step", where, 0, kMax);
  s.epoch = int_field(st, "epoch", "epoch", where, 0, kMax);
  s.batch_index = int_field(st, "batch_index", "batch_index", where, 0, kMax);
  if (st.contains("seed")) s.seed = int_field(st, "seed", "seed", where, 0, kMax);
  if (st.contains("world_size"))
    s.world_size = int_field(st, "world_size", "world_size", where, 1, 1 << 20);
  if (st.contains("best_validation")) {
    const Json& v = st.at("best_validation");
    if (!v.is_null() && !v.is_number())
      bad_field(where, "best_validation", "must be a number, got " + json::dump(v));
    s.best_validation = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
  }
  if (st.contains("selected_epoch"))
    s.selected_epoch = int_field(st, "selected_epoch", "selected_epoch", where, -1, kMax);
  if (st.contains("selected_test"))
    s.selected_test = metrics_field(st, "selected_test", "selected_test", where);
  const Json& evals = member(st, "evals", "evals", where);
  if (!evals.is_array()) bad_field(where, "evals", "must be an array, got " + json::dump(evals));
  for (size_t i = 0; i < evals.size(); ++i) {
    const std::string f = "evals[" + std::to_string(i) + "]";
    const Json& e = evals[i];
    if (!e.is_object()) bad_field(where, f, "must be an object, got " + json::dump(e));
    EvalRecord r;
    r.epoch = int_field(e, "epoch", f + ".epoch", where, 0, kMax);
    r.step = int_field(e, "step", f + ".step", where, 0, s.step);
    if (!s.evals.empty() && r.step < s.evals.back().step)
      bad_field(where, f + ".step",
                "is " + std::to_string(r.step) + ", before the previous evaluation's step " +
                    std::to_string(s.evals.back().step));
    if (e.contains("validation"))
      r.validation = metrics_field(e, "validation", f + ".validation", where);
    r.test = metrics_field(e, "test", f + ".test", where);
    s.has_validation |= !r.validation.empty();
    s.evals.push_back(std::move(r));
  }
  if (st.contains("config")) s.config = string_field(st, "config", "config", where);
  if (st.contains("data_fingerprint"))
    s.data_fingerprint = string_field(st, "data_fingerprint", "data_fingerprint", where);
  return s;
}

}  // namespace hstu
