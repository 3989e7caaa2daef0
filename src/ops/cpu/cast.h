// cpu/cast.h — the CPU backend of the dtype cast (ops/cast.h), defined in
// cpu/cast.cpp: what cast.cpp dispatches to on a CPU ctx. Private to src/ops/ (tests/gpu
// includes it to compare the backends).
#pragma once

#include "ops/cast.h"

namespace hstu::cpu {
void cast(Ctx& ctx, const Tensor& src, const Tensor& dst);
}  // namespace hstu::cpu
