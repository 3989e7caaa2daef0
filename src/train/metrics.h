// metrics.h — evaluation metrics: retrieval (HR@K, NDCG@K, MRR from ranks) and ranking (exact
// ROC AUC, accuracy and log-loss per binary task; macro one-vs-rest AUC, accuracy and
// cross-entropy for multi-class).
//
// Results never depend on the order samples arrive in (or on how partial accumulators are
// merged): retrieval keeps a histogram of ranks and sums it in rank order, binary metrics sort
// the (score, label) pairs and compute everything from the sorted list, multi-class sums sorted
// per-sample losses and sorts each class's (probability, label) pairs for its AUC; so a
// multi-threaded or multi-rank evaluation reports bit-identical numbers.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hstu {

using NamedValues = std::vector<std::pair<std::string, double>>;

// Leave-one-out retrieval metrics over 1-based ranks. The rank cap is the caller's: a rank past
// the cap arrives as cap + 1 and counts like any other rank.
class RetrievalMetrics {
 public:
  explicit RetrievalMetrics(std::vector<int64_t> ks = {1, 10, 50, 200});

  void add(int64_t rank);
  void merge(const RetrievalMetrics& other);
  int64_t count() const { return count_; }
  const std::vector<int64_t>& ks() const { return ks_; }

  // Averages over samples (NaN before the first sample); k need not be one of ks().
  double hr(int64_t k) const;    // mean [rank <= k]
  double ndcg(int64_t k) const;  // mean 1/log2(rank + 1) if rank <= k else 0
  double mrr() const;            // mean 1/rank
  // HR@k for each k, then NDCG@k for each k, then MRR.
  NamedValues values() const;
  // The metrics `selected` names ("HR@K", "NDCG@K" at any K >= 1, "MRR"; RetrievalArgs.
  // eval_metrics), in its order, then those of values() not among them (the headline and the
  // best-epoch choice read HR@10 / NDCG@10). An unknown name is an error naming it.
  NamedValues values(const std::vector<std::string>& selected) const;

 private:
  std::vector<int64_t> ks_;
  std::map<int64_t, int64_t> rank_counts_;  // rank -> samples
  int64_t count_ = 0;
};

struct BinaryResult {
  int64_t count = 0, positives = 0;
  double auc = 0;       // NaN when all labels are equal (AUC undefined)
  double accuracy = 0;  // prediction: sigmoid(logit) > 0.5, i.e. logit > 0
  double log_loss = 0;  // mean binary cross-entropy of sigmoid(logit)
  // {"AUC", "Accuracy", "LogLoss"}, each name suffixed with "/<task>" when task is not empty.
  NamedValues values(const std::string& task = "") const;
};

// Exact ROC AUC: the probability that a random positive scores above a random negative, ties
// counting 1/2 (the Mann-Whitney U statistic with average ranks). NaN scores are an error.
double roc_auc(std::span<const float> scores, std::span<const uint8_t> labels);

// One binary task's (logit, label) pairs; compute() is O(n log n).
class BinaryMetrics {
 public:
  void add(float logit, bool label);
  void merge(const BinaryMetrics& other);
  int64_t count() const { return static_cast<int64_t>(samples_.size()); }
  BinaryResult compute() const;

 private:
  std::vector<std::pair<float, uint8_t>> samples_;  // (logit, label)
};

// Single-label multi-class classification from logits.
//
// auc() is torchmetrics' MulticlassAUROC(average="macro", thresholds=None), which recsys-examples
// uses for its 10-class MovieLens head: for each class c the exact binary ROC AUC of the softmax
// probability p_c (computed in double from the logits) with "label == c" as the positive class,
// ties counting 1/2, then the unweighted mean over classes. One deliberate difference: a class
// with no positive (or no negative) sample among the evaluated ones has no defined AUC and is
// left out of the mean (class_auc() is NaN for it); torchmetrics instead warns and scores such a
// class 0 (its TPR/FPR curve is set to zeros), which drags the macro mean down by an amount that
// depends only on which classes happen to be absent.
class MulticlassMetrics {
 public:
  explicit MulticlassMetrics(int64_t num_classes);

  void add(std::span<const float> logits, int64_t label);  // logits: [num_classes]
  void merge(const MulticlassMetrics& other);
  int64_t num_classes() const { return num_classes_; }
  int64_t count() const { return static_cast<int64_t>(losses_.size()); }
  double accuracy() const;       // argmax (lowest index among equal maxima) == label
  double cross_entropy() const;  // mean -log softmax(logits)[label]
  // One-vs-rest AUC of class c on softmax probabilities; NaN when c has no positive or no
  // negative sample. O(n log n).
  double class_auc(int64_t c) const;
  // Macro mean of class_auc over the classes where it is defined; NaN when there is none.
  double auc() const;
  // {"AUC", "Accuracy", "CrossEntropy"}, each name suffixed with "/<task>" when task is not
  // empty.
  NamedValues values(const std::string& task = "") const;

 private:
  int64_t num_classes_;
  int64_t correct_ = 0;
  std::vector<double> losses_;   // per sample; summed in sorted order
  std::vector<int32_t> labels_;  // [n]
  std::vector<double> probs_;    // [n, num_classes] softmax probabilities, row-major
};

}  // namespace hstu
