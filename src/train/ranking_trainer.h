// ranking_trainer.h — the training loop of a generative RANKING run on the CPU: ranking samples
// (make_ranking_splits), the RankingModel, dense + per-table sparse optimisers, evaluation every
// N epochs on the eval split (per-task AUC, accuracy and log-loss for BCE heads; accuracy and
// cross-entropy for a multi-class head), metrics.jsonl records and the progress bar.
//
// Not yet: CUDA (refused with an error), checkpoints (save_checkpoint takes a retrieval
// HstuModel; the ranking run says so and writes none) and resume.
#pragma once

#include "config/config.h"
#include "train/trainer.h"

namespace hstu {

// Trains cfg (task = "ranking") and returns the summary: evals[i].test holds the eval split's
// metrics ("AUC/task<k>", "Accuracy/task<k>", "LogLoss/task<k>", "MeanAUC"; or "Accuracy",
// "CrossEntropy"), final_test / selected_test the last evaluation's.
TrainSummary train_ranking(const Config& cfg, const TrainOptions& opts);

}  // namespace hstu
