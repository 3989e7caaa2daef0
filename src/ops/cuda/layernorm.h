// cuda/layernorm.h — the CUDA backend of LayerNorm, the fused LN * u * dropout and dropout
// (ops/layernorm.h), defined in cuda/layernorm.cu (CUDA builds only): what layernorm.cpp dispatches
// to on a CUDA ctx. Private to src/ops/ (tests/gpu includes it to compare the backends); no CUDA
// types, so host code may include it.
#pragma once

#include "ops/layernorm.h"

namespace hstu::cuda {
void layernorm_fwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, float, const Tensor&,
                   const Tensor&, const Tensor&);
void layernorm_bwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, bool, const Tensor&, const Tensor&);
void ln_mul_dropout_fwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                        const DropoutSpec&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&);
void ln_mul_dropout_bwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const DropoutSpec&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
void dropout_fwd(Ctx&, const Tensor&, const DropoutSpec&, const Tensor&);
void dropout_bwd(Ctx&, const Tensor&, const DropoutSpec&, const Tensor&);
}  // namespace hstu::cuda
