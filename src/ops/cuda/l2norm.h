// cuda/l2norm.h — the CUDA backend of the row-wise L2 normalisation (ops/l2norm.h), defined in
// cuda/l2norm.cu (CUDA builds only): what l2norm.cpp dispatches to on a CUDA ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host code may
// include it.
#pragma once

#include "ops/l2norm.h"

namespace hstu::cuda {
void l2norm_fwd(Ctx&, const Tensor&, float, const Tensor&, const Tensor&);
void l2norm_bwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, bool);
}  // namespace hstu::cuda
