// test_metric_selection.cpp — RetrievalMetrics::values(selected): RetrievalArgs.eval_metrics
// picks HR@K / NDCG@K at any K and MRR, in its order, ahead of the standard set.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/metrics.h"

namespace hstu {
namespace {

TEST(MetricSelection, AnyKInTheGivenOrderThenTheStandardSet) {
  RetrievalMetrics m;
  for (int64_t r : {1, 3, 5, 20, 30}) m.add(r);
  const NamedValues v = m.values({"NDCG@20", "HR@5", "MRR", "HR@10"});
  ASSERT_GE(v.size(), 4u);
  EXPECT_EQ(v[0].first, "NDCG@20");
  EXPECT_DOUBLE_EQ(v[0].second,
                   (1.0 + 1 / std::log2(4.0) + 1 / std::log2(6.0) + 1 / std::log2(21.0)) / 5);
  EXPECT_EQ(v[1].first, "HR@5");
  EXPECT_DOUBLE_EQ(v[1].second, 3.0 / 5);
  EXPECT_EQ(v[2].first, "MRR");
  EXPECT_DOUBLE_EQ(v[2].second, (1.0 + 1.0 / 3 + 1.0 / 5 + 1.0 / 20 + 1.0 / 30) / 5);
  EXPECT_EQ(v[3].first, "HR@10");
  EXPECT_DOUBLE_EQ(v[3].second, 3.0 / 5);
  // The standard set follows, without repeating what was selected.
  int hr10 = 0, ndcg10 = 0;
  for (const auto& [name, value] : v) {
    hr10 += name == "HR@10";
    ndcg10 += name == "NDCG@10";
  }
  EXPECT_EQ(hr10, 1);
  EXPECT_EQ(ndcg10, 1);
  EXPECT_EQ(v.size(), m.values().size() + 2);  // NDCG@20 and HR@5 are not standard
}

TEST(MetricSelection, UnknownNamesAreErrors) {
  RetrievalMetrics m;
  m.add(1);
  EXPECT_THROW(m.values({"AUC"}), Error);
  EXPECT_THROW(m.values({"HR@0"}), Error);
  EXPECT_THROW(m.values({"NDCG@"}), Error);
}

}  // namespace
}  // namespace hstu
