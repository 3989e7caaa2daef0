// l2norm.h — row-wise L2 normalisation y = x / max(||x||_2, eps) of the encoder outputs.
// The forward saves the clamped norm per row; the backward uses it (no recomputation).
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// y[T,D] = x / max(||x||, eps); norms[T] (f32, f64 for f64 x) = max(||x||, eps).
void l2norm_fwd(Ctx& ctx, const Tensor& x, float eps, const Tensor& y, const Tensor& norms);
// dx (= or += by accumulate) from dy, using the forward output y and norms.
void l2norm_bwd(Ctx& ctx, const Tensor& y, const Tensor& norms, float eps, const Tensor& dy,
                const Tensor& dx, bool accumulate);

}  // namespace hstu
