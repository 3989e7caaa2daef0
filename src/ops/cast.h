// cast.h — element-wise dtype conversion between f32/f64 and bf16/f16 tensors (the compute copy
// of the weights, host<->device staging). bf16/f16 conversions round to nearest even.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// dst = src converted to dst.dtype (same shape; strided 2-D views allowed).
void cast(Ctx& ctx, const Tensor& src, const Tensor& dst);

namespace cpu {
void cast(Ctx&, const Tensor&, const Tensor&);
}  // namespace cpu
namespace cuda {
void cast(Ctx&, const Tensor&, const Tensor&);
}  // namespace cuda

inline void cast(Ctx& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.cpu()) return cpu::cast(ctx, src, dst);
  HSTU_CUDA_DISPATCH(return cuda::cast(ctx, src, dst));
}

}  // namespace hstu
