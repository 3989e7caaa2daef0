// trainer.h — the training loop of every run, retrieval or ranking (the task, task.h): periodic
// evaluation with best-epoch selection, metrics.jsonl, progress display, the timeline
// (TrainerArgs.profile), checkpoints and resume.
//
// Everything a resumed run needs is a pure function of what the checkpoint stores: batch order
// is a function of (seed, epoch), dropout and negatives of (seed, step), so N steps straight and
// N/2 + save + resume + N/2 give bit-identical weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/comm.h"
#include "train/metrics.h"

namespace hstu {

struct TrainOptions {
  std::string resume_dir;   // checkpoint folder to continue from ("" = fresh run)
  std::string config_text;  // the effective config in gin syntax (saved into the run)
  bool quiet = false;       // no progress bar / tables (tests)
  // --allow-config-change: resume although settings that alter the trajectory differ from the
  // checkpoint's (each difference is printed); resume_check.h.
  bool allow_config_change = false;
  // The job's ranks (dist/comm.h) for data-parallel training; null = this process alone.
  dist::Comm* comm = nullptr;
};

struct EvalRecord {
  int64_t epoch = 0, step = 0;
  NamedValues validation, test;
};

struct TrainSummary {
  std::vector<EvalRecord> evals;
  NamedValues baseline;       // the task's baseline on the test split: item popularity
                              // (retrieval) or the logistic regression (ranking_baseline.h)
  NamedValues final_test;     // test metrics of the last evaluation
  NamedValues selected_test;  // test metrics at the best validation epoch (or the last)
  int64_t selected_epoch = -1;
  int64_t steps = 0;
  double train_seconds = 0, tokens_per_second = 0;
  double last_loss = 0;
  int64_t skipped_steps = 0;  // steps not applied as non-finite (TrainerArgs.nonfinite)
};

// Trains `cfg` (its task: cfg.task) to completion (or max_train_iters) and returns the summary;
// prints progress unless opts.quiet. Ranking runs: evals[i].test holds the eval split's metrics
// (ranking_eval.h), `baseline` the logistic baseline's, and metrics.jsonl gets a "baseline"
// event before training.
TrainSummary train(const Config& cfg, const TrainOptions& opts);

// Run setup shared by both tasks: CPU threads, and (write_files: rank 0) the run directory and
// its config.gin.
void prepare_run(const Config& cfg, const TrainOptions& opts, bool write_files = true);

// Looks up a metric by name (NaN if absent).
double metric(const NamedValues& values, const std::string& name);

}  // namespace hstu
