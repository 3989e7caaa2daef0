// cpu/hstu_attention.h — the CPU backend of the HSTU attention (ops/hstu_attention.h), defined in
// cpu/hstu_attention.cpp: what hstu_attention.cpp dispatches to on a CPU ctx. Private to src/ops/
// (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/hstu_attention.h"

namespace hstu::cpu {
void hstu_attention_fwd(Ctx&, const HstuAttentionArgs&, const Tensor&);
void hstu_attention_bwd(Ctx&, const HstuAttentionArgs&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&);
}  // namespace hstu::cpu
