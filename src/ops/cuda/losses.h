// cuda/losses.h — the CUDA backend of the ranking losses (multi-task BCE, cross-entropy)
// (ops/losses.h), defined in cuda/losses.cu (CUDA builds only): what losses.cpp dispatches to on a
// CUDA ctx. Private to src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so
// host code may include it.
#pragma once

#include "ops/losses.h"

namespace hstu::cuda {
void bce_multitask(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double);
void cross_entropy(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double);
}  // namespace hstu::cuda
