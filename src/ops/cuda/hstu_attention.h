// cuda/hstu_attention.h — the CUDA backend of the HSTU attention (ops/hstu_attention.h), defined in
// cuda/hstu_attention.cu (CUDA builds only): what hstu_attention.cpp dispatches to on a CUDA ctx.
// Private to src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host code
// may include it.
#pragma once

#include "ops/hstu_attention.h"

namespace hstu::cuda {
void hstu_attention_fwd(Ctx&, const HstuAttentionArgs&, const Tensor&);
void hstu_attention_bwd(Ctx&, const HstuAttentionArgs&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&);
bool hstu_rab_buckets(Ctx&, const HstuAttentionArgs&, const Tensor&);
HstuAttentionPlan hstu_attention_plan(Ctx&, const HstuAttentionArgs&, const Tensor&);
}  // namespace hstu::cuda
