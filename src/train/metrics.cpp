// metrics.cpp — retrieval metrics from a rank histogram, exact AUC and average precision by
// sorting, threshold metrics from counts, multi-class scores.
#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace hstu {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// log(1 + exp(z)) without overflow or loss of precision for large |z|.
double softplus(double z) {
  return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z)));
}

// Exact ROC AUC of (score, label) pairs sorted ascending by score; NaN without a positive or a
// negative. Twice the Mann-Whitney U is an exact integer, so no rounding depends on the order.
template <class Score>
double auc_from_sorted(const std::vector<std::pair<Score, uint8_t>>& s) {
  uint64_t negatives_below = 0, two_u = 0, positives = 0;
  for (size_t i = 0; i < s.size();) {
    uint64_t pos = 0, neg = 0;
    size_t j = i;
    for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? pos : neg) += 1;
    // Positives in this tie group beat every negative below it and half of those beside it.
    two_u += 2 * pos * negatives_below + pos * neg;
    negatives_below += neg;
    positives += pos;
    i = j;
  }
  const uint64_t neg = s.size() - positives;
  return positives == 0 || neg == 0
             ? kNaN
             : static_cast<double>(two_u) /
                   (2.0 * static_cast<double>(positives) * static_cast<double>(neg));
}

// Average precision of (score, label) pairs sorted ascending; NaN without a positive. Walking the
// distinct scores from the highest, a group of `pos` positives raises recall by pos / P at the
// precision tp / (tp + fp) of "score >= this one", so AP = sum of pos * precision / P.
template <class Score>
double ap_from_sorted(const std::vector<std::pair<Score, uint8_t>>& s) {
  uint64_t tp = 0, fp = 0;
  double sum = 0;
  for (size_t j = s.size(); j > 0;) {
    uint64_t pos = 0, neg = 0;
    size_t i = j;
    for (; i > 0 && s[i - 1].first == s[j - 1].first; --i) (s[i - 1].second ? pos : neg) += 1;
    tp += pos;
    fp += neg;
    if (pos > 0)
      sum += static_cast<double>(pos) * static_cast<double>(tp) / static_cast<double>(tp + fp);
    j = i;
  }
  return tp == 0 ? kNaN : sum / static_cast<double>(tp);
}

// n / d, NaN when d = 0 (the metric is undefined).
double ratio(uint64_t n, uint64_t d) {
  return d == 0 ? kNaN : static_cast<double>(n) / static_cast<double>(d);
}

// AUC, accuracy, log-loss and the threshold metrics of (logit, label) pairs sorted ascending.
BinaryResult binary_from_sorted(const std::vector<std::pair<float, uint8_t>>& s) {
  BinaryResult r;
  r.count = static_cast<int64_t>(s.size());
  uint64_t correct = 0, tp = 0, fp = 0;
  double loss = 0;
  for (size_t i = 0; i < s.size();) {
    uint64_t pos = 0, neg = 0;
    size_t j = i;
    for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? pos : neg) += 1;
    const double x = s[i].first;
    correct += x > 0 ? pos : neg;
    if (x > 0) tp += pos, fp += neg;
    loss += static_cast<double>(pos) * softplus(-x) + static_cast<double>(neg) * softplus(x);
    r.positives += static_cast<int64_t>(pos);
    i = j;
  }
  r.auc = auc_from_sorted(s);
  r.accuracy = s.empty() ? kNaN : static_cast<double>(correct) / static_cast<double>(s.size());
  r.log_loss = s.empty() ? kNaN : loss / static_cast<double>(s.size());
  const uint64_t fn = static_cast<uint64_t>(r.positives) - tp;
  r.true_positives = static_cast<int64_t>(tp);
  r.false_positives = static_cast<int64_t>(fp);
  r.recall = ratio(tp, tp + fn);
  r.precision = ratio(tp, tp + fp);
  r.f1 = ratio(2 * tp, 2 * tp + fp + fn);
  r.average_precision = ap_from_sorted(s);
  return r;
}

}  // namespace

// ---- retrieval
// -----------------------------------------------------------------------------------

RetrievalMetrics::RetrievalMetrics(std::vector<int64_t> ks) : ks_(std::move(ks)) {
  for (int64_t k : ks_) HSTU_CHECK(k >= 1, "retrieval metric cutoff K = ", k, " must be >= 1");
}

void RetrievalMetrics::add(int64_t rank) {
  HSTU_CHECK(rank >= 1, "retrieval rank ", rank, " must be >= 1 (ranks are 1-based)");
  ++rank_counts_[rank];
  ++count_;
}

void RetrievalMetrics::merge(const RetrievalMetrics& other) {
  HSTU_CHECK(ks_ == other.ks_, "merging retrieval metrics with different cutoffs");
  for (const auto& [rank, n] : other.rank_counts_) rank_counts_[rank] += n;
  count_ += other.count_;
}

double RetrievalMetrics::hr(int64_t k) const {
  if (count_ == 0) return kNaN;
  int64_t hits = 0;
  for (auto it = rank_counts_.begin(); it != rank_counts_.end() && it->first <= k; ++it)
    hits += it->second;
  return static_cast<double>(hits) / static_cast<double>(count_);
}

