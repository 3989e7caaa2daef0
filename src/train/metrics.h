// metrics.h — evaluation metrics: retrieval (HR@K, NDCG@K, MRR from ranks) and ranking (exact
// ROC AUC, accuracy, log-loss, recall, precision, F1 and average precision per binary task;
// macro one-vs-rest AUC, accuracy, cross-entropy and macro recall / precision / F1 / AP for
// multi-class).
//
// Threshold metrics follow torchmetrics' Binary{Recall,Precision,F1Score} at threshold 0.5 on
// sigmoid(logit) (recsys-examples' RECALL, PRECISION, F1Score): the prediction is positive when
// sigmoid(logit) > 0.5, i.e. logit > 0 (exactly; torchmetrics compares the fp32 sigmoid, which
// rounds to 0.5 for 0 < logit < ~3e-8). Average precision is BinaryAveragePrecision(thresholds=
// None): sum over the distinct scores s, highest first, of (R(s) - R(previous)) * P(s), with
// P / R the precision / recall of "score >= s"; sigmoid is monotone, so it is computed on the
// logits. One deliberate difference, as for AUC: a value whose denominator is 0 (recall or AP
// without a positive label, precision without a positive prediction, F1 when TP + FP + FN = 0)
// is NaN, reported as undefined with a warning; torchmetrics' safe division reports 0 for
// recall, precision and F1 there (and its AP without a positive label has no meaning either).
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
  int64_t true_positives = 0, false_positives = 0;  // predicted positive: logit > 0
  double auc = 0;                                   // NaN when all labels are equal (AUC undefined)
  double accuracy = 0;           // prediction: sigmoid(logit) > 0.5, i.e. logit > 0
  double log_loss = 0;           // mean binary cross-entropy of sigmoid(logit)
  double recall = 0;             // TP / positives; NaN without a positive label
  double precision = 0;          // TP / (TP + FP); NaN without a positive prediction
  double f1 = 0;                 // 2 TP / (2 TP + FP + FN); NaN when TP + FP + FN = 0
  double average_precision = 0;  // see the top of this file; NaN without a positive label
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
  // Class c against the rest with the argmax prediction (torchmetrics' Multiclass* with top_k 1):
  // recall TP_c / samples of class c, precision TP_c / samples predicted c, F1 2TP_c / (2TP_c +
  // FP_c + FN_c), each NaN when its denominator is 0; average precision of p_c as
  // BinaryResult::average_precision (NaN without a sample of class c).
  double class_recall(int64_t c) const;
  double class_precision(int64_t c) const;
  double class_f1(int64_t c) const;
  double class_average_precision(int64_t c) const;
  // Macro means over the classes where each is defined (as auc(); torchmetrics' macro average
  // scores an undefined class 0 unless TP + FP + FN = 0 there); NaN when there is none.
  double recall() const;
  double precision() const;
  double f1() const;
  double average_precision() const;
  // {"AUC", "Accuracy", "CrossEntropy"}, each name suffixed with "/<task>" when task is not
  // empty.
  NamedValues values(const std::string& task = "") const;

 private:
  int64_t num_classes_;
  int64_t correct_ = 0;
  std::vector<double> losses_;        // per sample; summed in sorted order
  std::vector<int32_t> labels_;       // [n]
  std::vector<int32_t> predictions_;  // [n] argmax (lowest index among equal maxima)
  std::vector<double> probs_;         // [n, num_classes] softmax probabilities, row-major
  // Macro mean of f(c) over the classes where it is not NaN.
  template <class F>
  double macro(F f) const;
};

}  // namespace hstu
