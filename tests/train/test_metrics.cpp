// test_metrics.cpp — retrieval metrics on hand-computed ranks, AUC on a hand-computed case with
// ties and against an O(n^2) pair count, accuracy/log-loss, multi-class (accuracy, cross-entropy,
// macro one-vs-rest AUC by hand and against an O(n^2) pair count), order independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "train/metrics.h"

namespace hstu {
namespace {

using test::error_of;

TEST(RetrievalMetrics, HandComputedRanks) {
  RetrievalMetrics m;  // K = 1, 10, 50, 200
  for (int64_t r : {1, 3, 11, 2501}) m.add(r);
  EXPECT_EQ(m.count(), 4);
  // HR@K: ranks 1 | 1,3 | 1,3,11 | 1,3,11 of 4 samples.
  EXPECT_EQ(m.hr(1), 0.25);
  EXPECT_EQ(m.hr(10), 0.5);
  EXPECT_EQ(m.hr(50), 0.75);
  EXPECT_EQ(m.hr(200), 0.75);
  // NDCG@K: 1/log2(1+1) = 1, 1/log2(3+1) = 1/2, 1/log2(11+1) = 0.27894294565112987.
  EXPECT_DOUBLE_EQ(m.ndcg(1), 1.0 / 4);
  EXPECT_DOUBLE_EQ(m.ndcg(10), 1.5 / 4);
  EXPECT_DOUBLE_EQ(m.ndcg(50), (1.5 + 0.27894294565112987) / 4);
  EXPECT_DOUBLE_EQ(m.ndcg(200), (1.5 + 0.27894294565112987) / 4);
  // MRR: (1 + 1/3 + 1/11 + 1/2501) / 4.
  EXPECT_DOUBLE_EQ(m.mrr(), (1.0 + 1.0 / 3 + 1.0 / 11 + 1.0 / 2501) / 4);
  EXPECT_NEAR(m.mrr(), 0.35616056608, 1e-11);

  const NamedValues v = m.values();
  std::vector<std::string> names;
  for (const auto& [name, x] : v) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"HR@1", "HR@10", "HR@50", "HR@200", "NDCG@1",
                                             "NDCG@10", "NDCG@50", "NDCG@200", "MRR"}));
  EXPECT_EQ(v[1].second, 0.5);
  EXPECT_EQ(v[8].second, m.mrr());
}

TEST(RetrievalMetrics, OrderAndMergeDoNotChangeResults) {
  std::mt19937 rng(3);
  std::vector<int64_t> ranks(5000);
  for (auto& r : ranks) r = 1 + static_cast<int64_t>(rng() % 2501);
  RetrievalMetrics a({5, 100});
  for (int64_t r : ranks) a.add(r);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  RetrievalMetrics b({5, 100}), c({5, 100});
  for (size_t i = 0; i < ranks.size(); ++i) (i % 3 ? b : c).add(ranks[i]);
  c.merge(b);
  EXPECT_EQ(a.count(), c.count());
  EXPECT_EQ(a.values(), c.values());  // bit-identical
  EXPECT_NE(error_of([&] { a.merge(RetrievalMetrics()); }).find("different cutoffs"),
            std::string::npos);
}

TEST(RetrievalMetrics, Errors) {
  RetrievalMetrics m;
  EXPECT_TRUE(std::isnan(m.mrr()));  // no samples yet
  EXPECT_NE(error_of([&] { m.add(0); }).find("1-based"), std::string::npos);
  EXPECT_NE(error_of([] { RetrievalMetrics({0}); }).find("K = 0"), std::string::npos);
}

