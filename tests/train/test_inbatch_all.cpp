// test_inbatch_all.cpp — RetrievalArgs.num_negatives = -1 (recsys-examples' default): every
// query draws as many negatives as the batch has queries, uniformly with replacement from the
// batch's deduplicated supervision ids, a draw equal to the query's own positive masked. The
// training step's loss and the model's item-table gradient are checked against that definition
// computed explicitly in float64 on a tiny batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "common/harness.h"
#include "config/config.h"
#include "data/negatives.h"
#include "data/negatives_rng.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/step.h"

namespace hstu {
namespace {

constexpr int64_t kItems = 20;  // table rows, incl. padding 0
constexpr uint64_t kSeed = 11, kStep = 3;

Config tiny_config() {
  Config cfg;
  cfg.network.num_layers = 1;
  cfg.network.hidden_size = 8;
  cfg.network.num_attention_heads = 2;
  cfg.network.kv_channels = 4;
  cfg.network.hidden_dropout = 0.0;
  cfg.network.input_dropout = 0.0;
  cfg.network.num_position_buckets = 12;
  cfg.dataset.max_history_seqlen = 6;
  cfg.trainer.train_batch_size = 3;
  cfg.trainer.eval_batch_size = 3;
  cfg.trainer.seed = static_cast<int64_t>(kSeed);
  cfg.retrieval.num_negatives = -1;
  cfg.retrieval.negative_sampler = "in_batch";
  cfg.retrieval.temperature = 0.5;
  return cfg;
}

// 3 users, 11 tokens, 10 supervised; targets repeat (5 twice) so the pool deduplicates, and five
// of them (13..17) are no token's input, so their rows' gradient is the loss's alone.
SequenceBatch tiny_batch() {
  SequenceBatch b;
  b.batch_size = 3;
  b.offsets = {0, 6, 7, 11};
  b.max_seqlen = 6;
  b.item_ids = {1, 5, 3, 9, 2, 7, 4, 8, 8, 12, 19};
  b.target_ids = {5, 13, 9, 14, 7, 5, 15, 8, 16, 17, 0};
  b.timestamps = {10, 70, 4000, 4100, 90000, 90001, 5, 100, 200, 300000, 300001};
  b.query_timestamps = {70, 4000, 4100, 90000, 90001, 95000, 500, 200, 300000, 300001, 0};
  return b;
}

// The explicit loss of the definition: mean over the S supervised tokens of
// -log softmax([pos, neg_1..neg_S])[0], logits <q, x / ||x||> / tau, negatives drawn by the
// per-element formula (negatives_rng.h) from the sorted unique targets, collisions at -5e4.
// With `d_table` ([V * D], zeroed), also the gradient of that loss wrt the raw item rows.
double explicit_loss(const std::vector<double>& q, const std::vector<double>& table,
                     const SequenceBatch& b, int64_t d, double tau, std::vector<double>* d_table) {
  const std::set<int32_t> uniq(b.target_ids.begin(), b.target_ids.end());
  std::vector<int32_t> pool;
  for (const int32_t id : uniq)
    if (id != 0) pool.push_back(id);
  int64_t s = 0;
  for (const int32_t t : b.target_ids) s += t != 0;
  auto norm = [&](int32_t id) {
    double n = 0;
    for (int64_t c = 0; c < d; ++c) n += table[id * d + c] * table[id * d + c];
    return std::max(std::sqrt(n), 1e-6);
  };
  double total = 0;
  for (size_t t = 0; t < b.target_ids.size(); ++t) {
    const int32_t pos = b.target_ids[t];
    if (pos == 0) continue;
    std::vector<int32_t> cand{pos};
    for (int64_t r = 0; r < s; ++r)
      cand.push_back(pool[in_batch_negative_index(kSeed, kStep, t * s + r,
                                                  static_cast<uint32_t>(pool.size()))]);
    std::vector<double> logit(cand.size());
    double mx = -1e300;
    for (size_t j = 0; j < cand.size(); ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += q[t * d + c] * table[cand[j] * d + c];
      logit[j] = (j > 0 && cand[j] == pos) ? -5e4 : dot / norm(cand[j]) / tau;
      mx = std::max(mx, logit[j]);
    }
    double se = 0;
    for (const double l : logit) se += std::exp(l - mx);
    total += mx + std::log(se) - logit[0];
    if (!d_table) continue;
    for (size_t j = 0; j < cand.size(); ++j) {
      if (j > 0 && cand[j] == pos) continue;  // a constant logit
      const double c = (std::exp(logit[j] - mx) / se - (j == 0 ? 1.0 : 0.0)) / tau / s;
      const int32_t id = cand[j];
      const double n = norm(id);
      double eg = 0;  // <e, g> with g = c q, e = x / n
      for (int64_t k = 0; k < d; ++k) eg += table[id * d + k] / n * c * q[t * d + k];
      for (int64_t k = 0; k < d; ++k)
        (*d_table)[id * d + k] += (c * q[t * d + k] - table[id * d + k] / n * eg) / n;
    }
  }
  return total / static_cast<double>(s);
}

std::vector<double> to_vector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(double));
  return v;
}

