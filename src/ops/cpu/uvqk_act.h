// cpu/uvqk_act.h — the CPU backend (and reference) of the layer's fused SiLU (ops/uvqk_act.h),
// defined in cpu/uvqk_act.cpp: what uvqk_act.cpp dispatches to on a CPU ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/uvqk_act.h"

namespace hstu::cpu {
void uvqk_silu_fwd(Ctx&, const UvqkLayout&, const Tensor& z, const Tensor& uvqk);
void uvqk_silu_bwd(Ctx&, const UvqkLayout&, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db);
}  // namespace hstu::cpu
