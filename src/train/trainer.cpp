// trainer.cpp — the one training loop (see trainer.h), for every task (task.h): schedule,
// progress, metrics.jsonl, the timeline, best-epoch selection, checkpoints and resume.
#include "train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

#include "config/schema.h"
#include "core/device_info.h"
#include "core/nvtx.h"
#include "core/phase_timer.h"
#include "dist/bootstrap.h"
#include "dist/launch_env.h"
#include "dist/open_comm.h"
#include "dist/watchdog.h"
#include "io/atomic_file.h"
#include "io/chrome_trace.h"
#include "io/json.h"
#include "io/metrics_log.h"
#include "io/progress.h"
#include "io/tensorboard.h"
#include "ops/gemm.h"
#include "train/checkpoint.h"
#include "train/eval_report.h"
#include "train/health.h"
#include "train/lr_schedule.h"
#include "train/resume_check.h"
#include "train/runtime.h"
#include "train/task.h"
#include "train/train_loop.h"

namespace hstu {
namespace {

// The loop's state and the records it writes; a checkpoint stores all of it (trainer_state()).
class Loop {
 public:
  // Rank 0 of a data-parallel job alone prints, logs and writes checkpoints; every rank runs the
  // same loop (same batches, evaluations and saves), so the collectives match.
  Loop(const Config& cfg, const TrainOptions& opts, Task& task)
      : cfg_(cfg),
        ta_(cfg.trainer),
        opts_(opts),
        task_(task),
        root_(task.comm().is_root()),
        quiet_(opts.quiet || !root_),
        ckpt_dir_(ta_.ckpt_save_dir.empty() ? ta_.run_dir + "/checkpoints" : ta_.ckpt_save_dir) {
    summary_.baseline = task.baseline();
    if (root_) {
      log_ = std::make_unique<MetricsLog>(ta_.run_dir);
      tb_ = std::make_unique<TensorBoardWriter>(ta_.run_dir);
    }
  }

  TrainSummary run();

 private:
  void say(const std::string& s) const {
    if (!quiet_) std::cout << s << std::flush;
  }
  void load();
  Json trainer_state() const;
  // The training data's fingerprint, computed once (a pass over the data).
  const std::string& data_fingerprint() const {
    if (fingerprint_.empty()) fingerprint_ = task_.data_fingerprint();
    return fingerprint_;
  }
  void save() {
    const nvtx::Range range("checkpoint");
    // Rank 0 writes the replicated state; with sharded tables every rank writes its shards.
    const CheckpointTensors ckpt = task_.checkpoint_tensors();
    dist::heartbeat(step_);
    if (root_ || ckpt.collective())
      saved_dir_ = save_checkpoint_step(ckpt, trainer_state(), ckpt_dir_, ta_.ckpt_keep);
    dist::heartbeat(step_);
    saved_step_ = step_;
  }
  void evaluate(int64_t epoch);
  void nonfinite(const StepLoss& l, RunningLoss& running);
  void cut_log_at_checkpoint();
  int64_t timed_step(const SequenceBatch& batch, double lr);
  void write_summary_record();

