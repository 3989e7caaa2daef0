// cpu/retrieval_rank.h — the CPU backend of the full-catalogue retrieval rank
// (ops/retrieval_rank.h), defined in cpu/retrieval_rank.cpp: what retrieval_rank.cpp dispatches to
// on a CPU ctx. Private to src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/retrieval_rank.h"

namespace hstu::cpu {
void retrieval_rank(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    int32_t, const Tensor&);
void retrieval_rank_counts(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, int32_t, const Tensor&);
}  // namespace hstu::cpu
