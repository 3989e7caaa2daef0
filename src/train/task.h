// task.h — what the one training loop (trainer.cpp) asks of a task. Retrieval
// (retrieval_task.cpp) and ranking (ranking_task.cpp) are its two implementations; make_task picks
// one from Config::task, the only place the choice is made.
//
// The split of work: a task owns its data, model, run context, training step, evaluation and
// baseline; the loop owns everything that happens around them and is the same for every task —
// the schedule, progress, metrics.jsonl, the timeline, best-epoch selection, checkpoints and
// resume. A feature of the loop (and, next, its distributed hooks) is therefore built once.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/context.h"
#include "core/step_graph.h"
#include "data/batch.h"
#include "data/batcher.h"
#include "dist/comm.h"
#include "io/metrics_log.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/step.h"
#include "train/trainer.h"

namespace hstu {

class Task {
 public:
  virtual ~Task() = default;

  // "retrieval" or "ranking": trainer_state.json's "task" (a resume must match it).
  virtual const char* name() const = 0;
  // The run's context (CPU, or the CUDA stream, BLAS state and scratch).
  virtual Ctx& ctx() = 0;
  // The job's ranks (one, or a data-parallel job's).
  virtual dist::Comm& comm() = 0;
  // How the global batches were split over the ranks (data_parallel.h); null on one rank.
  virtual const DataParallel* data_parallel() const = 0;
  // The training split's batches in the run's order (seeded per epoch, resumable).
  virtual Batcher& batcher() = 0;
  // What a checkpoint stores: the dense parameters and every embedding table.
  virtual CheckpointTensors checkpoint_tensors() = 0;
  // The fingerprint of the training data (resume_check.h dataset_fingerprint), which a
  // checkpoint stores and a resume compares.
  virtual std::string data_fingerprint() const = 0;

  // Enqueues training step `step` (0-based) on `batch` at learning rate `lr` and returns this
  // rank's token count. `batch` is the global batch (train_batch_size x ranks samples): a rank
  // trains on its share of it. On CUDA the step may still be running when this returns.
  virtual int64_t step(const SequenceBatch& batch, int64_t step, double lr) = 0;
  // The losses of finished steps, oldest first (StepStaging::drain).
  virtual std::vector<StepLoss> drain(bool wait_all) = 0;
  // Model FLOPs of the training step just enqueued on `batch` (for MFU; model/flops.h).
  virtual double step_flops(const SequenceBatch& batch) const = 0;
  // The CUDA graph of the step (its counters are printed after training).
  virtual const StepGraph& graph() const = 0;

  // Evaluates the current weights into rec.validation (left empty without a validation split)
  // and rec.test (the task's evaluation split).
  virtual void evaluate(EvalRecord& rec) = 0;
  // The eval table's row names: the evaluation split's ("test" / "eval") and the baseline's
  // ("popularity" / "baseline"; also the baseline's key in the summary record).
  virtual const char* test_label() const = 0;
  virtual const char* baseline_label() const = 0;
  // The baseline's metrics on the evaluation split, computed before training.
  virtual const NamedValues& baseline() const = 0;

  // Members the task adds to each metrics.jsonl "train" line (a dynamic item table's counters).
  virtual Json step_metrics() const { return Json::object(); }
  // Records the task writes into metrics.jsonl before the first step (ranking: its baseline).
  virtual void log_setup(MetricsLog& log) const {}
  // After training and the summary record: the task's closing report (`out` is null when
  // quiet) and its records.
  virtual void finish(const TrainSummary& summary, MetricsLog& log, std::ostream* out) const {}
};

// The task of cfg.task on the job's ranks `comm`; prints its data, model and baseline lines to
// `out` (null: quiet).
std::unique_ptr<Task> make_task(const Config& cfg, dist::Comm& comm, std::ostream* out);
std::unique_ptr<Task> make_retrieval_task(const Config& cfg, dist::Comm& comm, std::ostream* out);
std::unique_ptr<Task> make_ranking_task(const Config& cfg, dist::Comm& comm, std::ostream* out);

}  // namespace hstu
