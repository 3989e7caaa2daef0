// evaluator.h — retrieval evaluation with the paper's protocol: the output at each sample's last
// history position, L2-normalised, ranked against the whole L2-normalised item catalogue with the
// sample's history items removed; ranks beyond the cap count as cap + 1.
#pragma once

#include <cstdint>
#include <memory>

#include "core/arena.h"
#include "data/batcher.h"
#include "dist/comm.h"
#include "model/model.h"
#include "train/metrics.h"

namespace hstu {

class RetrievalEvaluator {
 public:
  // `split` is evaluated in order; max_batches = 0 evaluates all of it. With a communicator of W
  // ranks, rank r ranks batches r, r + W, ... and every rank gets the metrics of all of them,
  // equal to a single process's (the ranks are gathered in split order).
  RetrievalEvaluator(const SequenceDataset& ds, const Split& split, int64_t batch_size,
                     int64_t max_batches, HstuModel& model, dist::Comm* comm = nullptr);
  RetrievalMetrics run(Ctx& ctx, HstuModel& model);
  int64_t num_samples() const { return batcher_.num_samples(); }

 private:
  Batcher batcher_;
  int64_t batch_size_, max_batches_;
  dist::Comm* comm_;
  SequenceBatch host_;
  std::unique_ptr<Arena> arena_;
  Tensor last_idx_, queries_, targets_, ranks_;  // i32 [B], f32 [B, D], i32 [B], i32 [B]
};

}  // namespace hstu