TEST(BinaryMetrics, HandComputedCaseWithTies) {
  // Negatives -2, 0.5, -1, 1.5; positives 0.5, 1.5, 1.5.
  const std::vector<float> logits = {-2, 0.5f, 0.5f, 1.5f, 1.5f, -1, 1.5f};
  const std::vector<uint8_t> labels = {0, 1, 0, 1, 1, 0, 0};
  // Positive 0.5 beats -2 and -1 and ties 0.5: 2.5 of 4 pairs. Each positive 1.5 beats -2, 0.5
  // and -1 and ties 1.5: 3.5. AUC = (2.5 + 3.5 + 3.5) / (3 * 4) = 19/24.
  EXPECT_DOUBLE_EQ(roc_auc(logits, labels), 19.0 / 24);

  BinaryMetrics m;
  for (size_t i = 0; i < logits.size(); ++i) m.add(logits[i], labels[i]);
  const BinaryResult r = m.compute();
  EXPECT_EQ(r.count, 7);
  EXPECT_EQ(r.positives, 3);
  EXPECT_DOUBLE_EQ(r.auc, 19.0 / 24);
  // Predicted positive iff logit > 0: right on -2, 0.5(+), 1.5(+), 1.5(+), -1; wrong on 0.5(-)
  // and 1.5(-).
  EXPECT_DOUBLE_EQ(r.accuracy, 5.0 / 7);
  double ll = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = 1 / (1 + std::exp(-static_cast<double>(logits[i])));
    ll -= labels[i] ? std::log(p) : std::log(1 - p);
  }
  EXPECT_NEAR(r.log_loss, ll / 7, 1e-12);
  const NamedValues v = r.values("click");
  EXPECT_EQ(v[0].first, "AUC/click");
  EXPECT_EQ(v[2].first, "LogLoss/click");
  EXPECT_EQ(r.values()[1].first, "Accuracy");
}

TEST(BinaryMetrics, AucMatchesBruteForcePairCountWithManyTies) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 5; ++trial) {
    const size_t n = 1500 + 100 * static_cast<size_t>(trial);
    std::vector<float> s(n);
    std::vector<uint8_t> y(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(rng() % 25) * 0.5f - 3;  // 25 distinct values: many ties
      y[i] = static_cast<int>(rng() % 100) < 30 + static_cast<int>(s[i] * 5) ? 1 : 0;
    }
    double pairs = 0, wins = 0;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        if (y[i] != 1 || y[j] != 0) continue;
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
    }
    EXPECT_DOUBLE_EQ(roc_auc(s, y), wins / pairs);
  }
}

TEST(BinaryMetrics, OrderIndependentAndStable) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 3);
  std::vector<std::pair<float, bool>> samples(4000);
  for (auto& [x, y] : samples) {
    x = nd(rng);
    y = rng() % 2;
  }
  BinaryMetrics a, b, c;
  for (const auto& [x, y] : samples) a.add(x, y);
  std::shuffle(samples.begin(), samples.end(), rng);
  for (size_t i = 0; i < samples.size(); ++i)
    (i < 1000 ? b : c).add(samples[i].first, samples[i].second);
  c.merge(b);
  const BinaryResult ra = a.compute(), rc = c.compute();
  EXPECT_EQ(ra.auc, rc.auc);
  EXPECT_EQ(ra.accuracy, rc.accuracy);
  EXPECT_EQ(ra.log_loss, rc.log_loss);

  // Log-loss from extreme logits stays finite and exact; logit 0 predicts negative.
  BinaryMetrics e;
  e.add(1000, false);
  e.add(-1000, true);
  e.add(1000, true);
  e.add(0, true);
  const BinaryResult re = e.compute();
  EXPECT_DOUBLE_EQ(re.log_loss, (1000 + 1000 + 0 + std::log(2.0)) / 4);
  EXPECT_DOUBLE_EQ(re.accuracy, 1.0 / 4);

  BinaryMetrics one_class;
  one_class.add(1, true);
  EXPECT_TRUE(std::isnan(one_class.compute().auc));
  EXPECT_NE(error_of([&] { one_class.add(NAN, true); }).find("NaN"), std::string::npos);
  EXPECT_NE(error_of([] {
              std::vector<float> s = {1};
              std::vector<uint8_t> y = {2};
              roc_auc(s, y);
            }).find("not 0 or 1"),
            std::string::npos);
}

