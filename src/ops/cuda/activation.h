// cuda/activation.h — the CUDA backend of the activations (SiLU / ReLU / GELU) (ops/activation.h),
// defined in cuda/activation.cu (CUDA builds only): what activation.cpp dispatches to on a CUDA
// ctx. Private to src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host
// code may include it.
#pragma once

#include "ops/activation.h"

namespace hstu::cuda {
void activation_fwd(Ctx&, Activation, const Tensor&, const Tensor&, ActHeads = {});
void activation_bwd(Ctx&, Activation, const Tensor&, const Tensor&, const Tensor&, ActHeads = {});
}  // namespace hstu::cuda
