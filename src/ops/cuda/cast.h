// cuda/cast.h — the CUDA backend of the dtype cast (ops/cast.h), defined in
// cuda/cast.cu (CUDA builds only): what cast.cpp dispatches to on a CUDA ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host code may
// include it.
#pragma once

#include "ops/cast.h"

namespace hstu::cuda {
void cast(Ctx& ctx, const Tensor& src, const Tensor& dst);
}  // namespace hstu::cuda
