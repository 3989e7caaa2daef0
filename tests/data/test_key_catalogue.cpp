// test_key_catalogue.cpp — KeyCatalogue (sorted unique keys, index <-> key) and the raw-id
// negative sampler: its per-element formula, determinism per (seed, step, position), the
// data-parallel offset, and equality with the dense uniform sampler over the full catalogue.
#include <gtest/gtest.h>

#include <map>

#include "common/data_test_util.h"
#include "core/philox.h"
#include "data/key_catalogue.h"
#include "data/key_hash.h"
#include "data/key_negatives.h"
#include "data/negatives.h"
#include "data/preprocess.h"

namespace hstu {
namespace {

using test::error_of;

TEST(KeyCatalogue, SortedUniqueWithIndexAndKeyMaps) {
  const KeyCatalogue c({900, 7, 0, 7, 123456789012345, 900});
  EXPECT_EQ(c.size(), 4);
  EXPECT_EQ(std::vector<int64_t>(c.keys().begin(), c.keys().end()),
            (std::vector<int64_t>{0, 7, 900, 123456789012345}));
  for (int64_t i = 0; i < c.size(); ++i) EXPECT_EQ(c.index(c.key(i)), i);
  EXPECT_EQ(c.index(8), -1);
  EXPECT_EQ(c.index(kNoKey), -1);
  EXPECT_TRUE(c.contains(0));
  EXPECT_FALSE(c.contains(1));
  EXPECT_EQ(error_of([] {
              KeyCatalogue({3, kNoKey}, "test keys");
            }),
            "test keys: key -1 is negative (keys are >= 0; -1 marks no item)");
}

// A raw-id dataset: users' items as keys (key = 1000 + dense id), catalogue of 6 keys.
SequenceDataset keyed_dataset() {
  const SequenceDataset dense =
      test::make_dataset({test::UserEvents({1, 2, 3, 4}), test::UserEvents({5, 2, 6})}, 7);
  std::vector<int64_t> key(7);
  for (int64_t i = 0; i < 7; ++i) key[static_cast<size_t>(i)] = 1000 + i;
  return with_raw_keys(dense, key, "test");
}

TEST(KeyCatalogue, FromTheDatasetAndFromATrainingSplit) {
  const SequenceDataset ds = keyed_dataset();
  const KeyCatalogue all = dataset_key_catalogue(ds);
  EXPECT_EQ(std::vector<int64_t>(all.keys().begin(), all.keys().end()),
            (std::vector<int64_t>{1001, 1002, 1003, 1004, 1005, 1006}));
  // paper split, train: user 0 history {1,2} target 3; user 1 history {5} target 2.
  const DataSplits s = make_splits(ds, "paper", 10);
  const KeyCatalogue train = split_key_catalogue(ds, s.train);
  EXPECT_EQ(std::vector<int64_t>(train.keys().begin(), train.keys().end()),
            (std::vector<int64_t>{1001, 1002, 1003, 1005}));
  // Dense datasets: the ids themselves.
  const SequenceDataset dense = test::make_dataset({test::UserEvents({1, 2, 3, 4})}, 5);
  const KeyCatalogue d = dataset_key_catalogue(dense);
  EXPECT_EQ(std::vector<int64_t>(d.keys().begin(), d.keys().end()),
            (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(KeyNegatives, FormulaDeterminismAndOffset) {
  const std::vector<int64_t> keys = {3, 10, 42, 77, 1000000000000, 5};  // any span of keys
  const int64_t tokens = 9, r = 5;
  std::vector<int64_t> out(tokens * r), again(tokens * r);
  sample_key_negatives(keys, tokens, r, 1234, 17, out);
  sample_key_negatives(keys, tokens, r, 1234, 17, again);
  EXPECT_EQ(out, again);
  // The formula, written out with the Philox generator itself.
  for (int64_t e = 0; e < tokens * r; ++e) {
    const Philox4 p = philox4x32(1234, (uint64_t{17} << 32) + (e >> 2), 0x4e454731u);
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
    const uint64_t idx = (static_cast<uint64_t>(w[e & 3]) * keys.size()) >> 32;
    ASSERT_EQ(out[e], keys[idx]) << e;
  }
  // Another step draws others; a rank whose tokens start at 4 draws the global batch's rows.
  std::vector<int64_t> other(tokens * r);
  sample_key_negatives(keys, tokens, r, 1234, 18, other);
  EXPECT_NE(out, other);
  std::vector<int64_t> tail((tokens - 4) * r);
  sample_key_negatives(keys, tokens - 4, r, 1234, 17, tail, 4);
  EXPECT_EQ(tail, std::vector<int64_t>(out.begin() + 4 * r, out.end()));
  std::vector<int64_t> none;
  EXPECT_EQ(
      error_of([&] { sample_key_negatives(none, 1, 1, 1, 1, std::span<int64_t>(out).first(1)); }),
      "key negatives: the key span is empty (no keys to draw from)");
}

// Over the dataset's full catalogue, the raw-id sampler draws the keys of the dense uniform
// sampler's ids: the same negatives in both modes.
TEST(KeyNegatives, EqualTheDenseUniformSamplerOverTheCatalogue) {
  const SequenceDataset ds = keyed_dataset();
  const KeyCatalogue all = dataset_key_catalogue(ds);
  const int64_t tokens = 40, r = 8;
  std::vector<int32_t> dense(tokens * r);
  sample_uniform_negatives(7, tokens, r, 99, 3, dense, 2);
  std::vector<int64_t> keyed(tokens * r);
  sample_key_negatives(all.keys(), tokens, r, 99, 3, keyed, 2);
  for (size_t i = 0; i < dense.size(); ++i) ASSERT_EQ(keyed[i], 1000 + dense[i]) << i;
  // The draw is uniform: every key appears, none dominates (320 draws over 6 keys).
  std::map<int64_t, int> counts;
  for (const int64_t k : keyed) ++counts[k];
  EXPECT_EQ(counts.size(), 6u);
  for (const auto& [k, n] : counts) EXPECT_LT(n, 100) << k;
}

TEST(KeyNegatives, InBatchPoolSkipsNoKey) {
  EXPECT_EQ(in_batch_key_pool(std::vector<int64_t>{9, kNoKey, 0, 9, 4}),
            (std::vector<int64_t>{0, 4, 9}));
}

}  // namespace
}  // namespace hstu
