// cpu/embedding.h — the CPU backend of the embedding lookups, sparse row gradients and sparse
// optimisers (ops/embedding.h), defined in cpu/embedding.cpp: what embedding.cpp dispatches to on a
// CPU ctx. Private to src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/embedding.h"

namespace hstu::cpu {
void embedding_fwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&,
                   const Tensor&);
void embedding_bwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&);
void collect_touched_rows(Ctx&, const Tensor&, const Tensor&, const Tensor&);
void sparse_optimizer_step(Ctx&, const SparseOptimizerSpec&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&);
}  // namespace hstu::cpu
