// sampled_softmax.h — the retrieval loss: next-item sampled softmax over the positive and R
// negatives, with cosine similarity / temperature, fused forward + backward.
//
// For every supervised token t (targets[t] != 0):
//   e(i)   = table[i] / max(||table[i]||, eps)             (item embeddings L2-normalised)
//   l_0    = <q_t, e(targets[t])> / tau
//   l_r    = <q_t, e(neg[t,r])> / tau, or -5e4 where neg[t,r] == targets[t]   (r < R)
//   loss_t = logsumexp(l) - l_0
// loss = loss_scale * sum_t loss_t (loss_scale = 1 / global number of supervised tokens).
// The gradient is written for q (overwrite) and scattered into the dense table gradient
// (accumulate), marking touched rows; computing e(i) on the fly avoids the [T, R, D] gather.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

struct SampledSoftmaxSpec {
  float temperature = 0.05f;
  float eps = 1e-6f;        // L2-norm clamp of item embeddings
  double loss_scale = 1.0;  // multiplies the summed loss and all gradients
  // CUDA only: candidates (positive + negatives) per shared-memory tile; 0 = all R + 1 in one
  // tile when they fit the device's shared memory, else tiles of 1024 (any R works). Tests set
  // small tiles to check the tiled path against the CPU at small sizes. The CPU ignores it.
  int64_t candidate_tile = 0;
};

// q[T,D] (L2-normalised queries), targets[T] i32, neg_ids[T,R] i32, table[V,D] f32 — or, on
// CUDA, in q's dtype: a low-precision copy of the f32 table that the logits and the gradient's
// x_j terms read instead (half the bytes; the peers' autocast similarity), d_table still f32.
// loss[1] (f64, host-readable after the call) = scaled loss sum. If dq is non-empty: dq[T,D]
// overwritten (zero rows for unsupervised tokens), d_table[V,D] += and touched[V] marked.
void sampled_softmax(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                     const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                     const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                     const Tensor& touched);

}  // namespace hstu
