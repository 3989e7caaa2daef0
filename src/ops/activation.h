// activation.h — element-wise activations with explicit backward: SiLU (the HSTU layer's phi on
// u, v, q, k), ReLU and GELU (tanh approximation; the ranking MLP head).
//
// The backward takes the forward *input* x (not the output), so a recompute switch can drop the
// activated tensor and keep only the pre-activation.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

enum class Activation { kSilu, kRelu, kGelu };

// y = act(x); y may alias x. Both may be strided 2-D views of the same shape.
void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y);
// dx = dy * act'(x); dx may alias dy.
void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx);

namespace cpu {
void activation_fwd(Ctx&, Activation, const Tensor&, const Tensor&);
void activation_bwd(Ctx&, Activation, const Tensor&, const Tensor&, const Tensor&);
}  // namespace cpu
namespace cuda {
void activation_fwd(Ctx&, Activation, const Tensor&, const Tensor&);
void activation_bwd(Ctx&, Activation, const Tensor&, const Tensor&, const Tensor&);
}  // namespace cuda

inline void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y) {
  if (ctx.cpu()) return cpu::activation_fwd(ctx, act, x, y);
  HSTU_CUDA_DISPATCH(return cuda::activation_fwd(ctx, act, x, y));
}
inline void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy,
                           const Tensor& dx) {
  if (ctx.cpu()) return cpu::activation_bwd(ctx, act, x, dy, dx);
  HSTU_CUDA_DISPATCH(return cuda::activation_bwd(ctx, act, x, dy, dx));
}

}  // namespace hstu