double RetrievalMetrics::ndcg(int64_t k) const {
  if (count_ == 0) return kNaN;
  double sum = 0;
  for (auto it = rank_counts_.begin(); it != rank_counts_.end() && it->first <= k; ++it)
    sum += static_cast<double>(it->second) / std::log2(static_cast<double>(it->first) + 1.0);
  return sum / static_cast<double>(count_);
}

double RetrievalMetrics::mrr() const {
  if (count_ == 0) return kNaN;
  double sum = 0;
  for (const auto& [rank, n] : rank_counts_)
    sum += static_cast<double>(n) / static_cast<double>(rank);
  return sum / static_cast<double>(count_);
}

NamedValues RetrievalMetrics::values() const {
  NamedValues v;
  for (int64_t k : ks_) v.emplace_back("HR@" + std::to_string(k), hr(k));
  for (int64_t k : ks_) v.emplace_back("NDCG@" + std::to_string(k), ndcg(k));
  v.emplace_back("MRR", mrr());
  return v;
}

NamedValues RetrievalMetrics::values(const std::vector<std::string>& selected) const {
  NamedValues v;
  auto has = [&v](const std::string& name) {
    return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
  };
  for (const std::string& name : selected) {
    if (has(name)) continue;
    if (name == "MRR") {
      v.emplace_back(name, mrr());
      continue;
    }
    const size_t at = name.find('@');
    const std::string kind = name.substr(0, at),
                      k_text = at == std::string::npos ? "" : name.substr(at + 1);
    const bool k_ok = !k_text.empty() && k_text.size() < 10 && k_text[0] != '0' &&
                      k_text.find_first_not_of("0123456789") == std::string::npos;
    HSTU_CHECK((kind == "HR" || kind == "NDCG") && k_ok,
               "RetrievalArgs.eval_metrics: unknown metric '", name,
               "' (HR@K, NDCG@K with K >= 1, or MRR)");
    const int64_t k = std::stoll(k_text);
    v.emplace_back(name, kind == "HR" ? hr(k) : ndcg(k));
  }
  for (auto& [name, value] : values())
    if (!has(name)) v.emplace_back(name, value);
  return v;
}

// ---- binary ------------------------------------------------------------------------------------

NamedValues BinaryResult::values(const std::string& task) const {
  const std::string suffix = task.empty() ? "" : "/" + task;
  return {{"AUC" + suffix, auc}, {"Accuracy" + suffix, accuracy}, {"LogLoss" + suffix, log_loss}};
}

double roc_auc(std::span<const float> scores, std::span<const uint8_t> labels) {
  HSTU_CHECK(scores.size() == labels.size(), "roc_auc: ", scores.size(), " scores but ",
             labels.size(), " labels");
  std::vector<std::pair<float, uint8_t>> s(scores.size());
  for (size_t i = 0; i < s.size(); ++i) {
    HSTU_CHECK(!std::isnan(scores[i]), "roc_auc: score ", i, " is NaN");
    HSTU_CHECK(labels[i] <= 1, "roc_auc: label ", i, " is ", int(labels[i]), ", not 0 or 1");
    s[i] = {scores[i], labels[i]};
  }
  std::sort(s.begin(), s.end());
  return binary_from_sorted(s).auc;
}

void BinaryMetrics::add(float logit, bool label) {
  HSTU_CHECK(!std::isnan(logit), "binary metrics: NaN logit (did training diverge?)");
  samples_.emplace_back(logit, static_cast<uint8_t>(label));
}

void BinaryMetrics::merge(const BinaryMetrics& other) {
  samples_.insert(samples_.end(), other.samples_.begin(), other.samples_.end());
}

BinaryResult BinaryMetrics::compute() const {
  std::vector<std::pair<float, uint8_t>> s = samples_;
  std::sort(s.begin(), s.end());
  return binary_from_sorted(s);
}

// ---- multi-class -------------------------------------------------------------------------------

MulticlassMetrics::MulticlassMetrics(int64_t num_classes) : num_classes_(num_classes) {
  HSTU_CHECK(num_classes >= 2, "multi-class metrics need >= 2 classes, got ", num_classes);
}

void MulticlassMetrics::add(std::span<const float> logits, int64_t label) {
  HSTU_CHECK(static_cast<int64_t>(logits.size()) == num_classes_,
             "multi-class metrics: ", logits.size(), " logits for ", num_classes_, " classes");
  HSTU_CHECK(label >= 0 && label < num_classes_, "multi-class label ", label, " out of [0, ",
             num_classes_, ")");
  size_t best = 0;
  for (size_t c = 0; c < logits.size(); ++c) {
    HSTU_CHECK(std::isfinite(logits[c]), "multi-class metrics: logit ", logits[c],
               " (did training diverge?)");
    if (logits[c] > logits[best]) best = c;
  }
  double sum = 0;
  const double max = logits[best];
  const size_t row = probs_.size();
  for (float x : logits) {
    probs_.push_back(std::exp(static_cast<double>(x) - max));
    sum += probs_.back();
  }
  for (size_t c = 0; c < logits.size(); ++c) probs_[row + c] /= sum;
  losses_.push_back(max + std::log(sum) - static_cast<double>(logits[static_cast<size_t>(label)]));
  labels_.push_back(static_cast<int32_t>(label));
  predictions_.push_back(static_cast<int32_t>(best));
  correct_ += static_cast<int64_t>(best) == label;
}

