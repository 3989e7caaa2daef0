// optimizer.h — the dense optimiser over the flat parameter buffer: Adam/AdamW (decoupled weight
// decay) and SGD, plus the global gradient norm for clipping.
//
// All dense parameters, gradients and moments are each one contiguous fp32 buffer (see
// model/params.h); parameters that take weight decay are laid out first, so one call per
// decay group updates everything.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

struct DenseOptimizerSpec {
  enum Kind { kAdam, kAdamW, kSgd } kind = kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;  // AdamW: p -= lr*wd*p; Adam: L2 added to the gradient; SGD: L2
  float grad_scale = 1.0f;    // multiplies gradients first (clipping)
  int64_t step = 1;           // 1-based, for bias correction
};

// params, grads, m, v: f32 [n] (m, v unused by SGD). Gradients are left untouched.
void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                          const Tensor& grads, const Tensor& m, const Tensor& v);
// Sum of squares of a f32 buffer, in f64.
double sum_squares(Ctx& ctx, const Tensor& x);

namespace cpu {
void dense_optimizer_step(Ctx&, const DenseOptimizerSpec&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&);
double sum_squares(Ctx&, const Tensor&);
}  // namespace cpu
namespace cuda {
void dense_optimizer_step(Ctx&, const DenseOptimizerSpec&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&);
double sum_squares(Ctx&, const Tensor&);
}  // namespace cuda

inline void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                                 const Tensor& grads, const Tensor& m, const Tensor& v) {
  if (ctx.cpu()) return cpu::dense_optimizer_step(ctx, spec, params, grads, m, v);
  HSTU_CUDA_DISPATCH(return cuda::dense_optimizer_step(ctx, spec, params, grads, m, v));
}
inline double sum_squares(Ctx& ctx, const Tensor& x) {
  if (ctx.cpu()) return cpu::sum_squares(ctx, x);
  HSTU_CUDA_DISPATCH(return cuda::sum_squares(ctx, x));
}

}  // namespace hstu
