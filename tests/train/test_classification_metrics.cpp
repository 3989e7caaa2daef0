// test_classification_metrics.cpp — recall, precision, F1 and average precision (recsys-examples'
// RECALL, PRECISION, F1Score, AVERAGE PRECISION; torchmetrics' binary metrics at threshold 0.5):
// hand-computed binary and multi-class cases with ties and a logit of exactly 0, the undefined
// cases (NaN: no positive label, no positive prediction), randomized comparisons against
// brute-force definitions, order independence, and the names RankingMetrics reports for
// RankingArgs.eval_metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "train/metrics.h"
#include "train/ranking_eval.h"

namespace hstu {
namespace {

using test::error_of;

BinaryResult binary(const std::vector<float>& logits, const std::vector<int>& labels) {
  BinaryMetrics m;
  for (size_t i = 0; i < logits.size(); ++i) m.add(logits[i], labels[i] != 0);
  return m.compute();
}

TEST(ClassificationMetrics, HandComputedBinaryCase) {
  // Predicted positive: logit > 0 (sigmoid > 0.5), so the positive at logit 0 is a false
  // negative. TP = 3 (2, 1, 0.5), FP = 1 (the negative at 1), FN = 2 (0, -1); P = 5.
  const BinaryResult r =
      binary({2.0f, 1.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f}, {1, 0, 1, 1, 1, 0, 1, 0});
  EXPECT_EQ(r.true_positives, 3);
  EXPECT_EQ(r.false_positives, 1);
  EXPECT_DOUBLE_EQ(r.recall, 3.0 / 5);
  EXPECT_DOUBLE_EQ(r.precision, 3.0 / 4);
  EXPECT_DOUBLE_EQ(r.f1, 6.0 / 9);
  // Distinct thresholds from the top, precision where recall rises: 2 -> 1/1, 1 (a tie of one
  // positive and one negative) -> 2/3, 0.5 -> 3/4, 0 -> 4/5, -1 -> 5/7; AP = their mean over the
  // 5 positives = (420 + 280 + 315 + 336 + 300) / 420 / 5.
  EXPECT_DOUBLE_EQ(r.average_precision, 1651.0 / 2100);
}

TEST(ClassificationMetrics, UndefinedWhereTheDenominatorIsZero) {
  // No positive label: recall and AP undefined; a positive prediction makes precision 0 and F1 0.
  BinaryResult r = binary({1.0f, -1.0f}, {0, 0});
  EXPECT_TRUE(std::isnan(r.recall));
  EXPECT_TRUE(std::isnan(r.average_precision));
  EXPECT_EQ(r.precision, 0.0);
  EXPECT_EQ(r.f1, 0.0);
  // No positive label and no positive prediction: only F1's TP + FP + FN = 0 is left, undefined.
  r = binary({-1.0f, 0.0f}, {0, 0});
  EXPECT_TRUE(std::isnan(r.precision));
  EXPECT_TRUE(std::isnan(r.f1));
  // Only positives, none predicted: recall 0, precision undefined, F1 0, AP 1 (every threshold
  // has precision 1).
  r = binary({-1.0f, -3.0f, -3.0f}, {1, 1, 1});
  EXPECT_EQ(r.recall, 0.0);
  EXPECT_TRUE(std::isnan(r.precision));
  EXPECT_EQ(r.f1, 0.0);
  EXPECT_EQ(r.average_precision, 1.0);
  // Nothing evaluated: all undefined.
  r = BinaryMetrics().compute();
  EXPECT_TRUE(std::isnan(r.recall) && std::isnan(r.precision) && std::isnan(r.f1) &&
              std::isnan(r.average_precision));
}

// Brute force: counts by definition; AP as the mean over positives i of the precision of
// "score >= score_i" (the step-curve sum grouped per positive), O(n^2).
struct Brute {
  double recall, precision, f1, ap;
};
template <class Score>
Brute brute(const std::vector<Score>& s, const std::vector<int>& y) {
  double tp = 0, fp = 0, fn = 0, pos = 0, ap = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    tp += y[i] && s[i] > 0;
    fp += !y[i] && s[i] > 0;
    fn += y[i] && !(s[i] > 0);
    if (!y[i]) continue;
    ++pos;
    double at = 0, pos_at = 0;
    for (size_t j = 0; j < s.size(); ++j) {
      at += s[j] >= s[i];
      pos_at += s[j] >= s[i] && y[j];
    }
    ap += pos_at / at;
  }
  const double nan = std::nan("");
  return {tp + fn > 0 ? tp / (tp + fn) : nan, tp + fp > 0 ? tp / (tp + fp) : nan,
          tp + fp + fn > 0 ? 2 * tp / (2 * tp + fp + fn) : nan, pos > 0 ? ap / pos : nan};
}

void expect_same(double got, double want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
  } else {
    EXPECT_NEAR(got, want, 1e-12) << what;
  }
}