TEST(MulticlassMetrics, AccuracyAndCrossEntropy) {
  MulticlassMetrics m(3);
  m.add(std::vector<float>{1, 2, 3}, 2);       // right
  m.add(std::vector<float>{5, 5, 1}, 1);       // tie: the lowest index (0) wins, so wrong
  m.add(std::vector<float>{800, 0, -800}, 0);  // right, huge logits
  EXPECT_EQ(m.count(), 3);
  EXPECT_DOUBLE_EQ(m.accuracy(), 2.0 / 3);
  const double ce1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
  const double ce2 = std::log(2 * std::exp(5.0) + std::exp(1.0)) - 5;
  EXPECT_DOUBLE_EQ(m.cross_entropy(), (ce1 + ce2 + 0) / 3);
  EXPECT_EQ(m.values()[1].first, "Accuracy");
  EXPECT_EQ(m.values()[2].first, "CrossEntropy");
  EXPECT_NE(error_of([&] {
              m.add(std::vector<float>{1, 2}, 0);
            }).find("2 logits for 3 classes"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.add(std::vector<float>{1, 2, 3}, 3);
            }).find("out of [0, 3)"),
            std::string::npos);
}

// Softmax probabilities in double, with the same operation order as MulticlassMetrics (so ties
// between bitwise-equal probabilities are the same ties there and here).
std::vector<double> softmax_probs(const std::vector<float>& logits) {
  size_t best = 0;
  for (size_t c = 0; c < logits.size(); ++c)
    if (logits[c] > logits[best]) best = c;
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t c = 0; c < logits.size(); ++c) {
    p[c] = std::exp(static_cast<double>(logits[c]) - logits[best]);
    sum += p[c];
  }
  for (double& x : p) x /= sum;
  return p;
}

TEST(MulticlassMetrics, MacroAucHandComputed) {
  // Four logit rows and their softmax probabilities (class 0, 1, 2):
  //   r1 [2,0,0] (0.7870, 0.1065, 0.1065)   r2 [0,1,0] (0.2119, 0.5761, 0.2119)
  //   r3 [0,0,3] (0.0453, 0.0453, 0.9094)   r4 [1,0,1] (0.4223, 0.1554, 0.4223)
  // Samples: r1 label 0, r1 label 1, r2 label 1, r3 label 2, r4 label 0, r4 label 2.
  const std::vector<float> r1 = {2, 0, 0}, r2 = {0, 1, 0}, r3 = {0, 0, 3}, r4 = {1, 0, 1};
  MulticlassMetrics m(3);
  m.add(r1, 0);
  m.add(r1, 1);
  m.add(r2, 1);
  m.add(r3, 2);
  m.add(r4, 0);
  m.add(r4, 2);
  // Class 0: positives 0.7870 (beats 0.2119, 0.0453, 0.4223, ties 0.7870: 3.5) and 0.4223 (beats
  // 0.2119, 0.0453, ties 0.4223: 2.5) over 2 x 4 pairs = 6/8.
  EXPECT_DOUBLE_EQ(m.class_auc(0), 6.0 / 8);
  // Class 1: positives 0.1065 (beats 0.0453, ties 0.1065: 1.5) and 0.5761 (beats all 4) = 5.5/8.
  EXPECT_DOUBLE_EQ(m.class_auc(1), 5.5 / 8);
  // Class 2: positives 0.9094 (beats all 4) and 0.4223 (beats 0.1065 twice and 0.2119, ties
  // 0.4223: 3.5) = 7.5/8.
  EXPECT_DOUBLE_EQ(m.class_auc(2), 7.5 / 8);
  EXPECT_DOUBLE_EQ(m.auc(), (6.0 + 5.5 + 7.5) / 24);  // = 19/24
  const NamedValues v = m.values("task0");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].first, "AUC/task0");
  EXPECT_EQ(v[0].second, m.auc());
  EXPECT_EQ(v[1].first, "Accuracy/task0");
  EXPECT_EQ(v[2].first, "CrossEntropy/task0");
  EXPECT_EQ(m.values()[0].first, "AUC");
  // Argmax: r1 -> 0 (right, wrong), r2 -> 1 (right), r3 -> 2 (right), r4 -> 0 (right, wrong).
  EXPECT_DOUBLE_EQ(m.accuracy(), 4.0 / 6);
}

