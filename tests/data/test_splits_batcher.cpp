// test_splits_batcher.cpp — leave-one-out splits on a hand-made dataset (exact samples for both
// modes), and the batcher: jagged layout, targets, query timestamps, shuffling and resuming.
//
// The hand-made dataset has users of lengths 5, 2, 1 and 4 so every skip rule is exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "common/data_test_util.h"
#include "data/batcher.h"
#include "data/splits.h"
#include "data/synthetic.h"

namespace hstu {
namespace {

// Events (global index: item @ time):
//   user 0: 0:1@10  1:2@20  2:3@30  3:4@40  4:5@50
//   user 1: 5:6@10  6:7@20
//   user 2: 7:8@10
//   user 3: 8:2@10  9:4@20  10:6@30  11:8@40
SequenceDataset handmade() {
  SequenceDataset ds = test::make_dataset({{{1, 2, 3, 4, 5}, {}, {1, 2, 3, 4, 5}},
                                           {{6, 7}, {}, {5, 4}},
                                           {{8}, {}, {3}},
                                           {{2, 4, 6, 8}, {}, {1, 1, 2, 2}}},
                                          9, 6);
  return ds;
}

bool same(const Sample& a, const Sample& b) {
  return a.user == b.user && a.begin == b.begin && a.end == b.end && a.target == b.target;
}

void expect_samples(const Split& split, const std::vector<Sample>& expected, int64_t skipped) {
  ASSERT_EQ(split.samples.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Sample& s = split.samples[i];
    EXPECT_TRUE(same(s, expected[i])) << "sample " << i << ": user " << s.user << " [" << s.begin
                                      << ", " << s.end << ") -> " << s.target;
  }
  EXPECT_EQ(split.skipped_users, skipped);
}

TEST(Splits, PaperMode) {
  const SequenceDataset ds = handmade();
  const DataSplits s = make_splits(ds, "paper", 2);
  expect_samples(s.train, {{0, 1, 3, 3}, {3, 8, 10, 10}}, 2);
  expect_samples(s.test, {{0, 2, 4, 4}, {1, 5, 6, 6}, {3, 9, 11, 11}}, 1);
  EXPECT_TRUE(s.validation.samples.empty());
  // A long history window keeps everything before the target.
  const DataSplits full = make_splits(ds, "paper", 200);
  expect_samples(full.train, {{0, 0, 3, 3}, {3, 8, 10, 10}}, 2);
}

TEST(Splits, ValidationMode) {
  const SequenceDataset ds = handmade();
  const DataSplits s = make_splits(ds, "validation", 2);
  expect_samples(s.train, {{0, 0, 2, 2}, {3, 8, 9, 9}}, 2);
  expect_samples(s.validation, {{0, 1, 3, 3}, {3, 8, 10, 10}}, 2);
  expect_samples(s.test, {{0, 2, 4, 4}, {1, 5, 6, 6}, {3, 9, 11, 11}}, 1);
  EXPECT_NE(test::error_of([&] { make_splits(ds, "kfold", 2); }).find("paper, validation"),
            std::string::npos);
}

TEST(Batcher, BatchContents) {
  const SequenceDataset ds = handmade();
  const DataSplits s = make_splits(ds, "paper", 3);
  // test samples: user 0 [1, 4) -> 4, user 1 [5, 6) -> 6, user 3 [8, 11) -> 11
  Batcher batcher(ds, s.test, 2, /*shuffle=*/false, 1);
  EXPECT_EQ(batcher.num_batches(), 2);
  SequenceBatch b;
  batcher.next(b);
  EXPECT_EQ(b.batch_size, 2);
  EXPECT_EQ(b.max_seqlen, 3);
  EXPECT_EQ(b.offsets, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.item_ids, (std::vector<int32_t>{2, 3, 4, 6}));
  EXPECT_EQ(b.actions, (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(b.timestamps, (std::vector<int64_t>{20, 30, 40, 10}));
  EXPECT_EQ(b.target_ids, (std::vector<int32_t>{3, 4, 5, 7}));
  EXPECT_EQ(b.query_timestamps, (std::vector<int64_t>{30, 40, 50, 20}));
  EXPECT_EQ(b.eval_targets, (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(b.user_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(b.num_candidates, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(b.num_tokens(), 4);
  batcher.next(b);  // the last batch is smaller
  EXPECT_EQ(b.batch_size, 1);
  EXPECT_EQ(b.offsets, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(b.item_ids, (std::vector<int32_t>{2, 4, 6}));  // events 8, 9, 10
  EXPECT_EQ(b.target_ids, (std::vector<int32_t>{4, 6, 8}));
  EXPECT_EQ(b.query_timestamps, (std::vector<int64_t>{20, 30, 40}));
  EXPECT_EQ(b.eval_targets, (std::vector<int32_t>{8}));
  EXPECT_EQ(batcher.epoch(), 1);
  EXPECT_EQ(batcher.batch_index(), 0);
}

TEST(Batcher, ContextualFeatures) {
  SequenceDataset ds = test::make_dataset({{{1, 2, 3}}, {{3, 2}}}, 4);
  std::vector<int32_t> ctx = {1, 5, 2, 6};  // [U=2, C=2]
  ds.contextual_values = ctx;
  ds.contextual_names = {"a", "b"};
  ds.contextual_cardinalities = {3, 7};
  const DataSplits s = make_splits(ds, "paper", 10);
  Batcher batcher(ds, s.test, 4, false, 0);
  SequenceBatch b;
  batcher.next(b);
  EXPECT_EQ(b.contextual, (std::vector<int32_t>{1, 5, 2, 6}));
  EXPECT_TRUE(b.actions.empty());
}

SyntheticArgs batcher_data() {
  SyntheticArgs a;
  a.num_users = 103;
  a.num_items = 300;
  a.num_clusters = 5;
  a.min_seqlen = 3;
  a.max_seqlen = 30;
  return a;
}

TEST(Batcher, ShuffleIsSeededPerEpoch) {
  const SequenceDataset ds = generate_synthetic(batcher_data());
  const DataSplits s = make_splits(ds, "paper", 200);
  Batcher a(ds, s.train, 10, true, 99), b(ds, s.train, 10, true, 99), c(ds, s.train, 10, true, 7);
  const std::vector<int64_t> a0(a.order(0).begin(), a.order(0).end());
  const std::vector<int64_t> a1(a.order(1).begin(), a.order(1).end());
  const std::vector<int64_t> b0(b.order(0).begin(), b.order(0).end());
  const std::vector<int64_t> c0(c.order(0).begin(), c.order(0).end());
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, c0);
  std::vector<int64_t> sorted = a1;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(sorted.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);  // a permutation
  Batcher eval(ds, s.test, 10, false, 99);
  const std::vector<int64_t> e1(eval.order(1).begin(), eval.order(1).end());
  identity.resize(s.test.samples.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(e1, identity);
}

TEST(Batcher, ResumesAtAPosition) {
  const SequenceDataset ds = generate_synthetic(batcher_data());
  const DataSplits s = make_splits(ds, "paper", 200);
  Batcher run(ds, s.train, 16, true, 5);
  ASSERT_EQ(run.num_batches(), 7);  // 103 users -> 7 batches, the last of 7
  std::vector<SequenceBatch> seen;
  for (int i = 0; i < 17; ++i) {
    seen.emplace_back();
    run.next(seen.back());
  }
  EXPECT_EQ(seen[6].batch_size, 7);
  EXPECT_EQ(run.epoch(), 2);
  EXPECT_EQ(run.batch_index(), 3);
  // A fresh batcher at (epoch 1, batch 2) continues exactly as the first one did.
  Batcher resumed(ds, s.train, 16, true, 5);
  resumed.set_position(1, 2);
  for (int i = 9; i < 17; ++i) {
    SequenceBatch b;
    resumed.next(b);
    EXPECT_EQ(b.item_ids, seen[i].item_ids) << i;
    EXPECT_EQ(b.offsets, seen[i].offsets) << i;
    EXPECT_EQ(b.user_ids, seen[i].user_ids) << i;
  }
  resumed.set_position(0, 7);  // the end of epoch 0 is the start of epoch 1
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(resumed.batch_index(), 0);
  EXPECT_NE(test::error_of([&] { resumed.set_position(0, 8); }).find("outside an epoch"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
