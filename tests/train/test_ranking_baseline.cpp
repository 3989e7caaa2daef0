// test_ranking_baseline.cpp — the logistic fits behind the ranking baseline (coefficients of a
// known model recovered from data drawn from it, binary and multinomial; separable data and an
// absent class stay finite; determinism) and the baseline's features on a hand-made dataset
// (item counts from the train split only, history means, the label mapping, the fallback), plus
// a baseline run that must learn a planted user effect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/ranking.h"
#include "train/metrics.h"
#include "train/ranking_baseline.h"
#include "train/ranking_eval.h"
#include "train/trainer.h"

namespace hstu {
namespace {

using test::error_of;

double sigmoid(double z) {
  return 1 / (1 + std::exp(-z));
}

TEST(LogisticFit, BinaryRecoversKnownCoefficients) {
  // y ~ Bernoulli(sigmoid(-0.5 + 1.2 x0 - 0.8 x1)), x0 ~ N(1, 2), x1 ~ U(0, 3).
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(1, 2);
  std::uniform_real_distribution<double> ud(0, 3), u01(0, 1);
  const int64_t n = 40000;
  std::vector<double> x(2 * n);
  std::vector<uint8_t> y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[2 * i] = nd(rng);
    x[2 * i + 1] = ud(rng);
    y[i] = u01(rng) < sigmoid(-0.5 + 1.2 * x[2 * i] - 0.8 * x[2 * i + 1]);
  }
  const LogisticFit f = fit_binary_logistic(x, 2, y);
  EXPECT_TRUE(f.converged);
  EXPECT_LT(f.iterations, 20);
  ASSERT_EQ(f.coef.size(), 3u);
  // Standard errors are ~0.02-0.03 at this n; 0.1 is > 3 of them.
  EXPECT_NEAR(f.coef[0], -0.5, 0.1);
  EXPECT_NEAR(f.coef[1], 1.2, 0.1);
  EXPECT_NEAR(f.coef[2], -0.8, 0.1);
  std::vector<double> s(1);
  f.scores(std::vector<double>{2, 1}, s);
  EXPECT_DOUBLE_EQ(s[0], f.coef[0] + 2 * f.coef[1] + f.coef[2]);

  // Deterministic: the same data give bit-identical coefficients.
  EXPECT_EQ(fit_binary_logistic(x, 2, y).coef, f.coef);
}

TEST(LogisticFit, MultinomialRecoversKnownCoefficients) {
  // 4 classes, scores W [4, 1 + 2] x~; the fit identifies W up to a shift common to all classes
  // and the L2 term picks the one whose rows sum to zero, so compare with centred W.
  const std::vector<std::vector<double>> w = {
      {0.5, 1.0, 0.0}, {0.0, -0.5, 0.8}, {-0.3, 0.2, -0.6}, {0.2, 0.0, 0.3}};
  std::mt19937_64 rng(9);
  std::normal_distribution<double> nd(0, 1);
  std::uniform_real_distribution<double> u01(0, 1);
  const int64_t n = 60000, k = 4;
  std::vector<double> x(2 * n);
  std::vector<int32_t> y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[2 * i] = nd(rng);
    x[2 * i + 1] = 2 + nd(rng);
    double p[4], sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      p[c] = std::exp(w[c][0] + w[c][1] * x[2 * i] + w[c][2] * x[2 * i + 1]);
      sum += p[c];
    }
    double u = u01(rng) * sum;
    int32_t c = 0;
    while (c < k - 1 && u >= p[c]) u -= p[c++];
    y[i] = c;
  }
  const LogisticFit f = fit_multinomial_logistic(x, 2, y, k);
  EXPECT_TRUE(f.converged);
  ASSERT_EQ(f.coef.size(), 12u);
  for (int64_t a = 0; a < 3; ++a) {
    double true_mean = 0, fit_sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      true_mean += w[c][a] / k;
      fit_sum += f.coef[c * 3 + a];
    }
    EXPECT_NEAR(fit_sum, 0, 1e-6) << "coefficient " << a;
    for (int64_t c = 0; c < k; ++c)
      EXPECT_NEAR(f.coef[c * 3 + a], w[c][a] - true_mean, 0.1) << "class " << c << " coef " << a;
  }
}

TEST(LogisticFit, AConstantFeatureOverManyRowsGetsNoWeight) {
  // 200k rows of one user-mean value (benchmark data scored whole: no history). The rounding of
  // its mean over that many rows (~2e-12 here) must not make it a column of +-1 beside the
  // intercept, whose weight the fit would then blow up to ~1e11 in the feature's units. (8 Newton
  // steps: the optimum is reached long before; the test is about the weights.)
  const int64_t n = 200000;
  const std::vector<double> x(static_cast<size_t>(n), 0.4993001);
  std::vector<uint8_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 10 < 3;  // 30% positives
  const LogisticFit f = fit_binary_logistic(x, 1, y, kLogisticL2, 8);
  EXPECT_EQ(f.coef[1], 0.0);                          // the constant feature
  EXPECT_NEAR(f.coef[0], std::log(0.3 / 0.7), 1e-3);  // the intercept: the base rate
}

