// cuda/retrieval_rank.h — the CUDA backend of the full-catalogue retrieval rank
// (ops/retrieval_rank.h), defined in cuda/retrieval_rank.cu (CUDA builds only): what
// retrieval_rank.cpp dispatches to on a CUDA ctx. Private to src/ops/ (tests/gpu includes it to
// compare the backends); no CUDA types, so host code may include it.
#pragma once

#include "ops/retrieval_rank.h"

namespace hstu::cuda {
void retrieval_rank(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    int32_t, const Tensor&);
void retrieval_rank_counts(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, int32_t, const Tensor&);
}  // namespace hstu::cuda
