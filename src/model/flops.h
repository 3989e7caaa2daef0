// flops.h — the FLOP count of a training step, for TFLOPS and MFU (the loop's train lines and
// `hstu bench train`): the dense GEMMs and the causal attention of every layer, forward and
// backward, plus the task's head (the retrieval head's sampled-softmax logits, the ranking MLP).
// Elementwise work is not counted. Backward = 2x the forward GEMMs; attention is counted with the
// causal half and FlashAttention-style backward accounting (bwd = 2.5x fwd, 3.5x in all).
#pragma once

#include <cstdint>
#include <span>

#include "config/config.h"
#include "data/batch.h"

namespace hstu {

// The HSTU layers' forward + backward FLOPs over sequences with row offsets `offsets` [B+1].
double hstu_layers_flops(const NetworkArgs& n, std::span<const int32_t> offsets);

// One retrieval training step on `batch` (layers + sampled-softmax logits over 1 + negatives).
double retrieval_step_flops(const Config& cfg, const SequenceBatch& batch);

// One ranking training step: layers over the token sequences (`token_offsets`, the model's
// layout: contextual prefix, interleaved item/action tokens) and the MLP head over
// `num_candidates` candidate rows. The targets' mask is counted as causal.
double ranking_step_flops(const Config& cfg, std::span<const int32_t> token_offsets,
                          int64_t num_candidates);

}  // namespace hstu