void MulticlassMetrics::merge(const MulticlassMetrics& other) {
  HSTU_CHECK(num_classes_ == other.num_classes_, "merging multi-class metrics of ", num_classes_,
             " and ", other.num_classes_, " classes");
  correct_ += other.correct_;
  losses_.insert(losses_.end(), other.losses_.begin(), other.losses_.end());
  labels_.insert(labels_.end(), other.labels_.begin(), other.labels_.end());
  predictions_.insert(predictions_.end(), other.predictions_.begin(), other.predictions_.end());
  probs_.insert(probs_.end(), other.probs_.begin(), other.probs_.end());
}

double MulticlassMetrics::accuracy() const {
  return losses_.empty() ? kNaN : static_cast<double>(correct_) / static_cast<double>(count());
}

double MulticlassMetrics::cross_entropy() const {
  if (losses_.empty()) return kNaN;
  std::vector<double> s = losses_;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double l : s) sum += l;
  return sum / static_cast<double>(s.size());
}

double MulticlassMetrics::class_auc(int64_t c) const {
  HSTU_CHECK(c >= 0 && c < num_classes_, "multi-class AUC of class ", c, " out of [0, ",
             num_classes_, ")");
  std::vector<std::pair<double, uint8_t>> s(labels_.size());  // (p_c, label == c)
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = {probs_[i * static_cast<size_t>(num_classes_) + static_cast<size_t>(c)],
            static_cast<uint8_t>(labels_[i] == c)};
  std::sort(s.begin(), s.end());
  return auc_from_sorted(s);
}

template <class F>
double MulticlassMetrics::macro(F f) const {
  double sum = 0;
  int64_t defined = 0;
  for (int64_t c = 0; c < num_classes_; ++c) {
    const double a = f(c);
    if (std::isnan(a)) continue;  // undefined for this class: left out (see the header)
    sum += a;
    ++defined;
  }
  return defined == 0 ? kNaN : sum / static_cast<double>(defined);
}

double MulticlassMetrics::auc() const {
  return macro([this](int64_t c) { return class_auc(c); });
}

namespace {
// TP, FP, FN of class c against the rest under the argmax predictions.
struct ClassCounts {
  uint64_t tp = 0, fp = 0, fn = 0;
};
ClassCounts class_counts(const std::vector<int32_t>& labels, const std::vector<int32_t>& pred,
                         int64_t c, int64_t num_classes) {
  HSTU_CHECK(c >= 0 && c < num_classes, "multi-class metric of class ", c, " out of [0, ",
             num_classes, ")");
  ClassCounts k;
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool y = labels[i] == c, p = pred[i] == c;
    k.tp += y && p;
    k.fp += !y && p;
    k.fn += y && !p;
  }
  return k;
}
}  // namespace

double MulticlassMetrics::class_recall(int64_t c) const {
  const ClassCounts k = class_counts(labels_, predictions_, c, num_classes_);
  return ratio(k.tp, k.tp + k.fn);
}

double MulticlassMetrics::class_precision(int64_t c) const {
  const ClassCounts k = class_counts(labels_, predictions_, c, num_classes_);
  return ratio(k.tp, k.tp + k.fp);
}

double MulticlassMetrics::class_f1(int64_t c) const {
  const ClassCounts k = class_counts(labels_, predictions_, c, num_classes_);
  return ratio(2 * k.tp, 2 * k.tp + k.fp + k.fn);
}

double MulticlassMetrics::class_average_precision(int64_t c) const {
  HSTU_CHECK(c >= 0 && c < num_classes_, "multi-class average precision of class ", c,
             " out of [0, ", num_classes_, ")");
  std::vector<std::pair<double, uint8_t>> s(labels_.size());  // (p_c, label == c)
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = {probs_[i * static_cast<size_t>(num_classes_) + static_cast<size_t>(c)],
            static_cast<uint8_t>(labels_[i] == c)};
  std::sort(s.begin(), s.end());
  return ap_from_sorted(s);
}

double MulticlassMetrics::recall() const {
  return macro([this](int64_t c) { return class_recall(c); });
}
double MulticlassMetrics::precision() const {
  return macro([this](int64_t c) { return class_precision(c); });
}
double MulticlassMetrics::f1() const {
  return macro([this](int64_t c) { return class_f1(c); });
}
double MulticlassMetrics::average_precision() const {
  return macro([this](int64_t c) { return class_average_precision(c); });
}

NamedValues MulticlassMetrics::values(const std::string& task) const {
  const std::string suffix = task.empty() ? "" : "/" + task;
  return {{"AUC" + suffix, auc()},
          {"Accuracy" + suffix, accuracy()},
          {"CrossEntropy" + suffix, cross_entropy()}};
}

}  // namespace hstu
