// test_ranking_samples.cpp — ranking splits and batches on hand-made datasets, and MovieLens-1M
// ranking batches with contextual features from a users.dat fixture.
//
// Asserts:
//  - the time split gives exactly the documented windows (eval = the newest C events, train =
//    the C before them, each with the newest <= H history events) and skips short users;
//  - user_70_30 drops users with n <= C, trains on the first int(0.7 N) users (62 of 90, as
//    recsys-examples' double arithmetic gives) and truncates to the oldest or newest H + C;
//  - C = 0 (recsys-examples: every item scored) with user_70_30: every user kept, each sample's
//    kept <= H events all candidates (no history), its batch scoring and labelling each event;
//    refused with the time split, naming user_70_30;
//  - make_ranking_batch fills every SequenceBatch field exactly; ranking_labels are the
//    candidates' actions; ranking_layout on the batch gives the recsys-examples positions;
//  - ranking_batcher visits every sample once per epoch in a seed-determined order;
//  - an ML-1M folder read, preprocessed and batched carries users.dat's codes per sample;
//  - bad options raise hstu::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/data_test_util.h"
#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/readers.h"
#include "ops/jagged.h"

namespace hstu {
namespace {

using test::make_dataset;
using test::UserEvents;

DatasetArgs args(int64_t h, int64_t c) {
  DatasetArgs a;
  a.max_history_seqlen = h;
  a.max_num_candidates = c;
  return a;
}

// Users of 3, 5, 10 and 2 events (global offsets 0, 3, 8, 18, 20); item = 100 * user + index,
// action = index, timestamps 10, 20, ...
SequenceDataset four_users() {
  std::vector<UserEvents> users;
  int u = 0;
  for (int n : {3, 5, 10, 2}) {
    std::vector<int32_t> items, actions;
    for (int i = 0; i < n; ++i) {
      items.push_back(100 * u + i + 1);
      actions.push_back(i);
    }
    users.emplace_back(items, std::vector<int64_t>{}, actions);
    ++u;
  }
  SequenceDataset ds = make_dataset(users, 400, 16);
  return ds;
}

struct Expect {
  int32_t user;
  int64_t begin, candidates, end;
};

void expect_samples(const RankingSplit& s, const std::vector<Expect>& want, int64_t skipped) {
  EXPECT_EQ(s.skipped_users, skipped);
  ASSERT_EQ(s.samples.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(s.samples[i].user, want[i].user);
    EXPECT_EQ(s.samples[i].begin, want[i].begin);
    EXPECT_EQ(s.samples[i].candidates, want[i].candidates);
    EXPECT_EQ(s.samples[i].end, want[i].end);
  }
}

TEST(RankingSplits, TimeSplitWindows) {
  const SequenceDataset ds = four_users();
  const RankingSplits s = make_ranking_splits(ds, args(3, 2));
  // u0 (n=3): eval only; u1 (n=5): both, history cut by the user's start; u2 (n=10): newest 3
  // history events; u3 (n=2): neither.
  expect_samples(s.eval, {{0, 0, 1, 3}, {1, 3, 6, 8}, {2, 13, 16, 18}}, 1);
  expect_samples(s.train, {{1, 3, 4, 6}, {2, 11, 14, 16}}, 2);
  // Every train window ends where its user's eval candidates begin.
  EXPECT_EQ(s.train.samples[1].end, s.eval.samples[2].candidates);
}

TEST(RankingSplits, TimeSplitMoreTrainWindows) {
  const SequenceDataset ds = four_users();
  DatasetArgs a = args(3, 2);
  a.ranking_train_windows = 0;  // every window with history
  const RankingSplits all = make_ranking_splits(ds, a);
  // Oldest rank first: u2's third window, its second, then every user's first (as W = 1).
  expect_samples(all.train, {{2, 8, 10, 12}, {2, 9, 12, 14}, {1, 3, 4, 6}, {2, 11, 14, 16}}, 2);
  expect_samples(all.eval, {{0, 0, 1, 3}, {1, 3, 6, 8}, {2, 13, 16, 18}}, 1);
  a.ranking_train_windows = 2;
  expect_samples(make_ranking_splits(ds, a).train, {{2, 9, 12, 14}, {1, 3, 4, 6}, {2, 11, 14, 16}},
                 2);
  // No train candidate is at or after its user's eval candidates.
  for (const RankingSample& t : all.train.samples) {
    for (const RankingSample& e : all.eval.samples) {
      if (t.user == e.user) {
        EXPECT_LE(t.end, e.candidates);
      }
    }
  }
  a.ranking_train_windows = -1;
  EXPECT_THROW(make_ranking_splits(ds, a), Error);
}

TEST(RankingSplits, User70_30) {
  const SequenceDataset ds = four_users();
  const RankingSplits oldest = make_ranking_splits(ds, args(3, 2), "user_70_30", "oldest");
  expect_samples(oldest.train, {{0, 0, 1, 3}, {1, 3, 6, 8}}, 1);
  expect_samples(oldest.eval, {{2, 8, 11, 13}}, 1);
  const RankingSplits newest = make_ranking_splits(ds, args(3, 2), "user_70_30", "newest");
  expect_samples(newest.train, {{0, 0, 1, 3}, {1, 3, 6, 8}}, 1);
  expect_samples(newest.eval, {{2, 13, 16, 18}}, 1);

  // 90 eligible users: int(90 * 0.7) = 62 in double arithmetic (63 in exact arithmetic).
  std::vector<UserEvents> users(90, UserEvents({1, 2, 3}, {}, {0, 1, 0}));
  const SequenceDataset many = make_dataset(users, 4, 2);
  const RankingSplits s = make_ranking_splits(many, args(5, 1), "user_70_30", "oldest");
  EXPECT_EQ(s.train.samples.size(), 62u);
  EXPECT_EQ(s.eval.samples.size(), 28u);
  EXPECT_EQ(s.eval.samples[0].user, 62);
}

TEST(RankingSplits, ZeroCandidatesScoreEveryKeptEvent) {
  const SequenceDataset ds = four_users();  // n = 3, 5, 10, 2 at offsets 0, 3, 8, 18
  // No user is dropped (n > 0); int(4 * 0.7) = 2 train users; each keeps <= H = 3 events, all
  // of them candidates (candidates == begin).
  const RankingSplits oldest = make_ranking_splits(ds, args(3, 0), "user_70_30", "oldest");
  expect_samples(oldest.train, {{0, 0, 0, 3}, {1, 3, 3, 6}}, 0);
  expect_samples(oldest.eval, {{2, 8, 8, 11}, {3, 18, 18, 20}}, 0);
  const RankingSplits newest = make_ranking_splits(ds, args(3, 0), "user_70_30", "newest");
  expect_samples(newest.train, {{0, 0, 0, 3}, {1, 5, 5, 8}}, 0);
  expect_samples(newest.eval, {{2, 15, 15, 18}, {3, 18, 18, 20}}, 0);

  // The batch scores every event: num_candidates = n_b, the labels are all the actions.
  SequenceBatch b;
  const std::vector<int64_t> idx = {0, 1};
  make_ranking_batch(ds, oldest.eval, idx, b);
  EXPECT_EQ(b.offsets, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(b.num_candidates, (std::vector<int32_t>{3, 2}));
  std::vector<int32_t> labels;
  ranking_labels(b, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 1, 2, 0, 1}));

