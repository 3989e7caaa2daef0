// test_synthetic_ranking.cpp — the synthetic generator's ranking extensions (contextual features
// and multi-task labels, synthetic.h): the default data pinned bit for bit, determinism with any
// thread count, items independent of the extensions, contexts that carry behaviour, sane label
// rates, and labels that follow the planted probabilities.
//
// Statistical checks compare against chance (or a shuffled baseline) with wide margins, so they
// test the planted signal, not particular random draws.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <vector>

#include "common/data_test_util.h"
#include "data/synthetic.h"

namespace hstu {
namespace {

template <typename T>
void fnv1a(uint64_t& h, std::span<const T> v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
}

// FNV-1a over offsets, items, actions and timestamps (what the retrieval pipeline reads).
uint64_t checksum(const SequenceDataset& ds) {
  uint64_t h = 0xcbf29ce484222325ull;
  fnv1a(h, ds.user_offsets);
  fnv1a(h, ds.items);
  fnv1a(h, ds.actions);
  fnv1a(h, ds.timestamps);
  return h;
}

// The SyntheticArgs of configs/default.gin (`make train`).
SyntheticArgs default_gin_args() {
  SyntheticArgs a;
  a.num_users = 2000;
  a.num_items = 1000;
  a.num_clusters = 20;
  a.clusters_per_user = 2;
  a.min_seqlen = 10;
  a.max_seqlen = 100;
  a.seed = 42;
  return a;
}

SyntheticArgs ranking_args() {
  SyntheticArgs a;
  a.num_users = 600;
  a.num_items = 500;
  a.num_clusters = 10;
  a.clusters_per_user = 2;
  a.min_seqlen = 20;
  a.max_seqlen = 80;
  a.seqlen_dist = {"lognormal", 20, -1, 40, 20, 1.5};
  a.num_contextual_features = 4;
  a.contextual_cardinality = 8;
  a.num_tasks = 8;
  return a;
}

template <typename T>
bool same(std::span<const T> x, std::span<const T> y) {
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

// Checksums computed with the generator as it was before contexts and labels existed: the
// default data (retrieval tests, `make train`, benchmarks) must stay bit-identical.
TEST(SyntheticRanking, DefaultDataUnchanged) {
  const SequenceDataset d = generate_synthetic(SyntheticArgs{});
  EXPECT_EQ(checksum(d), 0xb4930620fa693380ull);
  EXPECT_EQ(d.num_actions, 6);
  EXPECT_TRUE(d.contextual_names.empty());
  EXPECT_TRUE(d.contextual_values.empty());
  EXPECT_EQ(checksum(generate_synthetic(default_gin_args())), 0xba55d8ee3a4fc057ull);
}

// Contexts and labels come from their own stream: items, lengths and timestamps do not move.
TEST(SyntheticRanking, ItemsIndependentOfExtensions) {
  SyntheticArgs plain = ranking_args();
  plain.num_contextual_features = 0;
  plain.num_tasks = 0;
  const SequenceDataset x = generate_synthetic(plain), y = generate_synthetic(ranking_args());
  EXPECT_TRUE(same(x.user_offsets, y.user_offsets));
  EXPECT_TRUE(same(x.items, y.items));
  EXPECT_TRUE(same(x.timestamps, y.timestamps));
  EXPECT_FALSE(same(x.actions, y.actions));
  // Contexts alone leave the ratings as they were.
  SyntheticArgs ctx_only = plain;
  ctx_only.num_contextual_features = 3;
  const SequenceDataset z = generate_synthetic(ctx_only);
  EXPECT_EQ(checksum(z), checksum(x));
  EXPECT_EQ(z.contextual_values.size(), static_cast<size_t>(3 * plain.num_users));
}

TEST(SyntheticRanking, DeterministicAnyThreadCount) {
  const SyntheticArgs a = ranking_args();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const SequenceDataset x = generate_synthetic(a);
  const std::vector<float> px = synthetic_label_probabilities(a, x);
  omp_set_num_threads(3);
  const SequenceDataset y = generate_synthetic(a);
  const std::vector<float> py = synthetic_label_probabilities(a, y);
  omp_set_num_threads(threads);
  EXPECT_EQ(checksum(x), checksum(y));
  EXPECT_TRUE(same(x.contextual_values, y.contextual_values));
  EXPECT_TRUE(px == py);
  EXPECT_EQ(x.num_actions, 256);
  EXPECT_EQ(x.contextual_names,
            (std::vector<std::string>{"feature_0", "feature_1", "feature_2", "feature_3"}));
  EXPECT_EQ(x.contextual_cardinalities, (std::vector<int32_t>(4, 8)));
  SyntheticArgs b = a;
  b.seed = 43;
  const SequenceDataset z = generate_synthetic(b);
  EXPECT_FALSE(same(x.contextual_values, z.contextual_values));
  // A user's contexts and labels do not depend on how many users there are.
  SyntheticArgs fewer = a;
  fewer.num_users = 10;
  const SequenceDataset f = generate_synthetic(fewer);
  EXPECT_TRUE(std::equal(f.actions.begin(), f.actions.end(), x.actions.begin()));
  EXPECT_TRUE(std::equal(f.contextual_values.begin(), f.contextual_values.end(),
                         x.contextual_values.begin()));
}

// Mutual information (bits) between contextual feature c and the cluster of the user's events,
// with users' feature values taken from user perm[u] (the identity: the data; a shuffle: the
// chance level of the same marginals).
double feature_cluster_mi(const SequenceDataset& ds, const SyntheticTruth& truth, int64_t c,
                          const std::vector<int64_t>& perm) {
  const int64_t num_ctx = static_cast<int64_t>(ds.contextual_cardinalities.size());
  std::map<std::pair<int32_t, int32_t>, double> joint;
  std::map<int32_t, double> px, py;
  double n = 0;
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    const int32_t x = ds.contextual_values[perm[u] * num_ctx + c];
    for (int64_t e = ds.user_offsets[u]; e < ds.user_offsets[u + 1]; ++e) {
      const int32_t y = truth.cluster_of[ds.items[e]];
      joint[{x, y}] += 1;
      px[x] += 1;
      py[y] += 1;
      n += 1;
    }
  }
  double mi = 0;
  for (const auto& [xy, count] : joint) {
    mi += count / n * std::log2(count * n / (px[xy.first] * py[xy.second]));
  }
  return mi;
}

TEST(SyntheticRanking, ContextsCorrelateWithBehaviour) {
  SyntheticArgs a = ranking_args();
  a.num_users = 3000;  // the shuffled baseline's finite-sample bias shrinks with users
  const SequenceDataset ds = generate_synthetic(a);
  const SyntheticTruth truth = synthetic_truth(a);
  std::vector<int64_t> identity(a.num_users), shuffled(a.num_users);
  for (int64_t u = 0; u < a.num_users; ++u) {
    identity[u] = u;
    shuffled[u] = (u * 7919 + 13) % a.num_users;  // a fixed permutation (7919 is prime)
  }
  for (int64_t c = 0; c < a.num_contextual_features; ++c) {
    const double mi = feature_cluster_mi(ds, truth, c, identity);
    const double chance = feature_cluster_mi(ds, truth, c, shuffled);
    // One feature names one of two preferred clusters among ten (80% of the time): measured
    // 0.17..0.22 bits against 0.004..0.006 bits for shuffled users.
    EXPECT_GT(mi, 0.1) << "feature " << c;
    EXPECT_GT(mi, 5 * chance) << "feature " << c;
  }
  // Pure noise carries nothing.
  SyntheticArgs noise = a;
  noise.contextual_noise = 1.0;
  const SequenceDataset nd = generate_synthetic(noise);
  EXPECT_LT(feature_cluster_mi(nd, truth, 0, identity), 0.05);
}

TEST(SyntheticRanking, LabelRatesAndProbabilities) {
  const SyntheticArgs a = ranking_args();
  const SequenceDataset ds = generate_synthetic(a);
  const std::vector<float> p = synthetic_label_probabilities(a, ds);
  const int64_t k_count = a.num_tasks, n = ds.num_events();
  ASSERT_EQ(p.size(), static_cast<size_t>(n * k_count));
  for (int64_t k = 0; k < k_count; ++k) {
    double pos = 0, prob = 0, p_pos = 0, p_neg = 0;
    for (int64_t e = 0; e < n; ++e) {
      const bool label = (ds.actions[e] >> k) & 1;
      const double pe = p[e * k_count + k];
      ASSERT_TRUE(pe > 0 && pe < 1);
      pos += label;
      prob += pe;
      (label ? p_pos : p_neg) += pe;
    }
    const double rate = pos / n;
    EXPECT_GT(rate, 0.03) << "task " << k;
    EXPECT_LT(rate, 0.97) << "task " << k;
    // Labels are Bernoulli(p): the rate matches the mean probability (n ~ 25k events).
    EXPECT_NEAR(rate, prob / n, 0.02) << "task " << k;
    // Positives carry higher planted probabilities than negatives.
    EXPECT_GT(p_pos / pos, p_neg / (n - pos) + 0.02) << "task " << k;
  }
  for (int32_t act : ds.actions) ASSERT_LT(act, 256);
  // label_signal = 0: every event of a task has the same probability.
  SyntheticArgs flat = a;
  flat.label_signal = 0;
  const SequenceDataset fd = generate_synthetic(flat);
  const std::vector<float> fp = synthetic_label_probabilities(flat, fd);
  for (int64_t e = 1; e < fd.num_events(); ++e) ASSERT_EQ(fp[e * k_count], fp[0]);
}

TEST(SyntheticRanking, InvalidArguments) {
  SyntheticArgs a = ranking_args();
  a.num_tasks = 17;
  EXPECT_NE(test::error_of([&] { generate_synthetic(a); }).find("num_tasks"), std::string::npos);
  a = ranking_args();
  a.contextual_noise = 1.5;
  EXPECT_NE(test::error_of([&] { generate_synthetic(a); }).find("contextual_noise"),
            std::string::npos);
  a = ranking_args();
  a.contextual_cardinality = 0;
  EXPECT_NE(test::error_of([&] { generate_synthetic(a); }).find("contextual_cardinality"),
            std::string::npos);
  // The probabilities refuse a dataset other args generated, and args without tasks.
  const SequenceDataset ds = generate_synthetic(ranking_args());
  SyntheticArgs other = ranking_args();
  other.seed = 7;
  EXPECT_NE(test::error_of([&] { synthetic_label_probabilities(other, ds); }).find("not the one"),
            std::string::npos);
  other = ranking_args();
  other.num_tasks = 0;
  EXPECT_NE(test::error_of([&] { synthetic_label_probabilities(other, ds); }).find("num_tasks"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
