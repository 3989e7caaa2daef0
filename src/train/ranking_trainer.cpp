// ranking_trainer.cpp — the generative ranking training loop (see ranking_trainer.h).
#include "train/ranking_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/synthetic_oracle.h"
#include "io/metrics_log.h"
#include "io/progress.h"
#include "model/ranking_model.h"
#include "ops/embedding.h"
#include "ops/optimizer.h"
#include "train/checkpoint.h"
#include "train/eval_report.h"
#include "train/lr_schedule.h"
#include "train/ranking_baseline.h"
#include "train/ranking_eval.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/train_loop.h"

namespace hstu {
TrainSummary train_ranking(const Config& cfg, const TrainOptions& opts) {
  const TrainerArgs& ta = cfg.trainer;
  HSTU_CHECK(cfg.dataset.max_num_candidates > 0,
             "ranking needs DatasetArgs.max_num_candidates >= 1");
  const Device device = resolve_device(ta.device);
  prepare_run(cfg, opts);
  auto say = [&](const std::string& s) {
    if (!opts.quiet) std::cout << s << std::flush;
  };

  // ---- data ---------------------------------------------------------------------------------
  const double t_data = ProgressBar::steady_seconds();
  DatasetReport report;
  const SequenceDataset ds = open_dataset(cfg, false, &report);
  const RankingSplits splits =
      make_ranking_splits(ds, cfg.dataset, cfg.dataset.ranking_split, cfg.dataset.truncate);
  char line[512];
  std::snprintf(line, sizeof line,
                "data: %s — %lld users, %lld items, %lld events, %zu contextual features (%.1fs); "
                "ranking split '%s': train %zu, eval %zu samples\n",
                ds.name.c_str(), static_cast<long long>(ds.num_users()),
                static_cast<long long>(ds.num_items - 1), static_cast<long long>(ds.num_events()),
                ds.contextual_names.size(), (ProgressBar::steady_seconds() - t_data),
                cfg.dataset.ranking_split.c_str(), splits.train.samples.size(),
                splits.eval.samples.size());
  say(line);
  HSTU_CHECK(!splits.train.samples.empty(), "dataset '", ds.name,
             "' has no ranking training samples");

  // ---- model --------------------------------------------------------------------------------
  const RankingShape shape = ranking_shape(cfg, ds);
  RankingModel model(cfg, shape, device, device == Device::kCPU ? DType::kF32 : DType::kBF16);
  Runtime runtime(device, cfg, model.runtime_shape());
  Ctx& ctx = runtime.ctx();
  model.plan(static_cast<uint64_t>(ta.seed));
  std::snprintf(line, sizeof line,
                "model: HSTU ranking %lld layers, D=%lld, %lld heads x %lld, %s head with %lld "
                "outputs, %.2fM parameters\n",
                static_cast<long long>(cfg.network.num_layers),
                static_cast<long long>(cfg.network.hidden_size),
                static_cast<long long>(cfg.network.num_attention_heads),
                static_cast<long long>(cfg.network.kv_channels),
                model.binary() ? "BCE" : "cross-entropy",
                static_cast<long long>(model.num_outputs()), model.num_params() / 1e6);
  say(line);
  say(model.describe_plan());

  // ---- baseline: logistic regression on item popularity + the user's mean (ranking_baseline.h)
  const int64_t eval_samples =
      ranking_eval_samples(splits.eval, ta.eval_batch_size, ta.max_eval_iters);
  const RankingBaseline baseline = ranking_baseline(
      ds, splits, {model.binary(), model.num_outputs(), shape.movielens_ratings}, eval_samples);
  std::snprintf(line, sizeof line,
                "baseline: logistic regression on log(1 + train-split item count) and the user's "
                "history mean of the %s, fitted on %lld train candidates (%.1fs):\n",
                model.binary() ? "task bit" : "label class",
                static_cast<long long>(baseline.train_candidates), baseline.seconds);
  say(line);
  say(baseline.describe());
  Json baseline_record = Json::object();  // the metrics.jsonl "baseline" event
  {
    Json& r = baseline_record;
    r["event"] = "baseline";
    r["test"] = metrics_to_json(baseline.eval);
    r["train_candidates"] = baseline.train_candidates;
    r["eval_candidates"] = baseline.eval_candidates;
    Json fits = Json::array();
    for (const LogisticFit& f : baseline.fits) {
      Json o = Json::object();
      Json coef = Json::array();
      for (double c : f.coef) coef.push_back(c);
      o["coef"] = coef;  // [rows, intercept + 2 features], row-major
      o["rows"] = f.num_rows;
      o["iterations"] = f.iterations;
      o["converged"] = f.converged;
      fits.push_back(o);
    }
    r["fits"] = fits;
  }

  Batcher batcher = ranking_batcher(ds, splits.train, ta.train_batch_size, cfg.dataset.shuffle,
                                    static_cast<uint64_t>(ta.seed));
  const int64_t per_epoch = batcher.num_batches();
  const int64_t total_steps =
      ta.max_train_iters > 0 ? ta.max_train_iters : ta.num_epochs * per_epoch;
  LrSchedule lr_schedule(cfg.optimizer.lr_schedule, cfg.optimizer.learning_rate,
                         cfg.optimizer.warmup_steps, total_steps);
  MetricsLog log(ta.run_dir);
  log.write(baseline_record);
  TrainSummary summary;
  summary.baseline = baseline.eval;
  int64_t step = 0;

  // ---- checkpoints: weights only (ckpt_load_dir) or everything (--resume) -------------------
  const CheckpointTensors ckpt{&model.dense(), model.tables(), device};
  const std::string ckpt_dir =
      ta.ckpt_save_dir.empty() ? ta.run_dir + "/checkpoints" : ta.ckpt_save_dir;
  if (opts.resume_dir.empty() && !ta.ckpt_load_dir.empty()) {
    load_checkpoint(ckpt, ta.ckpt_load_dir, false);
    model.dense().refresh_compute_copy(ctx);
    say("initialised weights from " + ta.ckpt_load_dir + "\n");
  }
  if (!opts.resume_dir.empty()) {
    const Json st = load_checkpoint(ckpt, opts.resume_dir, true);
    const auto task = st.find("task");
    HSTU_CHECK(task != st.end() && *task == "ranking", opts.resume_dir,
               ": not a ranking checkpoint (its trainer_state.json has no task \"ranking\")");
    step = json::int_at(st, "step");
    batcher.set_position(json::int_at(st, "epoch"), json::int_at(st, "batch_index"));
    for (const Json& e : json::array_at(st, "evals"))
      summary.evals.push_back({json::int_at(e, "epoch"),
                               json::int_at(e, "step"),
                               {},
                               metrics_from_json(json::at(e, "test"))});
    if (!summary.evals.empty())
      summary.final_test = summary.selected_test = summary.evals.back().test;
    model.dense().refresh_compute_copy(ctx);
    say("resumed from " + opts.resume_dir + " at step " + std::to_string(step) + "\n");
  }
  auto trainer_state = [&]() {
    Json st = Json::object();
    st["task"] = "ranking";
    st["step"] = step;
    st["epoch"] = batcher.epoch();
    st["batch_index"] = batcher.batch_index();
    st["seed"] = ta.seed;
    st["evals"] = evals_to_json(summary.evals, false);
    st["config"] = opts.config_text;
    return st;
  };

  auto evaluate = [&](int64_t epoch) {
    EvalRecord rec{epoch, step, {}, {}};
    if (!splits.eval.samples.empty())
      rec.test =
          evaluate_ranking(ctx, model, ds, splits.eval, ta.eval_batch_size, ta.max_eval_iters);
    summary.evals.push_back(rec);
    summary.final_test = rec.test;
    summary.selected_test = rec.test;
    summary.selected_epoch = epoch;
    Json r = Json::object();
    r["event"] = "eval";
    r["epoch"] = epoch;
    r["step"] = step;
    r["test"] = metrics_to_json(rec.test);
    log.write(r);
    if (!opts.quiet) {
      std::cout << "\neval after epoch " << epoch << " (step " << step << "):\n";
      print_eval_table(std::cout, {{"eval", rec.test}, {"baseline", baseline.eval}});
    }
  };

  // ---- loop ---------------------------------------------------------------------------------
  SequenceBatch host;
  const double t0 = ProgressBar::steady_seconds();
  int64_t tokens_done = 0;
  RunningLoss running;
  EpochProgress progress(opts.quiet, per_epoch, total_steps);
  RankingTrainStep stepper(cfg);
  while (step < total_steps) {
    const int64_t epoch = batcher.epoch();
    progress.open(epoch);
    batcher.next(host);
    stepper.run(ctx, model, host, step, lr_schedule.lr_at(step));
    ++step;
    tokens_done += model.num_tokens();
    const StepEvents due = step_events(ta, step, total_steps, epoch, batcher.batch_index() == 0);
    // The newest step's loss may still be in flight on CUDA; it is waited for only where the
    // numbers are reported (log lines, epoch ends, evaluations).
    for (const StepLoss& l : stepper.drain(due.log || due.epoch_done || due.eval)) {
      running.add(l.loss);
      summary.last_loss = l.loss;
      HSTU_CHECK(std::isfinite(l.loss), "ranking loss is not finite at step ", l.step + 1);
    }
    progress.update(batcher.batch_index(), model.num_tokens(), summary.last_loss);
    if (due.log)
      running.write_train_line(
          log, step, epoch,
          static_cast<double>(tokens_done) / std::max(ProgressBar::steady_seconds() - t0, 1e-9),
          lr_schedule.lr_at(step - 1));
    if (due.epoch_done || due.eval) progress.close();
    if (due.eval && (summary.evals.empty() || summary.evals.back().step != step))
      evaluate(due.epoch_done ? epoch + 1 : epoch);
    if (due.checkpoint) save_checkpoint(ckpt, trainer_state(), ckpt_dir);
  }
  summary.steps = step;
  summary.train_seconds = (ProgressBar::steady_seconds() - t0);
  if (device == Device::kCUDA) say(stepper.graph().describe() + "\n");
  if (!opts.quiet && !splits.eval.samples.empty()) {
    std::snprintf(line, sizeof line,
                  "final eval vs the logistic baseline: MeanAUC %.4f vs %.4f (%lld eval "
                  "candidates)\n",
                  metric(summary.final_test, "MeanAUC"), metric(baseline.eval, "MeanAUC"),
                  static_cast<long long>(baseline.eval_candidates));
    say(line);
  }
  summary.tokens_per_second =
      static_cast<double>(tokens_done) / std::max(summary.train_seconds, 1e-9);
  save_checkpoint(ckpt, trainer_state(), ckpt_dir);
  say("checkpoint: " + ckpt_dir + "\n");
  Json s = Json::object();
  s["event"] = "summary";
  s["task"] = "ranking";
  s["steps"] = step;
  s["train_seconds"] = summary.train_seconds;
  s["tokens_per_s"] = summary.tokens_per_second;
  s["final_test"] = metrics_to_json(summary.final_test);
  s["baseline"] = metrics_to_json(baseline.eval);
  s["checkpoint"] = ckpt_dir;
  log.write(s);

  // ---- synthetic data: the planted signal's oracle AUC per task beside the model's --------
  if (ds.name == "synthetic" && cfg.synthetic.num_tasks > 0 && !splits.eval.samples.empty()) {
    const SyntheticOracle oracle = synthetic_oracle(
        cfg.synthetic, ds, splits.eval,
        ta.max_eval_iters > 0 ? ta.max_eval_iters * ta.eval_batch_size : -1, roc_auc);
    say(synthetic_oracle_report(oracle, summary.final_test));
    Json o = Json::object(), auc = Json::array();
    for (double a : oracle.auc) auc.push_back(std::isfinite(a) ? Json(a) : Json());
    o["event"] = "synthetic_oracle";
    o["oracle_auc"] = auc;
    log.write(o);
  }
  return summary;
}

}  // namespace hstu
