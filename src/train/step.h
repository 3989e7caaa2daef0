// step.h — one training step of the retrieval model, shared by the trainer and `hstu bench
// train`: upload the batch, draw negatives, forward + backward, then the dense and sparse
// optimisers (which also clear the gradients).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/context.h"
#include "data/batch.h"
#include "model/model.h"

namespace hstu {

class TrainStep {
 public:
  TrainStep(const Config& cfg, int64_t num_items) : cfg_(cfg), num_items_(num_items) {}
  // Runs step `step` (0-based) on `batch` with learning rate `lr`; returns the batch's mean loss
  // over its supervised tokens.
  double run(Ctx& ctx, HstuModel& model, const SequenceBatch& batch, int64_t step, double lr);

 private:
  const Config& cfg_;
  int64_t num_items_;
  std::vector<int32_t> negs_;
};

// Applies the dense optimiser (one call per decay group of the flat buffer) and each embedding
// table's sparse optimiser for 1-based step `step`, then clears all gradients. Shared by the
// retrieval and ranking models.
void optimizer_step(Ctx& ctx, DenseParams& dense, std::span<EmbeddingTable* const> tables,
                    const OptimizerArgs& o, double lr, int64_t step);

}  // namespace hstu
