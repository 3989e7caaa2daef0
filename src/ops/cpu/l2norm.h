// cpu/l2norm.h — the CPU backend of the row-wise L2 normalisation (ops/l2norm.h), defined in
// cpu/l2norm.cpp: what l2norm.cpp dispatches to on a CPU ctx. Private to src/ops/ (tests/gpu
// includes it to compare the backends).
#pragma once

#include "ops/l2norm.h"

namespace hstu::cpu {
void l2norm_fwd(Ctx&, const Tensor&, float, const Tensor&, const Tensor&);
void l2norm_bwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, bool);
}  // namespace hstu::cpu