TEST(LogisticFit, SeparableDataAndAbsentClassStayFinite) {
  // y = [x > 0]: the unregularised maximum likelihood is at infinity; the tiny L2 term keeps the
  // weight finite (of order log(1 / l2)) and Newton still converges.
  std::vector<double> x;
  std::vector<uint8_t> y;
  for (int i = -50; i <= 50; ++i) {
    if (i == 0) continue;
    x.push_back(i / 10.0);
    y.push_back(i > 0);
  }
  const LogisticFit f = fit_binary_logistic(x, 1, y);
  EXPECT_TRUE(f.converged);
  for (double c : f.coef) EXPECT_TRUE(std::isfinite(c));
  EXPECT_GT(f.coef[1], 10);
  EXPECT_LT(f.coef[1], 1000);
  std::vector<double> s(1);
  f.scores(std::vector<double>{0.1}, s);
  EXPECT_GT(s[0], 0);
  f.scores(std::vector<double>{-0.1}, s);
  EXPECT_LT(s[0], 0);

  // Class 2 of 3 never occurs: its scores settle far below the others, finite.
  std::vector<double> x3;
  std::vector<int32_t> y3;
  for (int i = 0; i < 200; ++i) {
    x3.push_back(i % 7);
    y3.push_back(i % 3 == 0 ? 1 : 0);
  }
  const LogisticFit g = fit_multinomial_logistic(x3, 1, y3, 3);
  EXPECT_TRUE(g.converged);
  for (double c : g.coef) EXPECT_TRUE(std::isfinite(c));
  std::vector<double> s3(3);
  g.scores(std::vector<double>{3}, s3);
  EXPECT_LT(s3[2], s3[0] - 10);
  EXPECT_LT(s3[2], s3[1] - 10);
  EXPECT_GT(s3[0], s3[1]);  // class 0 is twice as frequent

  y3[5] = 2;
  EXPECT_NE(error_of([&] { fit_multinomial_logistic(x3, 1, y3, 2); }).find("outside [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              fit_binary_logistic(std::vector<double>{}, 1, std::vector<uint8_t>{});
            }).find("no rows"),
            std::string::npos);
}

// Two users of four events (items, half-star actions 1..10 as MovieLens stores them).
SequenceDataset two_users() {
  SequenceArrays a;
  a.user_offsets = {0, 4, 8};
  a.items = {1, 2, 3, 4, 2, 2, 5, 1};
  a.actions = {2, 4, 6, 8, 10, 10, 1, 3};
  a.timestamps = {1, 2, 3, 4, 1, 2, 3, 4};
  SequenceDataset ds;
  ds.name = "ml-handmade";
  ds.num_items = 6;
  ds.num_actions = 11;
  attach_arrays(ds, std::move(a));
  return ds;
}

TEST(RankingBaseline, FeaturesLabelsAndCounts) {
  const SequenceDataset ds = two_users();
  DatasetArgs args;
  args.max_history_seqlen = 3;
  args.max_num_candidates = 1;
  // Time split, C = 1: train candidates e2 (user 0) and e6 (user 1) with histories e0..e1 and
  // e4..e5; eval candidates e3 and e7 with histories e0..e2 and e4..e6.
  const RankingSplits sp = make_ranking_splits(ds, args);
  ASSERT_EQ(sp.train.samples.size(), 2u);
  ASSERT_EQ(sp.eval.samples.size(), 2u);
  // Items of the train samples' events (e0..e2, e4..e6): 1, 2, 3, 2, 2, 5. Item 4 (an eval
  // candidate) never occurs there.
  const std::vector<int64_t> counts = ranking_item_counts(ds, sp.train);
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 1, 3, 1, 0, 1}));

  const RankingHeadSpec ce{false, 10, true};  // 10 classes, class = action - 1
  const std::vector<double> fb = {4.5};
  const RankingBaselineRows tr = ranking_baseline_rows(ds, sp.train, 2, counts, fb, ce);
  EXPECT_EQ(tr.num_values, 1);
  EXPECT_EQ(tr.labels, (std::vector<int32_t>{5, 0}));  // actions 6, 1
  EXPECT_DOUBLE_EQ(tr.log_pop[0], std::log(2.0));      // item 3, count 1
  EXPECT_DOUBLE_EQ(tr.log_pop[1], std::log(2.0));      // item 5, count 1
  EXPECT_DOUBLE_EQ(tr.user_mean[0], (1 + 3) / 2.0);    // classes of actions 2, 4
  EXPECT_DOUBLE_EQ(tr.user_mean[1], (9 + 9) / 2.0);
  const RankingBaselineRows ev = ranking_baseline_rows(ds, sp.eval, 2, counts, fb, ce);
  EXPECT_EQ(ev.labels, (std::vector<int32_t>{7, 2}));
  EXPECT_DOUBLE_EQ(ev.log_pop[0], 0.0);  // item 4: unseen in training
  EXPECT_DOUBLE_EQ(ev.log_pop[1], std::log(2.0));
  EXPECT_DOUBLE_EQ(ev.user_mean[0], (1 + 3 + 5) / 3.0);
  EXPECT_DOUBLE_EQ(ev.user_mean[1], (9 + 9 + 0) / 3.0);
  EXPECT_EQ(ranking_baseline_rows(ds, sp.eval, 1, counts, fb, ce).labels.size(), 1u);

  // BCE head of 2 tasks: the bitmask is the label, the user means are per bit.
  const RankingHeadSpec bce{true, 2, true};
  const std::vector<double> fb2 = {0.5, 0.5};
  const RankingBaselineRows b = ranking_baseline_rows(ds, sp.train, 2, counts, fb2, bce);
  EXPECT_EQ(b.num_values, 2);
  EXPECT_EQ(b.labels, (std::vector<int32_t>{6, 1}));
  EXPECT_EQ(b.user_mean, (std::vector<double>{0, 0.5, 0, 1}));  // bits of {2, 4}, {10, 10}

  // An empty history falls back to the given value.
  RankingSplit empty;
  empty.samples.push_back({0, 1, 1, 2});
  EXPECT_EQ(ranking_baseline_rows(ds, empty, 1, counts, fb, ce).user_mean,
            (std::vector<double>{4.5}));
  // The label mapping refuses classes outside the head, as RankingModel does.
  EXPECT_NE(error_of([&] { ranking_label(0, ce); }).find("outside the 10 classes"),
            std::string::npos);
  EXPECT_EQ(ranking_label(11, RankingHeadSpec{false, 12, false}), 11);
}

