// test_movielens_small.cpp — integration test on the real ml-latest-small (2016 snapshot) in
// HSTU_SHARED_DATA_DIR: reader counts, catalogue, sorting, the cached preprocessed file, splits
// and the popularity baseline. Skipped when the data is not there.
//
// Expected counts are independent facts about the snapshot (its PROVENANCE.md), not values
// read back from this code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/data_test_util.h"
#include "data/popularity.h"
#include "data/preprocess.h"
#include "data/splits.h"

namespace hstu {
namespace {

const std::string kDir = std::string(HSTU_SHARED_DATA_DIR) + "/ml-latest-small";

TEST(MovieLensSmall, ReadAndPreprocess) {
  if (!std::filesystem::exists(kDir + "/ratings.csv")) GTEST_SKIP() << kDir << " not found";
  const RawData raw = read_movielens_csv(kDir, "ml-latest-small");
  EXPECT_EQ(raw.events.size(), 100004u);
  EXPECT_EQ(raw.num_malformed, 0);
  EXPECT_EQ(raw.catalogue.size(), 9125u);  // rows of movies.csv
  std::set<int64_t> rated;
  for (const RawEvent& ev : raw.events) rated.insert(ev.item);
  EXPECT_EQ(rated.size(), 9066u);
  const std::set<int64_t> catalogue(raw.catalogue.begin(), raw.catalogue.end());
  EXPECT_EQ(catalogue.size(), 9125u);
  for (const int64_t id : rated) EXPECT_TRUE(catalogue.count(id)) << id;
  EXPECT_EQ(*catalogue.rbegin(), 164979);

  test::TempDir cache;
  Config cfg;
  cfg.dataset.dataset_name = "ml-latest-small";
  cfg.dataset.dataset_path = kDir;
  cfg.dataset.cache_dir = cache.path();
  const SequenceDataset ds = open_dataset(cfg);
  EXPECT_EQ(ds.num_users(), 671);
  EXPECT_EQ(ds.num_events(), 100004);
  EXPECT_EQ(ds.num_items, 9126);  // 9125 movies + padding
  EXPECT_EQ(ds.num_actions, 11);
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    EXPECT_GE(ds.seq_len(u), 20);  // every MovieLens user has >= 20 ratings
    for (int64_t e = ds.user_offsets[u] + 1; e < ds.user_offsets[u + 1]; ++e) {
      ASSERT_LE(ds.timestamps[e - 1], ds.timestamps[e]) << "user " << u;
    }
  }
  // Raw user 1 (dense 0) rated movie 31 first in the file at t=1260759144.
  std::ifstream users(cache.file("ml-latest-small/user_ids.csv"));
  std::string header, first;
  std::getline(users, header);
  std::getline(users, first);
  EXPECT_EQ(first, "0,1");

  const DataSplits s = make_splits(ds, "paper", 200);
  EXPECT_EQ(s.train.samples.size(), 671u);
  EXPECT_EQ(s.test.samples.size(), 671u);
  const std::vector<int64_t> counts = popularity_counts(ds, s.train);
  const std::vector<int32_t> ranks = popularity_ranks(ds, s.test, counts);
  double hr10 = 0;
  for (const int32_t r : ranks) hr10 += r <= 10;
  hr10 /= static_cast<double>(ranks.size());
  // Popularity is a weak but real baseline: above chance (10 / 9125), far below 1.
  EXPECT_GT(hr10, 0.005);
  EXPECT_LT(hr10, 0.2);
  std::printf("ml-latest-small popularity HR@10 = %.4f\n", hr10);
}

}  // namespace
}  // namespace hstu
