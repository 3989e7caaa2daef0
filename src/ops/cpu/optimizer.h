// cpu/optimizer.h — the CPU backend of the dense optimiser and the gradient sum of squares
// (ops/optimizer.h), defined in cpu/optimizer.cpp: what optimizer.cpp dispatches to on a CPU ctx.
// Private to src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/optimizer.h"

namespace hstu::cpu {
void dense_optimizer_step(Ctx&, const DenseOptimizerSpec&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&);
double sum_squares(Ctx&, const Tensor&);
void sum_squares_into(Ctx&, const Tensor&, const Tensor&);
}  // namespace hstu::cpu
