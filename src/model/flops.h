// flops.h — the FLOP count of a training step, for TFLOPS and MFU (the loop's train lines and
// `hstu bench train`): the dense GEMMs and the causal attention of every layer, forward and
// backward, plus the task's head (the retrieval head's sampled-softmax logits, the ranking MLP).
// Elementwise work is not counted. Backward = 2x the forward GEMMs; attention is counted with the
// causal half and FlashAttention-style backward accounting (bwd = 2.5x fwd, 3.5x in all).
// The same count of one sequence is the per-sample cost that balanced batching partitions by.
#pragma once

#include <cstdint>
#include <span>

#include "config/config.h"
#include "data/batch.h"

namespace hstu {

// The HSTU layers' forward + backward FLOPs over sequences with row offsets `offsets` [B+1].
double hstu_layers_flops(const NetworkArgs& n, std::span<const int32_t> offsets);

// The per-sample cost of balanced batching (dist/balance.h): the HSTU layers' forward + backward
// FLOPs over ONE sequence of `tokens` tokens, i.e. hstu_layers_flops of offsets {0, tokens}.
// Per layer 3 * (2 s D 4Hd + 2 s Hd D) for the uvqk and output GEMMs (linear in s) plus
// 3.5 * 2 s^2 Hd (causal attention, quadratic in s). Contextual prefixes and ranking targets are
// counted as causal, LayerNorms and other elementwise work not at all (as in the step count).
// tokens >= 0; 0 costs 0 (a padding sample).
double sample_cost(const NetworkArgs& n, int64_t tokens);

// The token count of one ranking sample as the ranking model lays it out (ops/jagged.h,
// ranking_layout: L = C + k n): `num_events` history + candidate events, `num_contextual`
// contextual tokens, k = 2 when action tokens are interleaved (the model has an action table)
// else 1. With a SequenceBatch b of the ranking batcher: num_events = b.offsets[i+1] -
// b.offsets[i]. A retrieval sample's token count is its sequence length.
int64_t ranking_sample_tokens(int64_t num_events, int64_t num_contextual, bool action_tokens);

// One retrieval training step on `batch` (layers + sampled-softmax logits over 1 + negatives).
double retrieval_step_flops(const Config& cfg, const SequenceBatch& batch);

// One ranking training step: layers over the token sequences (`token_offsets`, the model's
// layout: contextual prefix, interleaved item/action tokens) and the MLP head over
// `num_candidates` candidate rows. The targets' mask is counted as causal.
double ranking_step_flops(const Config& cfg, std::span<const int32_t> token_offsets,
                          int64_t num_candidates);

}  // namespace hstu
