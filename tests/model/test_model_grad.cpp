// test_model_grad.cpp — the whole retrieval model's backward against float64 finite
// differences: embedding + positions, every HSTU layer option (affine/non-affine LayerNorms,
// biases, rab, final LayerNorm), L2 normalisation and the sampled softmax. Dropout is off so
// the loss is a deterministic function of the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/harness.h"
#include "config/config.h"
#include "model/model.h"

namespace hstu {
namespace {

struct Case {
  const char* name;
  bool meta;  // Meta's layer (alpha 1, non-affine LN, output bias, rab) vs recsys-examples'
  bool final_ln;
};

class ModelGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGrad, MatchesFiniteDifferences) {
  const Case c = GetParam();
  Config cfg;
  cfg.network.num_layers = 2;
  cfg.network.hidden_size = 8;
  cfg.network.num_attention_heads = 2;
  cfg.network.kv_channels = 3;
  cfg.network.hidden_dropout = 0.0;
  cfg.network.input_dropout = 0.0;
  cfg.network.num_position_buckets = 12;
  cfg.network.final_layernorm = c.final_ln;
  cfg.dataset.max_history_seqlen = 6;
  if (c.meta) {
    cfg.network.attention_alpha = 1.0;
    cfg.network.learnable_input_layernorm = false;
    cfg.network.learnable_output_layernorm = false;
    cfg.network.uvqk_bias = false;
    cfg.network.output_bias = true;
    cfg.network.relative_attention_bias = true;
    cfg.network.rab_num_time_buckets = 16;
    cfg.network.init = "meta";
  }
  cfg.retrieval.temperature = 0.5;  // keeps the loss smooth for the differences
  ModelShape shape{20, 3, 18, 4};
  HstuModel model(cfg, shape, Device::kCPU, DType::kF64);
  model.plan(7);
  // Break the symmetric init (ones/zeros) so affine parameters get generic gradients.
  test::fill_uniform(model.dense().flat_params(), -0.5, 0.5);

  SequenceBatch b;
  b.batch_size = 3;
  b.offsets = {0, 6, 7, 11};
  b.max_seqlen = 6;
  b.item_ids = {1, 5, 3, 9, 2, 7, 4, 8, 8, 12, 19};
  b.target_ids = {5, 3, 9, 2, 7, 11, 6, 8, 12, 19, 0};  // the last token is unsupervised
  b.timestamps = {10, 70, 4000, 4100, 90000, 90001, 5, 100, 200, 300000, 300001};
  b.query_timestamps = {70, 4000, 4100, 90000, 90001, 95000, 500, 200, 300000, 300001, 0};
  BatchTensors& bt = model.batch_tensors();
  upload_batch(b, model.capacity(), bt);
  std::vector<int32_t> negs(11 * 4);
  for (size_t i = 0; i < negs.size(); ++i) negs[i] = 1 + static_cast<int32_t>((i * 7 + 3) % 19);
  negs[1] = 3;  // a negative equal to its token's positive (masked)
  std::copy(negs.begin(), negs.end(), bt.neg_ids.as<int32_t>());

  Ctx ctx = cpu_ctx();
  const double scale = 1.0 / 10;
  auto loss = [&] {
    fill_zero(model.dense().flat_grads());
    fill_zero(model.items().grad);
    return model.train_step(ctx, bt, 1, scale);
  };
  loss();
  // Snapshot the analytic gradients (loss() re-zeroes them on every call).
  test::ArenaScope scope;
  const Tensor g_dense = test::alloc(DType::kF64, {model.dense().size()});
  copy_tensor(g_dense, model.dense().flat_grads());
  const Tensor g_items = test::alloc(DType::kF64, {model.items().rows, model.items().dim});
  copy_tensor(g_items, model.items().grad);
  test::expect_grad_matches_fd(loss, model.dense().flat_params(), g_dense, "dense params", 400,
                               1e-6, 1e-5, 1e-9);
  test::expect_grad_matches_fd(loss, model.items().weight, g_items, "item table", 200, 1e-6, 1e-5,
                               1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layers, ModelGrad,
                         ::testing::Values(Case{"recsys", false, false}, Case{"meta", true, false},
                                           Case{"recsys_final_ln", false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hstu
