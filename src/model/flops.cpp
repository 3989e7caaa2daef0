// flops.cpp — see flops.h.
#include "model/flops.h"

namespace hstu {

double retrieval_step_flops(const Config& cfg, const SequenceBatch& b) {
  const NetworkArgs& n = cfg.network;
  const double d = static_cast<double>(n.hidden_size);
  const double hd = static_cast<double>(n.num_attention_heads * n.kv_channels);
  const double t = b.num_tokens();
  double attn = 0;  // forward: QK^T and PV, causal half
  for (int32_t s = 0; s < b.batch_size; ++s) {
    const double l = b.offsets[static_cast<size_t>(s) + 1] - b.offsets[static_cast<size_t>(s)];
    attn += 2.0 * l * l * 2.0 * hd / 2.0;
  }
  const double gemm_fwd = 2.0 * t * d * 4.0 * hd + 2.0 * t * hd * d;
  const double layer = 3.0 * gemm_fwd + 3.5 * attn;
  const double head = 3.0 * 2.0 * t * static_cast<double>(cfg.retrieval.num_negatives + 1) * d;
  return static_cast<double>(n.num_layers) * layer + head;
}

}  // namespace hstu
