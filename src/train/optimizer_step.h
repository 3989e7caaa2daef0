// optimizer_step.h — the optimisers of one training step: the dense optimiser over the flat
// parameter buffer (one call per decay group) and each embedding table's sparse optimiser. They
// clear the gradients they apply. Shared by the retrieval and ranking steps and by the item
// windows (item_window.h), whose tables are updated after the step's exchanges.
#pragma once

#include <cstdint>
#include <span>

#include "config/config.h"
#include "core/context.h"
#include "model/params.h"

namespace hstu {

// Applies the dense optimiser and each table's sparse optimiser (sparse_table_step) for 1-based
// step `step`, then clears all gradients. First it fills dense.health(): the gradients' sum of
// squares (every step: the numerical health check and the logged gradient norm read it) and a
// copy of `loss` (f64 [1] on the device, the step's all-reduced loss; empty: 0). skip_nonfinite
// (TrainerArgs.nonfinite = "skip_step"): the optimisers read health() on the device and apply
// nothing when a value is not finite (the gradients are cleared all the same).
void optimizer_step(Ctx& ctx, DenseParams& dense, std::span<EmbeddingTable* const> tables,
                    const OptimizerArgs& o, double lr, int64_t step, const Tensor& loss = {},
                    bool skip_nonfinite = false);

// One table's sparse optimiser (OptimizerArgs.sparse_optimizer_str) over its touched rows, then
// its gradient and touched flags cleared. skip_if_nonfinite: dense.health() when steps with a
// non-finite health are skipped, else empty. grad_sumsq: dense.grad_sumsq() (after
// optimizer_step filled it), which clips "dense_adam" tables with OptimizerArgs.grad_clip_norm
// like the dense buffer.
void sparse_table_step(Ctx& ctx, EmbeddingTable& table, const OptimizerArgs& o, double lr,
                       int64_t step, const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq);

}  // namespace hstu