TEST(ClassificationMetrics, BinaryMatchesBruteForceOnRandomData) {
  std::mt19937 rng(19);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 60;
    const int levels = 1 + static_cast<int>(rng() % 9);  // few levels: many ties, logit 0 often
    const double p_pos = (rng() % 5) / 4.0;              // includes all-negative / all-positive
    std::vector<float> s(n);
    std::vector<int> y(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(static_cast<int>(rng() % levels) - levels / 2) * 0.5f;
      y[i] = std::uniform_real_distribution<double>(0, 1)(rng) < p_pos;
    }
    const BinaryResult r = binary(s, y);
    const Brute b = brute(s, y);
    const std::string at = "trial " + std::to_string(trial);
    expect_same(r.recall, b.recall, at + " recall");
    expect_same(r.precision, b.precision, at + " precision");
    expect_same(r.f1, b.f1, at + " F1");
    expect_same(r.average_precision, b.ap, at + " AP");
  }
}

TEST(ClassificationMetrics, OrderAndMergeDoNotChangeResults) {
  std::mt19937 rng(7);
  std::vector<std::pair<float, int>> d(3000);
  for (auto& [s, y] : d) {
    s = static_cast<float>(static_cast<int>(rng() % 41) - 20) / 8.0f;
    y = static_cast<int>(rng() % 3 == 0);
  }
  BinaryMetrics a, b, c;
  for (const auto& [s, y] : d) a.add(s, y != 0);
  std::shuffle(d.begin(), d.end(), rng);
  for (size_t i = 0; i < d.size(); ++i) (i % 2 ? b : c).add(d[i].first, d[i].second != 0);
  b.merge(c);
  const BinaryResult x = a.compute(), z = b.compute();
  EXPECT_EQ(x.recall, z.recall);
  EXPECT_EQ(x.precision, z.precision);
  EXPECT_EQ(x.f1, z.f1);
  EXPECT_EQ(x.average_precision, z.average_precision);  // bit-identical
}

