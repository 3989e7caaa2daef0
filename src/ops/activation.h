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

// Optional head structure of a call: every tensor holds `count` heads at its own head stride
// (its columns / count), and only the first `width` columns of each head take part; the columns
// between width and stride are neither read nor written. This lets the HSTU layer write SiLU(z)
// into a layout whose heads start on 16-byte boundaries (hstu_attention.h). The default is one
// head of all columns (a plain element-wise call).
struct ActHeads {
  int64_t count = 1;
  int64_t width = 0;  // 0: x's head stride
};

// y = act(x); y may alias x (same layout). Both may be strided 2-D views, of the same shape when
// heads.count == 1.
void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y,
                    ActHeads heads = {});
// dx = dy * act'(x); dx may alias dy (same layout).
void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    ActHeads heads = {});

}  // namespace hstu
