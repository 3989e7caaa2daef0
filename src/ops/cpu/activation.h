// cpu/activation.h — the CPU backend of the activations (SiLU / ReLU / GELU) (ops/activation.h),
// defined in cpu/activation.cpp: what activation.cpp dispatches to on a CPU ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/activation.h"

namespace hstu::cpu {
void activation_fwd(Ctx&, Activation, const Tensor&, const Tensor&, ActHeads = {});
void activation_bwd(Ctx&, Activation, const Tensor&, const Tensor&, const Tensor&, ActHeads = {});
}  // namespace hstu::cpu
