// cuda/uvqk_act.h — the CUDA backend of the layer's fused SiLU (ops/uvqk_act.h), defined in
// cuda/uvqk_act.cu (CUDA builds only): what uvqk_act.cpp dispatches to on a CUDA ctx. Private
// to src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host code may
// include it.
#pragma once

#include "ops/uvqk_act.h"

namespace hstu::cuda {
void uvqk_silu_fwd(Ctx&, const UvqkLayout&, const Tensor& z, const Tensor& uvqk);
void uvqk_silu_bwd(Ctx&, const UvqkLayout&, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db);
}  // namespace hstu::cuda
