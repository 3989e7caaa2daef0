// losses.h — the ranking losses from logits, forward and backward fused: multi-task binary
// cross-entropy from label bitmasks and single-label multi-class cross-entropy.
//
//   bce_multitask  logits [N, K], labels i32 [N]; y[n,k] = bit k of labels[n] (LSB = task 0;
//                  bits >= K are ignored, as recsys-examples' bit decoding does)
//                  loss  = loss_scale * sum_{n,k} softplus(x) - y x,
//                          softplus(x) = max(x, 0) + log1p(exp(-|x|))
//                  dlogits[n,k] = loss_scale * (sigmoid(x) - y)
//   cross_entropy  logits [N, C], labels i32 [N] in [0, C)
//                  loss  = loss_scale * sum_n logsumexp(x_n) - x_n[label_n]
//                  dlogits[n,c] = loss_scale * (softmax(x_n)[c] - [c == label_n])
// loss_scale is 1 / (the global number of supervised tokens) for SPEC §3's normalisation.
// The shaping decision: both are computed in double from the logits with the max-shifted stable
// forms above (never log(sigmoid) or exp of an unshifted logit), and the per-row losses are
// summed in a fixed order (CPU: row order; CUDA: fixed per-block trees, then the blocks in
// order), so the loss is finite for any finite logits and bit-reproducible run to run. CUDA
// takes f32/bf16/f16 logits; the labels are validated on the host by the CPU backend only (on
// CUDA an invalid label makes that row's loss and gradient NaN).
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// loss f64 [1] on the op's device (CPU: host memory; CUDA: device memory, written in stream
// order — copy it to the host to read it) = the scaled sum; dlogits [N, K] (same dtype as
// logits) overwritten when non-empty. Labels i32 [N] on the op's device, >= 0.
void bce_multitask(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale);
// loss f64 [1] (as above) = the scaled sum; dlogits [N, C] overwritten when non-empty. Labels in
// [0, C).
void cross_entropy(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale);

}  // namespace hstu