TEST(MulticlassMetrics, AucLeavesOutClassesWithoutPositivesOrNegatives) {
  MulticlassMetrics m(3);
  m.add(std::vector<float>{1, 0, 0}, 0);
  m.add(std::vector<float>{0, 1, 0}, 1);
  m.add(std::vector<float>{0, 2, 0}, 1);
  EXPECT_DOUBLE_EQ(m.class_auc(0), 1.0);
  EXPECT_DOUBLE_EQ(m.class_auc(1), 1.0);
  EXPECT_TRUE(std::isnan(m.class_auc(2)));  // no positive: left out, not scored 0
  EXPECT_DOUBLE_EQ(m.auc(), 1.0);

  MulticlassMetrics one(3);  // one label everywhere: no class has both positives and negatives
  one.add(std::vector<float>{1, 0, 0}, 2);
  one.add(std::vector<float>{0, 1, 0}, 2);
  EXPECT_TRUE(std::isnan(one.auc()));
  EXPECT_TRUE(std::isnan(MulticlassMetrics(2).auc()));  // no samples
  EXPECT_NE(error_of([&] { one.class_auc(3); }).find("out of [0, 3)"), std::string::npos);
}

TEST(MulticlassMetrics, AucMatchesBruteForcePairCountWithTies) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t k = 3 + trial;  // 3, 4, 5 classes
    const size_t n = 600;
    std::vector<std::vector<float>> logits(n);
    std::vector<int64_t> labels(n);
    for (size_t i = 0; i < n; ++i) {
      // Logits from {0, 0.5, 1}: many equal rows, so many tied probabilities.
      logits[i].resize(static_cast<size_t>(k));
      for (float& x : logits[i]) x = static_cast<float>(rng() % 3) * 0.5f;
      // The label leans towards the argmax so the AUCs are not all 1/2.
      const size_t top = static_cast<size_t>(std::max_element(logits[i].begin(), logits[i].end()) -
                                             logits[i].begin());
      labels[i] = rng() % 2 ? static_cast<int64_t>(top) : static_cast<int64_t>(rng() % k);
    }
    // Class k-1 never occurs in the last trial: it must be left out of the mean.
    if (trial == 2)
      for (auto& y : labels) y = y == k - 1 ? 0 : y;
    MulticlassMetrics m(k);
    for (size_t i = 0; i < n; ++i) m.add(logits[i], labels[i]);
    double sum = 0;
    int defined = 0;
    for (int64_t c = 0; c < k; ++c) {
      double pairs = 0, wins = 0;
      for (size_t i = 0; i < n; ++i) {
        if (labels[i] != c) continue;
        const double pi = softmax_probs(logits[i])[static_cast<size_t>(c)];
        for (size_t j = 0; j < n; ++j) {
          if (labels[j] == c) continue;
          const double pj = softmax_probs(logits[j])[static_cast<size_t>(c)];
          pairs += 1;
          wins += pi > pj ? 1.0 : pi == pj ? 0.5 : 0.0;
        }
      }
      if (pairs == 0) {
        EXPECT_TRUE(std::isnan(m.class_auc(c))) << "class " << c;
        continue;
      }
      EXPECT_DOUBLE_EQ(m.class_auc(c), wins / pairs) << "trial " << trial << " class " << c;
      sum += wins / pairs;
      ++defined;
    }
    EXPECT_EQ(defined, trial == 2 ? k - 1 : k);
    EXPECT_DOUBLE_EQ(m.auc(), sum / defined);
  }
}

TEST(MulticlassMetrics, OrderAndMergeDoNotChangeResults) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0, 2);
  std::vector<std::pair<std::vector<float>, int64_t>> samples(3000);
  for (auto& [x, y] : samples) {
    x = {nd(rng), nd(rng), nd(rng), nd(rng)};
    y = static_cast<int64_t>(rng() % 4);
  }
  MulticlassMetrics a(4), b(4), c(4);
  for (const auto& [x, y] : samples) a.add(x, y);
  std::shuffle(samples.begin(), samples.end(), rng);
  for (size_t i = 0; i < samples.size(); ++i)
    (i % 4 == 1 ? b : c).add(samples[i].first, samples[i].second);
  c.merge(b);
  EXPECT_EQ(a.count(), c.count());
  EXPECT_EQ(a.values(), c.values());  // bit-identical AUC, accuracy and cross-entropy
}

}  // namespace
}  // namespace hstu
