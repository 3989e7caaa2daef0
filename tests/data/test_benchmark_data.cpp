// test_benchmark_data.cpp — recsys-examples' random benchmark batches: fixed or distributed
// lengths shared by a feature group, ids within their table or from their distribution,
// candidates, labels, determinism and cycling, and the length histogram.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "config/benchmark_args.h"
#include "config/gin.h"
#include "data/benchmark_data.h"

namespace hstu {
namespace {

BenchmarkDatasetArgs args(bool jagged, int64_t candidates) {
  BenchmarkDatasetArgs a;
  BenchmarkFeature items;
  items.feature_names = {"item", "action"};
  items.max_sequence_length = 512;
  items.is_jagged = jagged;
  items.seqlen_dist = RandomDistribution{"zipf", 1, -1, -1, -1, 1.5};
  items.value_dists["item"] = RandomDistribution{"zipf", 0, -1, -1, -1, 1.2};
  BenchmarkFeature user;
  user.feature_names = {"user_age"};
  user.max_sequence_length = 1;
  a.features = {items, user};
  a.tables = {{"item", {"item"}, 0, true},
              {"action", {"action"}, 100, false},
              {"age", {"user_age"}, 7, false}};
  a.item_feature_name = "item";
  a.action_feature_name = "action";
  a.contextual_feature_names = {"user_age"};
  a.max_num_candidates = candidates;
  a.num_generated_batches = 3;
  return a;
}

TEST(BenchmarkData, FixedLengthsWhenNotJagged) {
  const BenchmarkBatch b = benchmark_batch(args(false, 0), 4, 8, 7, 0);
  const BenchmarkFeatureData& item = b.feature("item");
  EXPECT_EQ(item.offsets, (std::vector<int32_t>{0, 512, 1024, 1536, 2048}));
  EXPECT_EQ(b.feature("action").offsets, item.offsets);
  EXPECT_EQ(b.feature("user_age").offsets, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // No candidates: every item carries a label, uniform in [0, 2^8).
  EXPECT_EQ(b.num_candidates, (std::vector<int32_t>{0, 0, 0, 0}));
  ASSERT_EQ(b.labels.size(), 2048u);
  EXPECT_GE(*std::min_element(b.labels.begin(), b.labels.end()), 0);
  EXPECT_LT(*std::max_element(b.labels.begin(), b.labels.end()), 256);
  EXPECT_GT(*std::max_element(b.labels.begin(), b.labels.end()), 200);
}

TEST(BenchmarkData, ZipfLengthsAndValuesWithinTheirTables) {
  const BenchmarkBatch b = benchmark_batch(args(true, 20), 2000, 3, 11, 1);
  const BenchmarkFeatureData& item = b.feature("item");
  std::vector<int64_t> lengths;
  for (size_t s = 0; s + 1 < item.offsets.size(); ++s)
    lengths.push_back(item.offsets[s + 1] - item.offsets[s]);
  EXPECT_EQ(b.feature("action").offsets, item.offsets);             // one length per group
  EXPECT_GE(*std::min_element(lengths.begin(), lengths.end()), 1);  // low = 1
  EXPECT_LT(*std::max_element(lengths.begin(), lengths.end()), 512);
  // Zipf(1.5) from 1: P(1) = 1 / zeta(1.5) = 0.383; the mass is at short lengths.
  const double ones = static_cast<double>(std::count(lengths.begin(), lengths.end(), 1));
  EXPECT_NEAR(ones / 2000, 0.383, 0.04);
  std::vector<int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_LE(sorted[1000], 3);  // median
  for (int64_t v : b.feature("action").values) EXPECT_TRUE(v >= 0 && v < 100) << v;
  for (int64_t v : b.feature("user_age").values) EXPECT_TRUE(v >= 0 && v < 7) << v;
  // Item ids: Zipf(1.2) from 0, so id 0 is the most frequent by far.
  const auto& ids = item.values;
  const double zeros = static_cast<double>(std::count(ids.begin(), ids.end(), 0));
  EXPECT_GT(zeros / static_cast<double>(ids.size()), 0.1);
  // Candidates: min(length, 20); labels one per candidate, in [0, 8).
  int64_t total = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    EXPECT_EQ(b.num_candidates[s], std::min<int64_t>(lengths[s], 20));
    total += b.num_candidates[s];
  }
  EXPECT_EQ(static_cast<int64_t>(b.labels.size()), total);
  for (int64_t l : b.labels) EXPECT_TRUE(l >= 0 && l < 8);
}

TEST(BenchmarkData, DeterministicAndCycledOverTheGeneratedBatches) {
  const BenchmarkDatasetArgs a = args(true, 5);
  const BenchmarkBatch x = benchmark_batch(a, 16, 2, 3, 1), y = benchmark_batch(a, 16, 2, 3, 4),
                       z = benchmark_batch(a, 16, 2, 3, 2);
  EXPECT_EQ(x.feature("item").values, y.feature("item").values);  // 4 = 1 mod 3
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_NE(x.feature("item").offsets, z.feature("item").offsets);
}

// recsys-examples' benchmark_ranking.gin, unchanged: is_jagged = False, so every sample has
// 4096 items and actions (its zipf seqlen_dist is defined but unused, as there); item ids Zipf(1.2)
// below its 50M-row dynamic table's unbounded range, actions below 100.
TEST(BenchmarkData, RecsysExamplesBenchmarkRankingFile) {
  const std::string path = std::string(HSTU_SOURCE_DIR) +
                           "/../shared/peer-configs/recsys-examples/examples/hstu/training/"
                           "configs/benchmark_ranking.gin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (../shared is absent)";
  const auto a = parse_benchmark_args(gin::parse_file(path));
  ASSERT_TRUE(a);
  const BenchmarkBatch b = benchmark_batch(*a, 32, 8, 1234, 0);
  std::vector<int64_t> lengths;
  const BenchmarkFeatureData& item = b.feature("item");
  for (size_t s = 0; s + 1 < item.offsets.size(); ++s)
    lengths.push_back(item.offsets[s + 1] - item.offsets[s]);
  std::cout << "benchmark_ranking.gin item lengths:\n" << length_histogram(lengths, 4096, 4);
  EXPECT_EQ(lengths, std::vector<int64_t>(32, 4096));
  for (int64_t v : b.feature("action").values) ASSERT_TRUE(v >= 0 && v < 100) << v;
  EXPECT_EQ(b.labels.size(), 32u * 4096u);  // no candidates: every item is labelled
}

TEST(BenchmarkData, LengthHistogram) {
  EXPECT_EQ(length_histogram({0, 1, 1, 5, 9}, 9, 2),
            "[     0,      5)         3  ########################################\n"
            "[     5,     10)         2  ##########################\n");
}

}  // namespace
}  // namespace hstu