  const Config& cfg_;
  const TrainerArgs& ta_;
  const TrainOptions& opts_;
  Task& task_;
  const bool root_;                  // rank 0 (or the only rank)
  const bool quiet_;                 // nothing printed: --quiet, or not rank 0
  std::unique_ptr<MetricsLog> log_;  // rank 0 only
  const std::string ckpt_dir_;
  std::string saved_dir_;  // the step folder of the latest save
  int64_t saved_step_ = -1;
  TrainSummary summary_;
  int64_t step_ = 0;
  double best_val_ = -1;
  bool has_validation_ = false;  // whether the task's evaluations carry a validation split
  std::unique_ptr<TensorBoardWriter> tb_;  // event files beside metrics.jsonl (rank 0 only)
  // The timeline (TrainerArgs.profile): host time of steps [profile_step_start, profile_step_end)
  // and evaluations, and each profiled step's phases on the device's own clock (phase_timer.h).
  ChromeTrace trace_{false};
  std::unique_ptr<PhaseTimer> phases_;
  mutable std::string fingerprint_;
};

// Weights only (TrainerArgs.ckpt_load_dir, fresh optimiser) or everything (--resume).
void Loop::load() {
  const CheckpointTensors ckpt = task_.checkpoint_tensors();
  if (opts_.resume_dir.empty() && !ta_.ckpt_load_dir.empty()) {
    load_checkpoint(ckpt, ta_.ckpt_load_dir, false);
    ckpt.dense->refresh_compute_copy(task_.ctx());
    say("initialised weights from " + ta_.ckpt_load_dir + "\n");
  }
  if (opts_.resume_dir.empty()) return;
  const std::string where = opts_.resume_dir + " (trainer_state.json)";
  const TrainerState st = parse_trainer_state(load_checkpoint(ckpt, opts_.resume_dir, true), where);
  HSTU_CHECK(st.task == task_.name(), opts_.resume_dir, ": a ", st.task,
             " checkpoint cannot resume a ", task_.name(), " run");
  // Every rank compares the same values (the config, the data, the world size), so every rank
  // takes the same decision.
  check_resume_differences(
      resume_differences(st, cfg_, task_.comm().size(), data_fingerprint(), where),
      opts_.allow_config_change, opts_.resume_dir, quiet_ ? nullptr : &std::cerr);
  step_ = st.step;
  task_.batcher().set_position(st.epoch, st.batch_index);
  best_val_ = st.best_validation;
  summary_.selected_epoch = st.selected_epoch;
  summary_.selected_test = st.selected_test;
  summary_.evals = st.evals;
  has_validation_ = st.has_validation;
  if (!summary_.evals.empty()) {
    summary_.final_test = summary_.evals.back().test;
    if (summary_.selected_test.empty()) summary_.selected_test = summary_.final_test;
  }
  ckpt.dense->refresh_compute_copy(task_.ctx());
  say("resumed from " + opts_.resume_dir + " at step " + std::to_string(step_) + "\n");
}

Json Loop::trainer_state() const {
  const Batcher& b = task_.batcher();
  Json st = Json::object();
  st["task"] = task_.name();
  st["step"] = step_;
  st["epoch"] = b.epoch();
  st["batch_index"] = b.batch_index();
  st["seed"] = ta_.seed;
  st["world_size"] = task_.comm().size();
  st["data_fingerprint"] = data_fingerprint();
  st["best_validation"] = best_val_;
  st["selected_epoch"] = summary_.selected_epoch;
  st["selected_test"] = metrics_to_json(summary_.selected_test);
  st["evals"] = evals_to_json(summary_.evals, has_validation_);
  // The effective config (what `hstu train` writes to config.gin); checkpoints also put it into
  // their safetensors metadata.
  st["config"] = to_gin(cfg_);
  return st;
}

// Evaluates, selects the best epoch (by validation NDCG@10 when select_best_on = "validation"
// and the task has a validation split; else the latest), logs and prints the table.
void Loop::evaluate(int64_t epoch) {
  const nvtx::Range range("eval");
  ChromeTrace::Scope scope(trace_, "eval");
  EvalRecord rec{epoch, step_, {}, {}};
  dist::heartbeat(step_);
  task_.evaluate(rec);
  dist::heartbeat(step_);
  has_validation_ = !rec.validation.empty();
  summary_.evals.push_back(rec);
  summary_.final_test = rec.test;
  const double score = metric(has_validation_ ? rec.validation : rec.test, "NDCG@10");
  if (ta_.select_best_on != "validation" || !has_validation_ || score > best_val_) {
    best_val_ = std::max(best_val_, score);
    summary_.selected_epoch = epoch;
    summary_.selected_test = rec.test;
  }
  Json r = Json::object();
  r["event"] = "eval";
  r["epoch"] = epoch;
  r["step"] = step_;
  if (has_validation_) r["validation"] = metrics_to_json(rec.validation);
  r["test"] = metrics_to_json(rec.test);
  if (!root_) return;
  log_->write(r);
  write_eval_scalars(*tb_, rec);
  if (quiet_) return;
  std::vector<EvalRow> rows;
  if (has_validation_) rows.push_back({"val", rec.validation});
  rows.push_back({task_.test_label(), rec.test});
  rows.push_back({task_.baseline_label(), summary_.baseline});
  std::cout << "\neval after epoch " << epoch << " (step " << step_ << "):\n";
  print_eval_table(std::cout, rows);
}

void Loop::write_summary_record() {
  Json s = Json::object();
  s["event"] = "summary";
  s["task"] = task_.name();
  s["steps"] = step_;
  s["train_seconds"] = summary_.train_seconds;
  s["tokens_per_s"] = summary_.tokens_per_second;
  s["selected_epoch"] = summary_.selected_epoch;
  s["selected_test"] = metrics_to_json(summary_.selected_test);
  s["final_test"] = metrics_to_json(summary_.final_test);
  s[task_.baseline_label()] = metrics_to_json(summary_.baseline);
  s["checkpoint"] = saved_dir_;
  s["skipped_steps"] = summary_.skipped_steps;
  if (const DataParallel* dp = task_.data_parallel()) {
    s["ranks"] = task_.comm().size();
    s["rank_work_max_over_mean"] = dp->mean_imbalance();
    s["rank_work_max_over_mean_plain"] = dp->mean_plain_imbalance();
  }
  log_->write(s);
}

// Enqueues one step. A profiled step also runs with a phase timer attached (so directly, not as
// a CUDA graph, and waited for): its phases go into the timeline on the device's clock, placed
// from the host time the step began.
int64_t Loop::timed_step(const SequenceBatch& batch, double lr) {
  const nvtx::Range range("train_step");
  ChromeTrace::Scope scope(trace_, "train_step");  // on CUDA: the time to enqueue the step
  if (!trace_.enabled()) return task_.step(batch, step_, lr);
  Ctx& ctx = task_.ctx();
  if (!phases_) phases_ = std::make_unique<PhaseTimer>(ctx.device);
  const double begin_us = trace_.now_us();
  ctx.phases = phases_.get();
  phases_->begin_step(ctx.stream);
  const int64_t tokens = task_.step(batch, step_, lr);
  phases_->end_step(ctx.stream);
  ctx.phases = nullptr;
  const bool gpu = ctx.device == Device::kCUDA;
  for (const PhaseTimer::Segment& s : phases_->last_step())
    trace_.record_on(gpu ? "GPU phases" : "CPU phases", s.name, begin_us + 1e3 * s.start_ms,
                     1e3 * s.dur_ms);
  // The gradient all-reduce buckets of a data-parallel step, on the communication stream.
  for (const PhaseTimer::Segment& s : phases_->last_spans())
    trace_.record_on(gpu ? "GPU communication stream" : "CPU communication", s.name,
                     begin_us + 1e3 * s.start_ms, 1e3 * s.dur_ms);
  return tokens;
}

// A step whose loss or gradient norm is not finite (every rank sees the same all-reduced values,
// so every rank takes the same decision here, and nothing here is collective). "error": stop,
// naming the first parameter group holding non-finite values after the step's update (a slow
// host scan, only now); "skip_step": the optimisers already applied nothing for that step on the
// device (step.h optimizer_step), so it is only reported.
void Loop::nonfinite(const StepLoss& l, RunningLoss& running) {
  const double norm = std::sqrt(l.grad_sumsq);
  if (ta_.nonfinite == "error") {
    (void)task_.drain(true);  // every queued step done before the scan
    const std::string group = first_nonfinite_tensor(task_.checkpoint_tensors(), true);
    const std::string last = !saved_dir_.empty() ? saved_dir_ : opts_.resume_dir;
    HSTU_THROW(nonfinite_error_message(l, group, ckpt_dir_, last));
  }
  ++summary_.skipped_steps;
  running.add_skipped();
  if (!root_) return;
  Json r = Json::object();
  r["event"] = "skipped_step";
  r["step"] = l.step + 1;
  r["loss"] = l.loss;
  r["grad_norm"] = norm;
  log_->write(r);
  if (!quiet_)
    std::cerr << "\nwarning: step " << l.step + 1 << " skipped: loss " << l.loss
              << ", dense gradient norm " << norm
              << " (TrainerArgs.nonfinite = \"skip_step\": no update was applied)\n";
}

// A resumed run's metrics.jsonl keeps what was logged up to the checkpoint's step (a run killed
// after its last save logged steps it will now log again) and drops the end-of-run records.
void Loop::cut_log_at_checkpoint() {
  if (!root_) return;
  const int64_t kept = log_->keep_until([&](const Json& r) {
    const std::string event = r.value("event", "");
    if (event == "summary" || event == "synthetic_oracle") return true;
    const auto s = r.find("step");
    return s != r.end() && s->is_number_integer() && s->get<int64_t>() > step_;
  });
  if (kept == 0) task_.log_setup(*log_);  // a resume into a new run folder
}

TrainSummary Loop::run() {
  load();
  if (opts_.resume_dir.empty()) {
    if (root_) task_.log_setup(*log_);
  } else {
    cut_log_at_checkpoint();
  }
  Batcher& batcher = task_.batcher();
  const int64_t per_epoch = batcher.num_batches();
  const int64_t total_steps =
      ta_.max_train_iters > 0 ? ta_.max_train_iters : ta_.num_epochs * per_epoch;
  HSTU_CHECK(step_ <= total_steps, opts_.resume_dir, ": the checkpoint is at step ", step_,
             ", beyond the ", total_steps,
             " steps of this run (TrainerArgs.num_epochs, max_train_iters)");
  LrSchedule lr_schedule(cfg_.optimizer.lr_schedule, cfg_.optimizer.learning_rate,
                         cfg_.optimizer.warmup_steps, total_steps);
  SequenceBatch host;
  const double t0 = ProgressBar::steady_seconds();
  int64_t tokens_done = 0;
  double flops_done = 0;
  const double peak_tflops = task_.ctx().device == Device::kCUDA ? cuda_bf16_peak_tflops() : 0;
  RunningLoss running;
  EpochProgress progress(quiet_, per_epoch, total_steps);
  while (step_ < total_steps) {
    const int64_t epoch = batcher.epoch();
    progress.open(epoch);
    batcher.next(host);
    trace_.set_enabled(ta_.profile && step_ >= ta_.profile_step_start &&
                       step_ < ta_.profile_step_end);
    const int64_t batch_tokens = timed_step(host, lr_schedule.lr_at(step_));
    flops_done += task_.step_flops(host);
    ++step_;
    dist::heartbeat(step_);  // the watchdog of a multi-rank job: this rank is alive
    tokens_done += batch_tokens;
    const StepEvents due = step_events(ta_, step_, total_steps, epoch, batcher.batch_index() == 0);
    // The newest step's loss and gradient norm may still be in flight on CUDA; they are waited
    // for only where the numbers are reported (log lines, epoch ends, evaluations) and before a
    // checkpoint, so no save holds a step whose health was not checked.
    for (const StepLoss& l : task_.drain(due.log || due.epoch_done || due.eval || due.checkpoint)) {
      if (!step_is_finite(l)) {
        nonfinite(l, running);
        continue;
      }
      running.add(l.loss, std::sqrt(l.grad_sumsq));
      summary_.last_loss = l.loss;
    }
    progress.update(batcher.batch_index(), batch_tokens, summary_.last_loss);
    if (due.log) {
      const double seconds = std::max(ProgressBar::steady_seconds() - t0, 1e-9);
      TrainRates rates{tokens_done / seconds, lr_schedule.lr_at(step_ - 1)};
      if (peak_tflops > 0 && flops_done > 0) rates.mfu = flops_done / seconds / 1e12 / peak_tflops;
      if (root_)
        running.write_train_line(*log_, tb_.get(), step_, epoch, rates, task_.step_metrics());
    }
    if (due.epoch_done || due.eval) progress.close();
    if (due.eval && (summary_.evals.empty() || summary_.evals.back().step != step_))
      evaluate(due.epoch_done ? epoch + 1 : epoch);
    if (due.checkpoint) save();
  }
  summary_.steps = step_;
  summary_.train_seconds = ProgressBar::steady_seconds() - t0;
  summary_.tokens_per_second = tokens_done / std::max(summary_.train_seconds, 1e-9);
  if (const DataParallel* dp = task_.data_parallel()) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "%d ranks (%s batches): max / mean rank work %.3f per step (equal-count "
                  "slices: %.3f)\n",
                  task_.comm().size(), dp->balanced() ? "balanced" : "equal-count",
                  dp->mean_imbalance(), dp->mean_plain_imbalance());
    say(line);
  }
  if (task_.ctx().device == Device::kCUDA) say(task_.graph().describe() + "\n");
  if (ta_.ckpt_save_interval == -1) {  // recsys-examples' -1: no checkpoint at all
    say("checkpoint: none (TrainerArgs.ckpt_save_interval = -1)\n");
  } else {
    if (saved_step_ != step_) save();  // unless the last step's periodic save was the last one
    say("checkpoint: " + saved_dir_ + "\n");
  }
  if (ta_.profile && root_) {
    trace_.write(ta_.run_dir + "/trace.json");
    say("timeline: " + ta_.run_dir + "/trace.json (chrome://tracing)\n");
  }
  if (!root_) return summary_;
  write_summary_record();
  task_.finish(summary_, *log_, quiet_ ? nullptr : &std::cout);
  return summary_;
}

}  // namespace

