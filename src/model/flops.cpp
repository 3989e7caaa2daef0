// flops.cpp — see flops.h.
#include "model/flops.h"

#include <array>
#include <cstdint>

#include "core/error.h"
#include "data/negatives.h"

namespace hstu {

double hstu_layers_flops(const NetworkArgs& n, std::span<const int32_t> offsets) {
  const double d = static_cast<double>(n.hidden_size);
  const double hd = static_cast<double>(n.num_attention_heads * n.kv_channels);
  const double t = offsets.empty() ? 0 : offsets.back() - offsets.front();
  double attn = 0;  // forward: QK^T and PV, causal half
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const double l = offsets[s + 1] - offsets[s];
    attn += 2.0 * l * l * 2.0 * hd / 2.0;
  }
  const double gemm_fwd = 2.0 * t * d * 4.0 * hd + 2.0 * t * hd * d;
  return static_cast<double>(n.num_layers) * (3.0 * gemm_fwd + 3.5 * attn);
}

double sample_cost(const NetworkArgs& n, int64_t tokens) {
  HSTU_CHECK(tokens >= 0 && tokens <= INT32_MAX, "sample_cost: token count ", tokens,
             " outside [0, 2^31)");
  const std::array<int32_t, 2> offsets{0, static_cast<int32_t>(tokens)};
  return hstu_layers_flops(n, offsets);
}

int64_t ranking_sample_tokens(int64_t num_events, int64_t num_contextual, bool action_tokens) {
  HSTU_CHECK(num_events >= 0 && num_contextual >= 0, "ranking_sample_tokens: ", num_events,
             " events and ", num_contextual, " contextual tokens (both must be >= 0)");
  return num_contextual + (action_tokens ? 2 : 1) * num_events;
}

double retrieval_step_flops(const Config& cfg, const SequenceBatch& b) {
  const double d = static_cast<double>(cfg.network.hidden_size);
  int64_t queries = 0;
  for (const int32_t t : b.target_ids) queries += t != 0;
  const int64_t r = negatives_per_query(cfg.retrieval.num_negatives, queries);
  const double head = 3.0 * 2.0 * b.num_tokens() * static_cast<double>(r + 1) * d;
  return hstu_layers_flops(
             cfg.network,
             std::span<const int32_t>(b.offsets.data(), static_cast<size_t>(b.batch_size) + 1)) +
         head;
}

double ranking_step_flops(const Config& cfg, std::span<const int32_t> token_offsets,
                          int64_t num_candidates) {
  double mlp = 0, in = static_cast<double>(cfg.network.hidden_size);
  for (int64_t out : cfg.ranking.prediction_head_arch) {
    mlp += 2.0 * in * static_cast<double>(out);
    in = static_cast<double>(out);
  }
  return hstu_layers_flops(cfg.network, token_offsets) +
         3.0 * static_cast<double>(num_candidates) * mlp;
}

}  // namespace hstu