TEST(InBatchAll, OneNegativePerQuery) {
  EXPECT_EQ(negatives_per_query(128, 7), 128);
  EXPECT_EQ(negatives_per_query(-1, 7), 7);
  EXPECT_EQ(negatives_per_query(-1, 0), 1);
  EXPECT_THROW(negatives_per_query(0, 7), Error);
  const SequenceBatch b = tiny_batch();
  const std::vector<int32_t> negs =
      sample_negatives("in_batch", b, kItems, negatives_per_query(-1, 10), kSeed, kStep);
  ASSERT_EQ(negs.size(), 11u * 10u);  // [T, S]: a row per token, S = 10 queries
  const std::set<int32_t> drawn(negs.begin(), negs.end());
  EXPECT_EQ(drawn, (std::set<int32_t>{5, 7, 8, 9, 13, 14, 15, 16, 17}));  // the unique targets
  // The plan sizes the negatives for a batch whose every token is a query.
  const Config cfg = tiny_config();
  EXPECT_EQ(retrieval_model_shape(cfg, kItems).num_negatives, 3 * 6);
}

TEST(InBatchAll, StepLossEqualsExplicit) {
  const Config cfg = tiny_config();
  const ModelShape shape = retrieval_model_shape(cfg, kItems);
  HstuModel model(cfg, shape, Device::kCPU, DType::kF64);
  model.plan(kSeed);
  test::fill_uniform(model.dense().flat_params(), -0.5, 0.5);
  const SequenceBatch b = tiny_batch();
  Ctx ctx = cpu_ctx();
  upload_batch(b, model.capacity(), model.batch_tensors());
  const std::vector<double> q = to_vector(model.encode(ctx, model.batch_tensors()));
  const std::vector<double> table = to_vector(model.items().weight);
  const double want = explicit_loss(q, table, b, 8, 0.5, nullptr);

  TrainStep stepper(cfg, kItems);
  stepper.run(ctx, model, b, static_cast<int64_t>(kStep), 1e-3);
  const std::vector<StepLoss> got = stepper.drain(true);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0].loss, want, 1e-10 * std::abs(want));
  EXPECT_EQ(model.batch_tensors().num_negatives, 10);
}

TEST(InBatchAll, ItemGradientEqualsExplicit) {
  const Config cfg = tiny_config();
  const ModelShape shape = retrieval_model_shape(cfg, kItems);
  HstuModel model(cfg, shape, Device::kCPU, DType::kF64);
  model.plan(kSeed);
  test::fill_uniform(model.dense().flat_params(), -0.5, 0.5);
  const SequenceBatch b = tiny_batch();
  Ctx ctx = cpu_ctx();
  BatchTensors& bt = model.batch_tensors();
  upload_batch(b, model.capacity(), bt);
  const std::vector<double> q = to_vector(model.encode(ctx, bt));
  const std::vector<double> table = to_vector(model.items().weight);
  std::vector<double> want_grad(table.size(), 0.0);
  const double want = explicit_loss(q, table, b, 8, 0.5, &want_grad);

  // What the step does for -1: R = the batch's queries, the negatives' [T, R] prefix filled.
  bt.num_negatives = negatives_per_query(-1, supervised_tokens(b));
  const std::vector<int32_t> negs =
      sample_negatives("in_batch", b, kItems, bt.num_negatives, kSeed, kStep);
  const Tensor view = negatives_view(bt);
  ASSERT_EQ(view.numel(), static_cast<int64_t>(negs.size()));
  std::copy(negs.begin(), negs.end(), view.as<int32_t>());
  fill_zero(model.items().grad);
  const double loss = model.train_step(ctx, bt, 1, 1.0 / 10);
  EXPECT_NEAR(loss, want, 1e-10 * std::abs(want));
  // Rows 13..17 are only candidates (an input row's gradient also has the encoder's part).
  const std::vector<double> grad = to_vector(model.items().grad);
  double worst = 0, largest = 0;
  for (int64_t row = 13; row <= 17; ++row) {
    for (int64_t c = 0; c < 8; ++c) {
      worst = std::max(worst, std::abs(grad[row * 8 + c] - want_grad[row * 8 + c]));
      largest = std::max(largest, std::abs(want_grad[row * 8 + c]));
    }
  }
  EXPECT_LT(worst, 1e-12);
  EXPECT_GT(largest, 1e-4);  // a gradient that can fail
}

}  // namespace
}  // namespace hstu