void prepare_run(const Config& cfg, const TrainOptions& opts, bool write_files) {
  const TrainerArgs& ta = cfg.trainer;
  if (ta.num_threads > 0) {
    omp_set_num_threads(static_cast<int>(ta.num_threads));
    set_cpu_blas_threads(static_cast<int>(ta.num_threads));
  }
  if (!write_files) return;
  std::filesystem::create_directories(ta.run_dir);
  if (!opts.config_text.empty()) atomic_write_file(ta.run_dir + "/config.gin", opts.config_text);
}

double metric(const NamedValues& values, const std::string& name) {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return std::numeric_limits<double>::quiet_NaN();
}

std::unique_ptr<Task> make_task(const Config& cfg, dist::Comm& comm, std::ostream* out) {
  return cfg.task == "ranking" ? make_ranking_task(cfg, comm, out)
                               : make_retrieval_task(cfg, comm, out);
}

TrainSummary train(const Config& cfg, const TrainOptions& opts) {
  // The job's ranks: given (tests), or from the launcher's environment (torchrun, SLURM,
  // mpirun, `hstu launch`); a process started alone is a 1-rank job.
  std::unique_ptr<dist::Comm> owned;
  dist::Comm* comm = opts.comm;
  if (!comm) {
    dist::OpenCommOptions o;
    o.job_hash = dist::job_hash(to_gin(cfg));
    owned = dist::open_comm(dist::read_world_env(), resolve_device(cfg.trainer.device), o);
    comm = owned.get();
  }
  prepare_run(cfg, opts, comm->is_root());
  // Every rank must train the same config (and rank 0 must have made the run folder first).
  comm->check_same(std::hash<std::string>{}(to_gin(cfg)), "the effective config");
  const bool quiet = opts.quiet || !comm->is_root();
  const std::unique_ptr<Task> task = make_task(cfg, *comm, quiet ? nullptr : &std::cout);
  return Loop(cfg, opts, *task).run();
}

}  // namespace hstu
