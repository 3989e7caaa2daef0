// flops.h — the FLOP count of a training step, for TFLOPS and MFU (the loop's train lines and
// `hstu bench train`): the dense GEMMs and the causal attention of every layer, forward and
// backward, plus the retrieval head's sampled-softmax logits. Elementwise work is not counted.
#pragma once

#include "config/config.h"
#include "data/batch.h"

namespace hstu {

// Model FLOPs of one retrieval training step on `batch`, forward + backward: 3x the forward
// GEMMs; attention with the causal half counted and FlashAttention-style backward accounting
// (bwd = 2.5x fwd, 3.5x in all).
double retrieval_step_flops(const Config& cfg, const SequenceBatch& batch);

}  // namespace hstu