  // The time split's windows are C events: refused, naming the split that works.
  const std::string msg = test::error_of([&] { make_ranking_splits(ds, args(3, 0)); });
  EXPECT_NE(msg.find("max_num_candidates = 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("user_70_30"), std::string::npos) << msg;
}

TEST(RankingSplits, RejectsBadOptions) {
  const SequenceDataset ds = four_users();
  EXPECT_THROW(make_ranking_splits(ds, args(3, -1), "user_70_30"), Error);
  EXPECT_THROW(make_ranking_splits(ds, args(0, 2)), Error);
  EXPECT_THROW(make_ranking_splits(ds, args(3, 2), "random"), Error);
  EXPECT_THROW(make_ranking_splits(ds, args(3, 2), "time", "middle"), Error);
  const std::string msg =
      test::error_of([&] { make_ranking_splits(ds, args(3, 2), "time", "oldest"); });
  EXPECT_NE(msg.find("user_70_30"), std::string::npos) << msg;
  const SequenceDataset no_actions = make_dataset({UserEvents({1, 2, 3})}, 4);
  EXPECT_THROW(make_ranking_splits(no_actions, args(3, 1)), Error);
}

TEST(RankingBatch, ExactContents) {
  SequenceDataset ds = four_users();
  const std::vector<int32_t> ctx = {1, 5, 2, 6, 0, 4, 1, 1};  // [U*C], C = 2
  ds.contextual_values = ctx;
  ds.contextual_names = {"a", "b"};
  ds.contextual_cardinalities = {3, 7};
  const RankingSplits s = make_ranking_splits(ds, args(3, 2));
  SequenceBatch b;
  const std::vector<int64_t> order = {2, 0};  // eval samples of users 2 and 0
  make_ranking_batch(ds, s.eval, order, b);
  EXPECT_EQ(b.batch_size, 2);
  EXPECT_EQ(b.offsets, (std::vector<int32_t>{0, 5, 8}));
  EXPECT_EQ(b.max_seqlen, 5);
  EXPECT_EQ(b.item_ids, (std::vector<int32_t>{206, 207, 208, 209, 210, 1, 2, 3}));
  EXPECT_EQ(b.actions, (std::vector<int32_t>{5, 6, 7, 8, 9, 0, 1, 2}));
  EXPECT_EQ(b.timestamps, (std::vector<int64_t>{60, 70, 80, 90, 100, 10, 20, 30}));
  EXPECT_EQ(b.query_timestamps, (std::vector<int64_t>{70, 80, 90, 100, 100, 20, 30, 30}));
  EXPECT_EQ(b.target_ids, std::vector<int32_t>(8, 0));
  EXPECT_EQ(b.eval_targets, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(b.user_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(b.num_candidates, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(b.contextual, (std::vector<int32_t>{0, 4, 1, 5}));
  std::vector<int32_t> labels;
  ranking_labels(b, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{8, 9, 1, 2}));

  // The token layout of this batch: [c c | i a i a i a | i a i a] and [c c | i a | i a i a].
  RankingLayout lay;
  ranking_layout(b.offsets, b.num_candidates, 2, true, 8192, lay);
  EXPECT_EQ(lay.token_offsets, (std::vector<int32_t>{0, 12, 20}));
  EXPECT_EQ(lay.num_targets, (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(lay.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8,  //
                                                 0, 1, 2, 3, 4, 4, 4, 4}));
}

TEST(RankingBatch, BatcherVisitsEverySampleOncePerEpoch) {
  std::vector<UserEvents> users;
  for (int u = 0; u < 23; ++u)
    users.emplace_back(std::vector<int32_t>(4 + u % 5, u + 1), std::vector<int64_t>{},
                       std::vector<int32_t>(4 + u % 5, 1));
  const SequenceDataset ds = make_dataset(users, 30, 2);
  const RankingSplits s = make_ranking_splits(ds, args(10, 1));
  Batcher a = ranking_batcher(ds, s.train, 5, true, 7),
          b = ranking_batcher(ds, s.train, 5, true, 7),
          c = ranking_batcher(ds, s.train, 5, true, 8);
  EXPECT_EQ(a.num_batches(), 5);
  std::vector<int32_t> seen;
  SequenceBatch batch;
  for (int i = 0; i < 5; ++i) {
    a.next(batch);
    seen.insert(seen.end(), batch.user_ids.begin(), batch.user_ids.end());
  }
  EXPECT_EQ(a.epoch(), 1);
  EXPECT_EQ(a.batch_index(), 0);
  std::vector<int32_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> all(23);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_FALSE(std::is_sorted(seen.begin(), seen.end()));
  const std::span<const int64_t> oa = a.order(3), ob = b.order(3);
  EXPECT_TRUE(std::equal(oa.begin(), oa.end(), ob.begin(), ob.end()));
  const std::vector<int64_t> o3(oa.begin(), oa.end());
  const std::span<const int64_t> oc = c.order(3);
  EXPECT_FALSE(std::equal(o3.begin(), o3.end(), oc.begin(), oc.end()));
  b.set_position(0, 5);
  EXPECT_EQ(b.epoch(), 1);
  EXPECT_EQ(b.batch_index(), 0);
}

TEST(RankingBatch, MovieLens1mContextualFeatures) {
  test::TempDir dir;
  // User 10 rates 5 movies, user 20 rates 3, user 30 rates 1 (too short for ranking with C = 2).
  dir.write("ratings.dat",
            "10::1::5::100\n10::2::3::300\n20::3::4::50\n10::3::1::200\n10::4::2::400\n"
            "20::1::2::60\n10::5::4::500\n20::2::5::70\n30::1::3::10\n");
  dir.write("users.dat", "20::M::25::7::55117\n10::F::1::10::48067\n30::M::25::15::55117\n");
  dir.write("movies.dat",
            "1::A (1990)::Drama\n2::B (1991)::Drama\n3::C (1992)::Comedy\n"
            "4::D (1993)::Drama\n5::E (1994)::Drama\n");
  const SequenceDataset ds = build_dataset(read_movielens_1m(dir.path()));
  ASSERT_EQ(ds.contextual_names.size(), 4u);
  const RankingSplits s = make_ranking_splits(ds, args(10, 2));
  // Users (dense, raw-id order) 10 -> 0, 20 -> 1, 30 -> 2: eval = users 0 and 1.
  ASSERT_EQ(s.eval.samples.size(), 2u);
  EXPECT_EQ(s.eval.skipped_users, 1);
  ASSERT_EQ(s.train.samples.size(), 1u);  // only user 10 has 2C + 1 = 5 ratings
  SequenceBatch b;
  const std::vector<int64_t> order = {0, 1};
  make_ranking_batch(ds, s.eval, order, b);
  EXPECT_EQ(b.offsets, (std::vector<int32_t>{0, 5, 8}));
  // User 10 by time: movies 1, 3, 2, 4, 5 with ratings 5, 1, 3, 2, 4; user 20: 3, 1, 2.
  EXPECT_EQ(b.item_ids, (std::vector<int32_t>{1, 3, 2, 4, 5, 3, 1, 2}));
  EXPECT_EQ(b.actions, (std::vector<int32_t>{5, 1, 3, 2, 4, 4, 2, 5}));
  // users.dat codes by first appearance: sex M=1 F=2; age 25=1 1=2; occupation 7=1 10=2 15=3;
  // zip 55117=1 48067=2.
  EXPECT_EQ(b.contextual, (std::vector<int32_t>{2, 2, 2, 2, 1, 1, 1, 1}));
  std::vector<int32_t> labels;
  ranking_labels(b, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{2, 4, 2, 5}));
  SequenceBatch t;
  make_ranking_batch(ds, s.train, std::vector<int64_t>{0}, t);
  EXPECT_EQ(t.item_ids, (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(t.num_candidates, (std::vector<int32_t>{2}));
}

}  // namespace
}  // namespace hstu
