// cuda/optimizer.h — the CUDA backend of the dense optimiser and the gradient sum of squares
// (ops/optimizer.h), defined in cuda/optimizer.cu (CUDA builds only): what optimizer.cpp dispatches
// to on a CUDA ctx. Private to src/ops/ (tests/gpu includes it to compare the backends); no CUDA
// types, so host code may include it.
#pragma once

#include "ops/optimizer.h"

namespace hstu::cuda {
void dense_optimizer_step(Ctx&, const DenseOptimizerSpec&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&);
double sum_squares(Ctx&, const Tensor&);
void sum_squares_into(Ctx&, const Tensor&, const Tensor&);
}  // namespace hstu::cuda
