// test_negatives_popularity.cpp — the negative samplers (range, determinism, the documented
// per-element formula, in-batch pool membership and dedup) and the popularity baseline's ranks.
//
// The formula test recomputes element values straight from philox4x32, pinning the contract
// that the CUDA kernel has to meet.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "common/data_test_util.h"
#include "data/negatives.h"
#include "data/negatives_rng.h"
#include "data/popularity.h"

namespace hstu {
namespace {

TEST(Negatives, UniformRangeDeterminismAndFormula) {
  const int64_t items = 50, tokens = 37, r = 16;
  std::vector<int32_t> a(tokens * r), b(tokens * r), c(tokens * r);
  sample_uniform_negatives(items, tokens, r, 1234, 7, a);
  sample_uniform_negatives(items, tokens, r, 1234, 7, b);
  sample_uniform_negatives(items, tokens, r, 1234, 8, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> hist(items, 0);
  for (const int32_t id : a) {
    ASSERT_GE(id, 1);
    ASSERT_LT(id, items);
    ++hist[id];
  }
  EXPECT_EQ(hist[0], 0);
  for (int64_t i = 1; i < items; ++i) EXPECT_GT(hist[i], 0) << i;  // 592 draws over 49 ids
  // The documented formula, element by element.
  for (const uint64_t e : {uint64_t{0}, uint64_t{1}, uint64_t{6}, uint64_t{tokens * r - 1}}) {
    const Philox4 p = philox4x32(1234, (uint64_t{7} << 32) + (e >> 2), kNegativeStream);
    const uint32_t words[4] = {p.x, p.y, p.z, p.w};
    const int32_t expected = 1 + static_cast<int32_t>((uint64_t{words[e & 3]} * 49) >> 32);
    EXPECT_EQ(a[e], expected) << e;
  }
  // A token's row depends on its index only, not on the batch size.
  std::vector<int32_t> prefix(10 * r);
  sample_uniform_negatives(items, 10, r, 1234, 7, prefix);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
}

TEST(Negatives, InBatchPool) {
  const std::vector<int32_t> targets = {5, 3, 0, 5, 9, 3, 0, 12};
  const std::vector<int32_t> pool = in_batch_pool(targets);
  EXPECT_EQ(pool, (std::vector<int32_t>{3, 5, 9, 12}));
  std::vector<int32_t> out(8 * 32);
  sample_in_batch_negatives(pool, 8, 32, 3, 0, out);
  std::set<int32_t> drawn(out.begin(), out.end());
  EXPECT_EQ(drawn, std::set<int32_t>(pool.begin(), pool.end()));  // members only, all reached
  std::vector<int32_t> again(out.size());
  sample_in_batch_negatives(pool, 8, 32, 3, 0, again);
  EXPECT_EQ(out, again);
}

TEST(Negatives, FromBatch) {
  SequenceBatch batch;
  batch.offsets = {0, 3};
  batch.target_ids = {4, 4, 2};
  const std::vector<int32_t> ib = sample_negatives("in_batch", batch, 10, 5, 1, 2);
  ASSERT_EQ(ib.size(), 15u);
  for (const int32_t id : ib) EXPECT_TRUE(id == 2 || id == 4);
  const std::vector<int32_t> un = sample_negatives("uniform", batch, 10, 5, 1, 2);
  std::vector<int32_t> direct(15);
  sample_uniform_negatives(10, 3, 5, 1, 2, direct);
  EXPECT_EQ(un, direct);
  EXPECT_NE(test::error_of([&] {
              sample_negatives("popular", batch, 10, 5, 1, 2);
            }).find("uniform, in_batch"),
            std::string::npos);
}

TEST(Popularity, CountsAndRanks) {
  // user 0: 1 2 3 4 | user 1: 2 3 5 | user 2: 3 1 6 2
  const SequenceDataset ds = test::make_dataset({{{1, 2, 3, 4}}, {{2, 3, 5}}, {{3, 1, 6, 2}}}, 8);
  const DataSplits s = make_splits(ds, "paper", 2);
  const std::vector<int64_t> counts = popularity_counts(ds, s.train);
  // Training prefixes: 1 2 3 | 2 3 | 3 1 6.
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 2, 2, 3, 0, 0, 1, 0}));
  // Order by (count desc, id asc): 3, 1, 2, 6, 4, 5, 7.
  // user 0: history {2, 3}, target 4: ahead 3, 1, 2, 6; 3 and 2 filtered -> rank 3.
  // user 1: history {2, 3}, target 5: ahead 3, 1, 2, 6, 4 -> rank 6 - 2 = 4.
  // user 2: history {1, 6}, target 2: ahead 3, 1 (tie with 2, smaller id); 1 filtered -> 2.
  const std::vector<int32_t> ranks = popularity_ranks(ds, s.test, counts);
  EXPECT_EQ(ranks, (std::vector<int32_t>{3, 4, 2}));
  EXPECT_EQ(popularity_ranks(ds, s.test, counts, 2), (std::vector<int32_t>{3, 3, 2}));
  // A cap beyond the catalogue changes nothing (rank_cap + 1 used to overflow).
  EXPECT_EQ(popularity_ranks(ds, s.test, counts, INT64_MAX), ranks);
}

}  // namespace
}  // namespace hstu
