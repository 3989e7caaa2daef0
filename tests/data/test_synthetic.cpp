// test_synthetic.cpp — the synthetic generator: determinism, invariants, the planted structure
// (successor chain, preferred clusters, cluster popularity) and the length distributions.
//
// Structure checks compare against chance levels with wide margins, so they test the planted
// signal, not particular random draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/data_test_util.h"
#include "data/synthetic.h"

namespace hstu {
namespace {

SyntheticArgs small_args() {
  SyntheticArgs a;
  a.num_users = 400;
  a.num_items = 1000;
  a.num_clusters = 10;
  a.clusters_per_user = 2;
  a.min_seqlen = 5;
  a.max_seqlen = 80;
  a.seqlen_dist = {"lognormal", 5, -1, 40, 20, 1.5};
  return a;
}

TEST(Synthetic, Deterministic) {
  const SyntheticArgs a = small_args();
  const SequenceDataset x = generate_synthetic(a), y = generate_synthetic(a);
  auto eq = [](auto p, auto q) { return std::equal(p.begin(), p.end(), q.begin(), q.end()); };
  EXPECT_TRUE(eq(x.user_offsets, y.user_offsets));
  EXPECT_TRUE(eq(x.items, y.items));
  EXPECT_TRUE(eq(x.actions, y.actions));
  EXPECT_TRUE(eq(x.timestamps, y.timestamps));
  SyntheticArgs b = a;
  b.seed = 43;
  EXPECT_FALSE(eq(x.items, generate_synthetic(b).items));
  // A user's events do not depend on how many users there are.
  SyntheticArgs fewer = a;
  fewer.num_users = 10;
  const SequenceDataset z = generate_synthetic(fewer);
  EXPECT_TRUE(std::equal(z.items.begin(), z.items.end(), x.items.begin()));
}

TEST(Synthetic, Invariants) {
  const SyntheticArgs a = small_args();
  const SequenceDataset ds = generate_synthetic(a);
  EXPECT_EQ(ds.num_items, a.num_items + 1);
  EXPECT_EQ(ds.num_actions, 6);
  EXPECT_EQ(ds.num_users(), a.num_users);
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    EXPECT_GE(ds.seq_len(u), a.min_seqlen);
    EXPECT_LE(ds.seq_len(u), a.max_seqlen);
    std::set<int32_t> items;
    for (int64_t e = ds.user_offsets[u]; e < ds.user_offsets[u + 1]; ++e) {
      EXPECT_TRUE(items.insert(ds.items[e]).second) << "user " << u << " repeats an item";
      if (e > ds.user_offsets[u]) {
        EXPECT_GT(ds.timestamps[e], ds.timestamps[e - 1]);
      }
      EXPECT_GE(ds.actions[e], 1);
      EXPECT_LE(ds.actions[e], 5);
    }
  }
  // Lengths are capped at the catalogue size (no repeats).
  SyntheticArgs tiny = a;
  tiny.num_items = 20;
  tiny.num_clusters = 4;
  const SequenceDataset t = generate_synthetic(tiny);
  for (int64_t u = 0; u < t.num_users(); ++u) EXPECT_LE(t.seq_len(u), 20);
}

TEST(Synthetic, PlantedStructure) {
  const SyntheticArgs a = small_args();
  const SequenceDataset ds = generate_synthetic(a);
  const SyntheticTruth truth = synthetic_truth(a);
  // Every item has a successor in its own cluster.
  for (int32_t i = 1; i <= a.num_items; ++i) {
    EXPECT_EQ(truth.cluster_of[truth.successor[i]], truth.cluster_of[i]);
  }
  int64_t pairs = 0, planted = 0, same_cluster = 0;
  std::vector<int64_t> cluster_events(a.num_clusters, 0);
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    for (int64_t e = ds.user_offsets[u]; e < ds.user_offsets[u + 1]; ++e) {
      ++cluster_events[truth.cluster_of[ds.items[e]]];
      if (e == ds.user_offsets[u]) continue;
      ++pairs;
      planted += ds.items[e] == truth.successor[ds.items[e - 1]];
      same_cluster += truth.cluster_of[ds.items[e]] == truth.cluster_of[ds.items[e - 1]];
    }
  }
  // Chance of a planted pair is 1/1000; the chain takes it with p = 0.8 * 0.7 (less noise
  // interruptions and walks past seen items).
  EXPECT_GT(static_cast<double>(planted) / pairs, 0.25);
  // Two preferred clusters out of ten: consecutive items share a cluster far above 1/10.
  EXPECT_GT(static_cast<double>(same_cluster) / pairs, 0.5);
  // Cluster popularity is Zipf-like: the most popular cluster beats the least popular.
  EXPECT_GT(cluster_events[0], 3 * cluster_events[a.num_clusters - 1]);
}

TEST(Synthetic, LengthDistributions) {
  PhiloxStream rng(7, 1);
  auto mean_of = [&](const RandomDistribution& d, int64_t lo, int64_t hi, int n = 20000) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t v = sample_distribution(d, lo, hi, rng);
      EXPECT_GE(v, lo);
      EXPECT_LE(v, hi);
      sum += static_cast<double>(v);
    }
    return sum / n;
  };
  EXPECT_NEAR(mean_of({"uniform", 10, 20, -1, -1, 1.5}, 0, 1000), 14.5, 0.2);
  EXPECT_NEAR(mean_of({"normal", 0, 1000, 300, 50, 1.5}, 0, 1000), 300, 3);
  EXPECT_NEAR(mean_of({"lognormal", 0, 100000, 200, 100, 1.5}, 0, 100000), 200, 5);
  // Zipf(2) on k >= 1 has P(1) = 1/zeta(2) = 0.608.
  int ones = 0;
  for (int i = 0; i < 20000; ++i) {
    ones += sample_distribution({"zipf", 1, -1, -1, -1, 2.0}, 1, 1000000, rng) == 1;
  }
  EXPECT_NEAR(ones / 20000.0, 0.608, 0.02);
  // Clamping to [min, max].
  EXPECT_EQ(sample_distribution({"uniform", 500, 600, -1, -1, 1.5}, 1, 50, rng), 50);
  EXPECT_NE(test::error_of([&] {
              sample_distribution({"poisson", 0, 10, -1, -1, 1.5}, 0, 9, rng);
            }).find("dist_type"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              sample_distribution({"zipf", 0, 10, -1, -1, 1.0}, 0, 9, rng);
            }).find("alpha"),
            std::string::npos);
}

TEST(Synthetic, InvalidArguments) {
  SyntheticArgs a = small_args();
  a.clusters_per_user = 11;
  EXPECT_NE(test::error_of([&] { generate_synthetic(a); }).find("clusters_per_user"),
            std::string::npos);
  a = small_args();
  a.cluster_stickiness = 1.5;
  EXPECT_NE(test::error_of([&] { generate_synthetic(a); }).find("cluster_stickiness"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
