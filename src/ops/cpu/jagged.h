// cpu/jagged.h — the CPU backend of the ranking jagged ops (token sequence, candidate rows)
// (ops/jagged.h), defined in cpu/jagged.cpp: what jagged.cpp dispatches to on a CPU ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/jagged.h"

namespace hstu::cpu {
void ranking_tokens_fwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int32_t,
                        const Tensor&, const Tensor&);
void ranking_tokens_bwd(Ctx&, const Tensor&, const Tensor&, int32_t, const Tensor&, const Tensor&,
                        const Tensor&);
void gather_candidate_rows(Ctx&, const Tensor&, const Tensor&, const Tensor&, int32_t,
                           const Tensor&);
void gather_candidate_rows_bwd(Ctx&, const Tensor&, const Tensor&, const Tensor&, int32_t,
                               const Tensor&);
}  // namespace hstu::cpu
