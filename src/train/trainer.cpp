// trainer.cpp — the retrieval training loop (see trainer.h).
#include "train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

#include "data/batcher.h"
#include "data/popularity.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "io/atomic_file.h"
#include "io/chrome_trace.h"
#include "io/metrics_log.h"
#include "io/progress.h"
#include "model/model.h"
#include "ops/gemm.h"
#include "train/checkpoint.h"
#include "train/eval_report.h"
#include "train/evaluator.h"
#include "train/lr_schedule.h"
#include "train/ranking_trainer.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/train_loop.h"

namespace hstu {
void prepare_run(const Config& cfg, const TrainOptions& opts) {
  const TrainerArgs& ta = cfg.trainer;
  if (ta.num_threads > 0) {
    omp_set_num_threads(static_cast<int>(ta.num_threads));
    set_cpu_blas_threads(static_cast<int>(ta.num_threads));
  }
  std::filesystem::create_directories(ta.run_dir);
  if (!opts.config_text.empty()) atomic_write_file(ta.run_dir + "/config.gin", opts.config_text);
}

double metric(const NamedValues& values, const std::string& name) {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return std::numeric_limits<double>::quiet_NaN();
}

TrainSummary train(const Config& cfg, const TrainOptions& opts) {
  const TrainerArgs& ta = cfg.trainer;
  if (cfg.task == "ranking") return train_ranking(cfg, opts);
  HSTU_CHECK(cfg.retrieval.num_negatives > 0,
             "RetrievalArgs.num_negatives = ", cfg.retrieval.num_negatives,
             " (one negative per query of the batch) is not supported yet; "
             "set a positive count, e.g. 128");
  prepare_run(cfg, opts);
  auto say = [&](const std::string& s) {
    if (!opts.quiet) std::cout << s << std::flush;
  };

  // ---- data ---------------------------------------------------------------------------------
  const double t_data = ProgressBar::steady_seconds();
  DatasetReport report;
  const SequenceDataset ds = open_dataset(cfg, false, &report);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  char line[512];
  std::snprintf(
      line, sizeof line,
      "data: %s — %lld users, %lld items, %lld events (%s, %.1fs); train %zu, val %zu, "
      "test %zu samples\n",
      ds.name.c_str(), static_cast<long long>(ds.num_users()),
      static_cast<long long>(ds.num_items - 1), static_cast<long long>(ds.num_events()),
      report.dir.empty() ? "generated" : (report.reused_cache ? "cached" : "preprocessed"),
      ProgressBar::steady_seconds() - t_data, splits.train.samples.size(),
      splits.validation.samples.size(), splits.test.samples.size());
  say(line);
  HSTU_CHECK(!splits.train.samples.empty(), "dataset '", ds.name, "' has no training samples");

  // ---- model --------------------------------------------------------------------------------
  const Device device = resolve_device(ta.device);
  const int64_t batch = std::max(ta.train_batch_size, ta.eval_batch_size);
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = batch;
  shape.max_tokens = batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = cfg.retrieval.num_negatives;
  Runtime runtime(device, cfg, shape);
  Ctx& ctx = runtime.ctx();
  HstuModel model(cfg, shape, device, device == Device::kCPU ? DType::kF32 : DType::kBF16);
  model.plan(static_cast<uint64_t>(ta.seed));
  std::snprintf(line, sizeof line,
                "model: HSTU %lld layers, D=%lld, %lld heads x %lld, %.2fM parameters\n",
                static_cast<long long>(cfg.network.num_layers),
                static_cast<long long>(cfg.network.hidden_size),
                static_cast<long long>(cfg.network.num_attention_heads),
                static_cast<long long>(cfg.network.kv_channels), model.num_params() / 1e6);
  say(line);
  say(model.describe_plan());

  Batcher batcher(ds, splits.train, ta.train_batch_size, cfg.dataset.shuffle,
                  static_cast<uint64_t>(ta.seed));
  std::unique_ptr<RetrievalEvaluator> val_eval, test_eval;
  if (!splits.validation.samples.empty())
    val_eval = std::make_unique<RetrievalEvaluator>(ds, splits.validation, ta.eval_batch_size,
                                                    ta.max_eval_iters, model);
  test_eval = std::make_unique<RetrievalEvaluator>(ds, splits.test, ta.eval_batch_size,
                                                   ta.max_eval_iters, model);

  TrainSummary summary;
  {  // the popularity baseline, ranked with the same protocol
    const auto counts = popularity_counts(ds, splits.train);
    const auto ranks = popularity_ranks(ds, splits.test, counts, cfg.retrieval.eval_rank_cap);
    RetrievalMetrics m;
    for (int32_t r : ranks) m.add(r);
    summary.baseline = m.values();
  }

  // ---- schedule and state -------------------------------------------------------------------
  const int64_t per_epoch = batcher.num_batches();
  const int64_t total_steps =
      ta.max_train_iters > 0 ? ta.max_train_iters : ta.num_epochs * per_epoch;
  LrSchedule lr_schedule(cfg.optimizer.lr_schedule, cfg.optimizer.learning_rate,
                         cfg.optimizer.warmup_steps, total_steps);
  int64_t step = 0;
  double best_val = -1;
  MetricsLog log(ta.run_dir);
  if (opts.resume_dir.empty() && !ta.ckpt_load_dir.empty()) {  // weights only, fresh optimiser
    load_checkpoint(model, ta.ckpt_load_dir, false);
    model.dense().refresh_compute_copy(ctx);
    say("initialised weights from " + ta.ckpt_load_dir + "\n");
  }
  if (!opts.resume_dir.empty()) {
    const Json st = load_checkpoint(model, opts.resume_dir, true);
    step = json::int_at(st, "step");
    batcher.set_position(json::int_at(st, "epoch"), json::int_at(st, "batch_index"));
    best_val = json::double_at(st, "best_validation");
    summary.selected_epoch = json::int_at(st, "selected_epoch");
    summary.selected_test = metrics_from_json(json::at(st, "selected_test"));
    for (const Json& e : json::array_at(st, "evals"))
      summary.evals.push_back({json::int_at(e, "epoch"), json::int_at(e, "step"),
                               metrics_from_json(json::at(e, "validation")),
                               metrics_from_json(json::at(e, "test"))});
    model.dense().refresh_compute_copy(ctx);
    say("resumed from " + opts.resume_dir + " at step " + std::to_string(step) + "\n");
  }
  const std::string ckpt_dir =
      ta.ckpt_save_dir.empty() ? ta.run_dir + "/checkpoints" : ta.ckpt_save_dir;

  auto trainer_state = [&]() {
    Json st = Json::object();
    st["step"] = step;
    st["epoch"] = batcher.epoch();
    st["batch_index"] = batcher.batch_index();
    st["seed"] = ta.seed;
    st["best_validation"] = best_val;
    st["selected_epoch"] = summary.selected_epoch;
    st["selected_test"] = metrics_to_json(summary.selected_test);
    st["evals"] = evals_to_json(summary.evals, true);
    st["config"] = opts.config_text;
    return st;
  };

  // Chrome-trace timeline of steps [profile_step_start, profile_step_end) and evaluations.
  ChromeTrace trace(false);
  auto evaluate = [&](int64_t epoch) {
    ChromeTrace::Scope scope(trace, "eval");
    EvalRecord rec{epoch, step, {}, {}};
    std::vector<EvalRow> rows;
    if (val_eval) {
      rec.validation = val_eval->run(ctx, model).values();
      rows.push_back({"val", rec.validation});
    }
    rec.test = test_eval->run(ctx, model).values();
    rows.push_back({"test", rec.test});
    rows.push_back({"popularity", summary.baseline});
    summary.evals.push_back(rec);
    summary.final_test = rec.test;
    const double score = metric(val_eval ? rec.validation : rec.test, "NDCG@10");
    if (ta.select_best_on != "validation" || !val_eval || score > best_val) {
      best_val = std::max(best_val, score);
      summary.selected_epoch = epoch;
      summary.selected_test = rec.test;
    }
    Json r = Json::object();
    r["event"] = "eval";
    r["epoch"] = epoch;
    r["step"] = step;
    if (val_eval) r["validation"] = metrics_to_json(rec.validation);
    r["test"] = metrics_to_json(rec.test);
    log.write(r);
    if (!opts.quiet) {
      std::cout << "\neval after epoch " << epoch << " (step " << step << "):\n";
      print_eval_table(std::cout, rows);
    }
  };

  // ---- loop ---------------------------------------------------------------------------------
  SequenceBatch host;
  TrainStep stepper(cfg, ds.num_items);
  const double t0 = ProgressBar::steady_seconds();
  int64_t tokens_done = 0;
  RunningLoss running;
  EpochProgress progress(opts.quiet, per_epoch, total_steps);
  while (step < total_steps) {
    const int64_t epoch = batcher.epoch();
    progress.open(epoch);
    batcher.next(host);
    trace.set_enabled(ta.profile && step >= ta.profile_step_start && step < ta.profile_step_end);
    {
      ChromeTrace::Scope scope(trace, "train_step");  // on CUDA: the time to enqueue the step
      stepper.run(ctx, model, host, step, lr_schedule.lr_at(step));
    }
    const int64_t batch_tokens = host.num_tokens();
    ++step;
    tokens_done += batch_tokens;
    const StepEvents due = step_events(ta, step, total_steps, epoch, batcher.batch_index() == 0);
    // The newest step's loss may still be in flight on CUDA; it is waited for only where the
    // numbers are reported (log lines, epoch ends, evaluations).
    for (const StepLoss& l : stepper.drain(due.log || due.epoch_done || due.eval)) {
      HSTU_CHECK(std::isfinite(l.loss), "the training loss is not finite at step ", l.step + 1,
                 " (", l.loss, "); lower OptimizerArgs.learning_rate or check the data");
      running.add(l.loss);
      summary.last_loss = l.loss;
    }
    progress.update(batcher.batch_index(), batch_tokens, summary.last_loss);
    if (due.log)
      running.write_train_line(log, step, epoch,
                               tokens_done / std::max(ProgressBar::steady_seconds() - t0, 1e-9),
                               lr_schedule.lr_at(step - 1));
    if (due.epoch_done || due.eval) progress.close();
    if (due.eval && (summary.evals.empty() || summary.evals.back().step != step))
      evaluate(due.epoch_done ? epoch + 1 : epoch);
    if (due.checkpoint) save_checkpoint(model, trainer_state(), ckpt_dir);
  }
  summary.steps = step;
  summary.train_seconds = (ProgressBar::steady_seconds() - t0);
  summary.tokens_per_second = tokens_done / std::max(summary.train_seconds, 1e-9);
  if (device == Device::kCUDA) say(stepper.graph().describe() + "\n");
  save_checkpoint(model, trainer_state(), ckpt_dir);
  if (ta.profile) {
    trace.write(ta.run_dir + "/trace.json");
    say("timeline: " + ta.run_dir + "/trace.json (chrome://tracing)\n");
  }
  Json s = Json::object();
  s["event"] = "summary";
  s["steps"] = step;
  s["train_seconds"] = summary.train_seconds;
  s["tokens_per_s"] = summary.tokens_per_second;
  s["selected_epoch"] = summary.selected_epoch;
  s["selected_test"] = metrics_to_json(summary.selected_test);
  s["final_test"] = metrics_to_json(summary.final_test);
  s["popularity"] = metrics_to_json(summary.baseline);
  log.write(s);
  return summary;
}

}  // namespace hstu