TEST(ClassificationMetrics, HandComputedMulticlassMacro) {
  // 4 classes; class 3 is never a label nor a prediction (all undefined: left out of the macros).
  MulticlassMetrics m(4);
  m.add(std::vector<float>{2, 0, 0, -5}, 0);  // predicted 0
  m.add(std::vector<float>{0, 2, 0, -5}, 0);  // predicted 1
  m.add(std::vector<float>{0, 0, 2, -5}, 2);  // predicted 2
  m.add(std::vector<float>{2, 0, 0, -5}, 2);  // predicted 0
  m.add(std::vector<float>{0, 2, 1, -5}, 1);  // predicted 1
  // class 0: TP 1, FP 1, FN 1; class 1: TP 1, FP 1, FN 0; class 2: TP 1, FP 0, FN 1.
  EXPECT_DOUBLE_EQ(m.class_recall(0), 0.5);
  EXPECT_DOUBLE_EQ(m.class_recall(1), 1.0);
  EXPECT_DOUBLE_EQ(m.class_precision(2), 1.0);
  EXPECT_DOUBLE_EQ(m.class_f1(1), 2.0 / 3);
  EXPECT_TRUE(std::isnan(m.class_recall(3)));
  EXPECT_TRUE(std::isnan(m.class_precision(3)));
  EXPECT_TRUE(std::isnan(m.class_f1(3)));
  EXPECT_TRUE(std::isnan(m.class_average_precision(3)));
  EXPECT_DOUBLE_EQ(m.recall(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.precision(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.f1(), 11.0 / 18);
  // p_1 is highest for sample 2 (row {0, 2, 0}, label 0), then sample 5 ({0, 2, 1}, the one
  // label 1): the positive comes at precision 1/2.
  EXPECT_DOUBLE_EQ(m.class_average_precision(1), 0.5);
  EXPECT_NE(error_of([&] { (void)m.class_recall(4); }).find("class 4 out of [0, 4)"),
            std::string::npos);
}

TEST(ClassificationMetrics, MulticlassMatchesBruteForceOnRandomData) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t k = 2 + static_cast<int64_t>(rng() % 5);
    const size_t n = 1 + rng() % 40;
    MulticlassMetrics m(k);
    std::vector<std::vector<float>> x(n, std::vector<float>(static_cast<size_t>(k)));
    std::vector<int> y(n);
    for (size_t i = 0; i < n; ++i) {
      for (float& v : x[i]) v = static_cast<float>(rng() % 4);  // ties in the argmax
      y[i] = static_cast<int>(rng() % static_cast<unsigned>(k - (trial % 2)));  // some unseen
      m.add(x[i], y[i]);
    }
    for (int64_t c = 0; c < k; ++c) {
      // Class c against the rest: the argmax (lowest index among maxima) as the prediction,
      // encoded as a logit of +1 / -1, and p_c for AP (all thresholds >= it count).
      std::vector<float> pred(n);
      std::vector<double> prob(n);
      std::vector<int> yc(n);
      for (size_t i = 0; i < n; ++i) {
        const auto best = std::max_element(x[i].begin(), x[i].end()) - x[i].begin();
        pred[i] = best == c ? 1.0f : -1.0f;
        // p_c with the metric's own operations (exp of x - max, summed in class order), so
        // rows whose probabilities tie in exact arithmetic tie or not alike.
        const double mx = *std::max_element(x[i].begin(), x[i].end());
        double sum = 0;
        for (float v : x[i]) sum += std::exp(static_cast<double>(v) - mx);
        prob[i] = std::exp(static_cast<double>(x[i][static_cast<size_t>(c)]) - mx) / sum;
        yc[i] = y[i] == c;
      }
      const Brute b = brute(pred, yc);
      const std::string at = "trial " + std::to_string(trial) + " class " + std::to_string(c);
      expect_same(m.class_recall(c), b.recall, at + " recall");
      expect_same(m.class_precision(c), b.precision, at + " precision");
      expect_same(m.class_f1(c), b.f1, at + " F1");
      expect_same(m.class_average_precision(c), brute(prob, yc).ap, at + " AP");
    }
  }
}

TEST(RankingMetrics, EvalMetricsSelectTheExtraColumns) {
  const std::vector<std::string> sel = {"AUC",     "AVERAGE PRECISION", "RECALL", "AP",
                                        "F1Score", "PRECISION",         "ACC",    "LogLoss"};
  const std::vector<RankingExtra> extras = ranking_extra_metrics(sel);
  EXPECT_EQ(extras, (std::vector<RankingExtra>{RankingExtra::kAP, RankingExtra::kRecall,
                                               RankingExtra::kF1, RankingExtra::kPrecision}));
  RankingMetrics bin(true, 2, extras);
  bin.add(std::vector<float>{1, -1}, 1);
  bin.add(std::vector<float>{-1, 1}, 0);  // task 1: no positive label
  const NamedValues v = bin.values();
  std::vector<std::string> names;
  for (const auto& [n, x] : v) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"AUC/task0", "Accuracy/task0", "LogLoss/task0", "AP/task0",
                                      "Recall/task0", "F1/task0", "Precision/task0", "AUC/task1",
                                      "Accuracy/task1", "LogLoss/task1", "AP/task1", "Recall/task1",
                                      "F1/task1", "Precision/task1", "MeanAUC"}));
  EXPECT_EQ(v[3].second, 1.0);  // task 0: AP 1, recall 1, F1 1, precision 1
  EXPECT_EQ(v[6].second, 1.0);
  EXPECT_TRUE(std::isnan(v[10].second));  // task 1: AP and recall undefined
  EXPECT_TRUE(std::isnan(v[11].second));
  EXPECT_EQ(v[12].second, 0.0);  // F1 = 0 / (0 + 1 + 0)
  EXPECT_EQ(v[13].second, 0.0);  // precision 0 / 1

  RankingMetrics ce(false, 3, {RankingExtra::kRecall});
  ce.add(std::vector<float>{3, 0, 0}, 0);
  ce.add(std::vector<float>{0, 3, 0}, 2);
  const NamedValues w = ce.values();
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[3].first, "Recall/task0");
  EXPECT_DOUBLE_EQ(w[3].second, 0.5);  // class 0: 1, class 2: 0, class 1: no label (left out)
  EXPECT_NE(error_of([] {
              ranking_extra_metrics(std::vector<std::string>{"NDCG"});
            }).find("RankingArgs.eval_metrics: unknown metric 'NDCG'"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
