// cpu/losses.h — the CPU backend of the ranking losses (multi-task BCE, cross-entropy)
// (ops/losses.h), defined in cpu/losses.cpp: what losses.cpp dispatches to on a CPU ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/losses.h"

namespace hstu::cpu {
void bce_multitask(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double);
void cross_entropy(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double);
}  // namespace hstu::cpu
