// cuda/embedding.h — the CUDA backend of the embedding lookups, sparse row gradients and sparse
// optimisers (ops/embedding.h), defined in cuda/embedding.cu (CUDA builds only): what embedding.cpp
// dispatches to on a CUDA ctx. Private to src/ops/ (tests/gpu includes it to compare the backends);
// no CUDA types, so host code may include it.
#pragma once

#include "ops/embedding.h"

namespace hstu::cuda {
void embedding_fwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&,
                   const Tensor&);
void embedding_bwd(Ctx&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&);
void collect_touched_rows(Ctx&, const Tensor&, const Tensor&, const Tensor&);
void sparse_optimizer_step(Ctx&, const SparseOptimizerSpec&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&);
}  // namespace hstu::cuda
