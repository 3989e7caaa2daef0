// test_ranking_score_all.cpp — ranking with DatasetArgs.max_num_candidates = 0 (recsys-examples:
// every item scored): every item token gets a prediction and its own label (the batch's explicit
// labels, not the actions), no token is an attention target, so each prediction depends on its
// prefix only; the backward against float64 finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/harness.h"
#include "common/ranking_test_util.h"
#include "config/config.h"
#include "model/ranking_model.h"

namespace hstu {
namespace {

Config score_all_config() {
  Config cfg = test::ranking_config({.num_layers = 2,
                                     .hidden_size = 8,
                                     .num_attention_heads = 2,
                                     .kv_channels = 3,
                                     .num_position_buckets = 12,
                                     .head_arch = std::vector<int64_t>{5, 3},
                                     .num_tasks = 3,
                                     .max_history_seqlen = 5,
                                     .max_num_candidates = 0});
  cfg.network.hidden_dropout = 0.0;
  cfg.network.input_dropout = 0.0;
  cfg.ranking.prediction_head_act_type = "gelu";  // smooth for the differences
  return cfg;
}

RankingShape score_all_shape(const Config& cfg, bool contextual = true) {
  RankingShape shape;
  shape.num_items = 20;
  shape.num_actions = 8;
  if (contextual) shape.contextual_cardinalities = {3};
  shape.max_batch = 3;
  shape.max_events = 15;
  shape.max_candidates = 15;
  EXPECT_EQ(cfg.dataset.max_num_candidates, 0);
  return shape;
}

// 3 samples of 5, 2 and 4 events; every event scored (num_candidates = n_b), labels apart from
// the actions.
SequenceBatch score_all_batch() {
  SequenceBatch b;
  b.batch_size = 3;
  b.offsets = {0, 5, 7, 11};
  b.max_seqlen = 5;
  b.item_ids = {1, 5, 3, 9, 2, 7, 4, 8, 8, 12, 19};
  b.actions = {0, 3, 5, 1, 6, 2, 7, 0, 4, 3, 1};
  b.labels = {7, 0, 2, 5, 1, 6, 3, 4, 0, 7, 2};
  b.timestamps = std::vector<int64_t>(11, 0);
  b.query_timestamps = std::vector<int64_t>(11, 0);
  b.num_candidates = {5, 2, 4};
  b.contextual = {0, 2, 1};
  b.user_ids = {0, 1, 2};
  return b;
}

// The first `m` events of every sample of `b` (each scored).
SequenceBatch prefix(const SequenceBatch& b, int32_t m) {
  SequenceBatch p = b;
  p.offsets = {0};
  p.item_ids.clear();
  p.actions.clear();
  p.labels.clear();
  p.num_candidates.clear();
  for (int32_t s = 0; s < b.batch_size; ++s) {
    const int32_t o = b.offsets[s], n = std::min(m, b.offsets[s + 1] - o);
    for (int32_t i = o; i < o + n; ++i) {
      p.item_ids.push_back(b.item_ids[i]);
      p.actions.push_back(b.actions[i]);
      p.labels.push_back(b.labels[i]);
    }
    p.offsets.push_back(p.offsets.back() + n);
    p.num_candidates.push_back(n);
  }
  p.timestamps.assign(p.item_ids.size(), 0);
  p.query_timestamps.assign(p.item_ids.size(), 0);
  return p;
}

std::vector<double> logits_of(RankingModel& model, Ctx& ctx) {
  const Tensor l = model.predict(ctx);
  std::vector<double> v(static_cast<size_t>(l.numel()));
  copy_bytes(v.data(), Device::kCPU, l.data, l.device, v.size() * sizeof(double));
  return v;
}

TEST(RankingScoreAll, EveryItemScoredWithItsOwnLabel) {
  const Config cfg = score_all_config();
  RankingModel model(cfg, score_all_shape(cfg), Device::kCPU, DType::kF64);
  model.plan(7);
  const SequenceBatch b = score_all_batch();
  model.upload(b);
  EXPECT_EQ(model.num_candidates(), 11);
  EXPECT_EQ(model.labels(), b.labels);  // the explicit labels, not the actions
  // A sample must score all of its events.
  SequenceBatch partial = b;
  partial.num_candidates = {2, 2, 4};
  EXPECT_THROW(model.upload(partial), Error);
}

TEST(RankingScoreAll, PredictionsDependOnTheirPrefixOnly) {
  // No targets: item i attends to the tokens before it, so truncating the samples after m
  // events leaves the first m predictions of each unchanged (with candidates they would move:
  // positions and target grouping depend on the sample's end). Without contextual tokens: under
  // the contextual mask they see every history column, so every token would see the future.
  const Config cfg = score_all_config();
  RankingModel model(cfg, score_all_shape(cfg, false), Device::kCPU, DType::kF64);
  model.plan(7);
  test::fill_uniform(model.dense().flat_params(), -0.5, 0.5);
  Ctx ctx = cpu_ctx();
  SequenceBatch b = score_all_batch();
  b.contextual.clear();
  model.upload(b);
  const std::vector<double> full = logits_of(model, ctx);
  const SequenceBatch p = prefix(b, 3);
  model.upload(p);
  const std::vector<double> part = logits_of(model, ctx);
  ASSERT_EQ(part.size(), 8u * 3u);  // 3 + 2 + 3 events x 3 tasks
  const int64_t k = 3;
  size_t row = 0;
  for (int32_t s = 0; s < b.batch_size; ++s) {
    for (int32_t i = 0; i < p.num_candidates[s]; ++i, ++row) {
      const size_t full_row = static_cast<size_t>(b.offsets[s] + i);
      for (int64_t t = 0; t < k; ++t)
        EXPECT_NEAR(part[row * k + t], full[full_row * k + t], 1e-12)
            << "sample " << s << " item " << i << " task " << t;
    }
  }
  // ... and on all of it: item 1 sees item 0 (with every event a target it would not).
  SequenceBatch other = b;
  other.item_ids[0] = 17;
  model.upload(other);
  const std::vector<double> moved = logits_of(model, ctx);
  EXPECT_GT(std::abs(moved[1 * k] - full[1 * k]), 1e-6);
  EXPECT_EQ(moved[5 * k], full[5 * k]);  // another sample: unchanged
}

TEST(RankingScoreAll, MatchesFiniteDifferences) {
  const Config cfg = score_all_config();
  RankingModel model(cfg, score_all_shape(cfg), Device::kCPU, DType::kF64);
  model.plan(7);
  test::fill_uniform(model.dense().flat_params(), -0.5, 0.5);
  model.upload(score_all_batch());
  Ctx ctx = cpu_ctx();
  auto loss = [&] {
    fill_zero(model.dense().flat_grads());
    for (EmbeddingTable* t : model.tables()) {
      fill_zero(t->grad);
      fill_zero(t->touched);
    }
    return model.train_step(ctx, 1, 1.0 / 11);
  };
  EXPECT_TRUE(std::isfinite(loss()));
  test::ArenaScope scope;
  const Tensor g_dense = test::alloc(DType::kF64, {model.dense().size()});
  copy_tensor(g_dense, model.dense().flat_grads());
  EXPECT_GT(test::max_abs(g_dense), 0.0);
  test::expect_grad_matches_fd(loss, model.dense().flat_params(), g_dense, "dense params", 300,
                               1e-6, 1e-5, 1e-9);
  EmbeddingTable* items = model.tables()[0];
  loss();
  const Tensor g = test::alloc(DType::kF64, {items->rows, items->dim});
  copy_tensor(g, items->grad);
  EXPECT_GT(test::max_abs(g), 0.0);
  test::expect_grad_matches_fd(loss, items->weight, g, "item table", 150, 1e-6, 1e-5, 1e-9);
}

}  // namespace
}  // namespace hstu
