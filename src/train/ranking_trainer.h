// ranking_trainer.h — the training loop of a generative RANKING run (CPU, or CUDA in bf16): ranking
// samples (make_ranking_splits), the RankingModel, dense + per-table sparse optimisers, evaluation
// every N epochs / eval_interval steps on the eval split (ranking_eval.h: per-task AUC, accuracy
// and log-loss for BCE heads; macro one-vs-rest AUC, accuracy and cross-entropy for a multi-class
// head), a logistic baseline scored on the same candidates by the same metric code
// (ranking_baseline.h; printed beside every eval), metrics.jsonl records, the progress bar and
// checkpoints (every ckpt_save_interval steps and at the end: dense parameters, the item /
// action / contextual tables and their optimiser state; `--resume` continues bit-exactly on the
// CPU, TrainerArgs.ckpt_load_dir loads weights only).
#pragma once

#include "config/config.h"
#include "train/trainer.h"

namespace hstu {

// Trains cfg (task = "ranking") and returns the summary: evals[i].test holds the eval split's
// metrics ("AUC/task<k>", "Accuracy/task<k>", "LogLoss/task<k>", "MeanAUC"; or "AUC/task0",
// "Accuracy/task0", "CrossEntropy/task0", "MeanAUC"), final_test / selected_test the last
// evaluation's, and `baseline` the logistic baseline's metrics.
// metrics.jsonl gets a "baseline" event (metrics and coefficients) before training and the
// baseline's metrics under "baseline" in the summary record.
TrainSummary train_ranking(const Config& cfg, const TrainOptions& opts);

}  // namespace hstu
