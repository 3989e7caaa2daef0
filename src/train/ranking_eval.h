// ranking_eval.h — evaluation of a ranking head over candidate rows: RankingMetrics (the one
// metric code that scores both the model and the logistic baseline, ranking_baseline.h) and
// evaluate_ranking (the model's pass over an eval split).
//
// Shapes: a head has K = prediction_head_arch.back() outputs per candidate, logits [N, K] over
// the N candidates of a batch (sample order, then candidate order). The label of a candidate is
// what RankingModel::labels() holds: a bitmask for a BCE head (bit t = task t), a class in
// [0, K) for a cross-entropy head.
//
// Metric names follow the repository's "<metric>/task<t>" style (recsys-examples prints the same
// thing as task<t>.AUC):
//   BCE head (K tasks)        AUC/task<t>, Accuracy/task<t>, LogLoss/task<t> for t < K, then
//                             MeanAUC (mean of the defined per-task AUCs)
//   cross-entropy head (one   AUC/task0 (macro one-vs-rest AUC on softmax probabilities, as
//   task, K classes)          torchmetrics' MulticlassAUROC; see MulticlassMetrics),
//                             Accuracy/task0, CrossEntropy/task0, then MeanAUC (= AUC/task0)
// so "MeanAUC" is the headline number of either head. The extras RankingArgs.eval_metrics selects
// follow each task's three (in the order selected): Recall/task<t>, Precision/task<t>,
// F1/task<t>, AP/task<t> (metrics.h: binary at threshold 0.5, or macro over the classes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "data/dataset.h"
#include "data/ranking.h"
#include "dist/comm.h"
#include "model/ranking_model.h"
#include "train/item_window.h"
#include "train/metrics.h"

namespace hstu {

// Classification metrics that RankingArgs.eval_metrics adds to the always-reported AUC, Accuracy
// and LogLoss (recsys-examples' MetricType names: RECALL, PRECISION, F1Score, AVERAGE
// PRECISION).
enum class RankingExtra { kRecall, kPrecision, kF1, kAP };

// The extras `eval_metrics` (RankingArgs.eval_metrics) selects, in its order, each once: "RECALL",
// "PRECISION", "F1Score", "AP" or "AVERAGE PRECISION"; "AUC", "ACC" and "LogLoss" add nothing
// (always reported). An unknown name is an error naming RankingArgs.eval_metrics.
std::vector<RankingExtra> ranking_extra_metrics(std::span<const std::string> eval_metrics);

// Accumulates (logits, label) of candidates for one ranking head; the result never depends on
// the order candidates arrive in (metrics.h).
class RankingMetrics {
 public:
  // binary: BCE head with num_outputs tasks; else cross-entropy over num_outputs (>= 2) classes.
  // extras: the metrics reported after each task's three (ranking_extra_metrics).
  RankingMetrics(bool binary, int64_t num_outputs, std::vector<RankingExtra> extras = {});

  // logits: [num_outputs] of one candidate; label: bitmask (binary) or class.
  void add(std::span<const float> logits, int32_t label);
  int64_t count() const { return count_; }
  // The names listed at the top of this file.
  NamedValues values() const;

 private:
  bool binary_;
  int64_t num_outputs_;
  std::vector<RankingExtra> extras_;
  int64_t count_ = 0;
  std::vector<BinaryMetrics> tasks_;  // [K] (BCE head)
  MulticlassMetrics multi_;           // unused (2 classes) for a BCE head
};

// The model's metrics on `split`, batches of batch_size samples in sample order, the first
// max_iters batches only when max_iters > 0 (so the first min(n, max_iters * batch_size)
// samples). Forward without dropout (RankingModel::predict). With a communicator of W ranks,
// rank r scores batches r, r + W, ... and every rank returns the metrics of all of them, equal
// to a single process's. `items`: the model's item table when it is a window (a row-sharded
// table: every rank fetches once per round of W batches, a rank without a batch fetching none).
// extras: as RankingMetrics'.
NamedValues evaluate_ranking(Ctx& ctx, RankingModel& model, const SequenceDataset& ds,
                             const RankingSplit& split, int64_t batch_size, int64_t max_iters,
                             dist::Comm* comm = nullptr, ItemWindow* items = nullptr,
                             std::vector<RankingExtra> extras = {});

// How many samples of `split` evaluate_ranking scores with these arguments.
int64_t ranking_eval_samples(const RankingSplit& split, int64_t batch_size, int64_t max_iters);

}  // namespace hstu