TEST(RankingBaseline, LearnsAPlantedUserEffect) {
  // 300 users; user u rates around its own level (0..4) and popular items (ids 1..5) a bit
  // higher: the history mean and the popularity both carry signal a logistic model can use.
  std::mt19937_64 rng(3);
  SequenceArrays a;
  a.user_offsets.push_back(0);
  for (int u = 0; u < 300; ++u) {
    const int level = u % 5;
    for (int e = 0; e < 12; ++e) {
      const int32_t item = static_cast<int32_t>(1 + rng() % 40);
      int32_t r = level + static_cast<int32_t>(rng() % 3) - 1 + (item <= 5 ? 1 : 0);
      a.items.push_back(item);
      a.actions.push_back(1 + std::clamp(r, 0, 4));  // ratings 1..5
      a.timestamps.push_back(e);
    }
    a.user_offsets.push_back(static_cast<int64_t>(a.items.size()));
  }
  SequenceDataset ds;
  ds.name = "ml-planted";
  ds.num_items = 41;
  ds.num_actions = 6;
  attach_arrays(ds, std::move(a));
  DatasetArgs args;
  args.max_history_seqlen = 6;
  args.max_num_candidates = 3;
  const RankingSplits sp = make_ranking_splits(ds, args);

  const RankingBaseline ce = ranking_baseline(ds, sp, {false, 5, true});
  ASSERT_EQ(ce.fits.size(), 1u);
  EXPECT_TRUE(ce.fits[0].converged);
  EXPECT_EQ(ce.train_candidates, 900);
  EXPECT_EQ(ce.eval_candidates, 900);
  std::vector<std::string> names;
  for (const auto& [k, v] : ce.eval) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"AUC/task0", "Accuracy/task0", "CrossEntropy/task0",
                                             "MeanAUC"}));
  const double auc = metric(ce.eval, "AUC/task0");
  EXPECT_GT(auc, 0.75);  // measured 0.795
  EXPECT_EQ(metric(ce.eval, "MeanAUC"), auc);
  EXPECT_FALSE(ce.describe().empty());
  // Only the first 100 eval samples when asked (as evaluate_ranking with max_eval_iters).
  EXPECT_EQ(ranking_baseline(ds, sp, {false, 5, true}, 100).eval_candidates, 300);

  // BCE on the rating's bits: one fit per task, each with a finite AUC.
  const RankingBaseline bce = ranking_baseline(ds, sp, {true, 3, false});
  ASSERT_EQ(bce.fits.size(), 3u);
  for (int t = 0; t < 3; ++t)
    EXPECT_TRUE(std::isfinite(metric(bce.eval, "AUC/task" + std::to_string(t)))) << t;
  EXPECT_GT(metric(bce.eval, "MeanAUC"), 0.6);
}

TEST(RankingMetrics, NamesAndLabelsPerHead) {
  RankingMetrics bin(true, 2);  // label bitmask: bit t = task t
  bin.add(std::vector<float>{1, -1}, 1);
  bin.add(std::vector<float>{-1, 1}, 2);
  const NamedValues v = bin.values();
  EXPECT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0].first, "AUC/task0");
  EXPECT_EQ(v[0].second, 1.0);
  EXPECT_EQ(v[3].first, "AUC/task1");
  EXPECT_EQ(v[3].second, 1.0);
  EXPECT_EQ(v[6].first, "MeanAUC");
  EXPECT_EQ(bin.count(), 2);
  EXPECT_NE(error_of([&] { bin.add(std::vector<float>{1}, 0); }).find("1 logits for a head of 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { RankingMetrics(false, 1); }).find(">= 2 classes"), std::string::npos);
}

}  // namespace
}  // namespace hstu
