// cpu/layernorm.h — the CPU backend of LayerNorm, the fused LN * u * dropout and dropout
// (ops/layernorm.h), defined in cpu/layernorm.cpp: what layernorm.cpp dispatches to on a CPU ctx.
// Private to src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/layernorm.h"

namespace hstu::cpu {
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
}  // namespace hstu::cpu
