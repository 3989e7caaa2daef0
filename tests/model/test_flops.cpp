// test_flops.cpp — the FLOP counts behind TFLOPS and MFU (model/flops.h), against the formula
// worked by hand for small shapes; the per-sample cost of balanced batching and the ranking
// token count it is applied to.
#include <gtest/gtest.h>

#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "model/flops.h"
#include "ops/jagged.h"

namespace hstu {
namespace {

TEST(Flops, LayersCountGemmsAndCausalAttention) {
  NetworkArgs n;
  n.num_layers = 2;
  n.hidden_size = 8;
  n.num_attention_heads = 2;
  n.kv_channels = 4;                            // H d = 8
  const std::vector<int32_t> offsets{0, 3, 8};  // lengths 3 and 5, 8 tokens
  // Forward GEMMs: uvqk 2*8*8*32 = 4096, output 2*8*8*8 = 1024; x3 with the backward.
  // Attention forward: sum over sequences of 2 L^2 2 Hd / 2 = 2*8*(9 + 25) = 544; x3.5.
  const double per_layer = 3.0 * (4096 + 1024) + 3.5 * 544;
  EXPECT_DOUBLE_EQ(hstu_layers_flops(n, offsets), 2 * per_layer);
}

TEST(Flops, RankingAddsTheMlpHeadPerCandidate) {
  Config cfg;
  cfg.network.num_layers = 1;
  cfg.network.hidden_size = 8;
  cfg.network.num_attention_heads = 1;
  cfg.network.kv_channels = 8;
  cfg.ranking.prediction_head_arch = {16, 3};
  const std::vector<int32_t> offsets{0, 4};
  const double head = 3.0 * 5 * (2.0 * 8 * 16 + 2.0 * 16 * 3);  // 5 candidates
  EXPECT_DOUBLE_EQ(ranking_step_flops(cfg, offsets, 5),
                   hstu_layers_flops(cfg.network, offsets) + head);
}

// The balanced-batching cost of a sample is the step count of that one sequence, so the costs of
// a batch's samples add up to the batch's layer FLOPs; its attention term is quadratic.
TEST(Flops, SampleCostIsTheCountOfOneSequence) {
  NetworkArgs n;
  n.num_layers = 2;
  n.hidden_size = 8;
  n.num_attention_heads = 2;
  n.kv_channels = 4;
  // Length 5: GEMMs 3 * (2*5*8*32 + 2*5*8*8) = 3 * 3200, attention 3.5 * 2*25*8 = 3.5 * 400.
  EXPECT_DOUBLE_EQ(sample_cost(n, 5), 2 * (3.0 * 3200 + 3.5 * 400));
  EXPECT_EQ(sample_cost(n, 0), 0.0);
  const std::vector<int32_t> offsets{0, 3, 8, 8, 20};
  double sum = 0;
  for (size_t b = 0; b + 1 < offsets.size(); ++b)
    sum += sample_cost(n, offsets[b + 1] - offsets[b]);
  EXPECT_DOUBLE_EQ(sum, hstu_layers_flops(n, offsets));
  // Doubling the length more than doubles the cost (the quadratic attention term).
  EXPECT_GT(sample_cost(n, 200), 2 * sample_cost(n, 100));
  EXPECT_THROW(sample_cost(n, -1), Error);
}

// ranking_sample_tokens gives each sample's length in the ranking model's token layout.
TEST(Flops, RankingSampleTokensMatchTheRankingLayout) {
  const std::vector<int32_t> offsets{0, 4, 5, 11}, candidates{2, 1, 3};
  for (bool interleave : {true, false}) {
    for (int32_t ctx : {0, 3}) {
      RankingLayout layout;
      ranking_layout(offsets, candidates, ctx, interleave, 64, layout);
      for (size_t b = 0; b + 1 < offsets.size(); ++b)
        EXPECT_EQ(ranking_sample_tokens(offsets[b + 1] - offsets[b], ctx, interleave),
                  layout.token_offsets[b + 1] - layout.token_offsets[b])
            << "sample " << b << " interleave " << interleave << " contextual " << ctx;
    }
  }
  EXPECT_THROW(ranking_sample_tokens(-1, 0, true), Error);
}

}  // namespace
}  // namespace hstu
