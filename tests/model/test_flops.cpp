// test_flops.cpp — the FLOP counts behind TFLOPS and MFU (model/flops.h), against the formula
// worked by hand for small shapes.
#include <gtest/gtest.h>

#include <vector>

#include "config/config.h"
#include "model/flops.h"

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

}  // namespace
}  // namespace hstu
