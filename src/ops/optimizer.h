// optimizer.h — the dense optimiser over the flat parameter buffer: Adam/AdamW (decoupled weight
// decay) and SGD, plus the global gradient norm for clipping.
//
// All dense parameters, gradients and moments are each one contiguous fp32 buffer (see
// model/params.h); parameters that take weight decay are laid out first, so one call per
// decay group updates everything.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/context.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace hstu {

struct DenseOptimizerSpec {
  enum Kind { kAdam, kAdamW, kSgd } kind = kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;  // AdamW: p -= lr*wd*p; Adam: L2 added to the gradient; SGD: L2
  float grad_scale = 1.0f;    // multiplies gradients first
  int64_t step = 1;           // 1-based, for bias correction
  // Clipping to a global norm without a host round trip: when clip_norm > 0, gradients are also
  // scaled by clip_norm / sqrt(grad_sumsq) where that norm exceeds clip_norm. grad_sumsq is f64
  // [1] on the buffers' device (sum_squares_into), read by the update itself.
  double clip_norm = 0;
  Tensor grad_sumsq;
  // The device-side guard of TrainerArgs.nonfinite = "skip_step": f64 [k] on the buffers' device
  // (k >= 1; the step's gradient sum of squares and loss), or empty (no guard). When any of its
  // values is not finite the update is not applied: params and moments are left as they were
  // (read by the update itself, so the host does not wait).
  Tensor skip_if_nonfinite;
};

// Whether all `n` values at `v` are finite (the guard of DenseOptimizerSpec::skip_if_nonfinite).
HSTU_HD bool all_finite(const double* v, int64_t n) {
  // x - x is 0 for a finite x and NaN for an infinite or NaN one (no fast-math anywhere), which
  // reads the same in host and device code.
  for (int64_t i = 0; i < n; ++i)
    if (!(v[i] - v[i] == 0.0)) return false;
  return true;
}

// The clipping factor of a gradient with squared norm `sumsq`: 1, or clip / norm above clip.
HSTU_HD float clip_factor(double clip, double sumsq) {
  const double norm = sqrt(sumsq);
  return norm > clip ? static_cast<float>(clip / norm) : 1.0f;
}

// params, grads, m, v: f32 [n] (m, v unused by SGD). Gradients are left untouched.
void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                          const Tensor& grads, const Tensor& m, const Tensor& v);
// Sum of squares of a f32 buffer, in f64, into `out` (f64 [1] on x's device; enqueued on CUDA).
void sum_squares_into(Ctx& ctx, const Tensor& x, const Tensor& out);
// The same, returned to the host (waits for the device).
double sum_squares(Ctx& ctx, const Tensor& x);

}  // namespace hstu
