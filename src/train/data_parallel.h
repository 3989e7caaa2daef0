// data_parallel.h — how a rank takes part in a data-parallel step: its share of the global batch,
// the global normaliser of the loss, and the gradient all-reduce.
//
// Every rank assembles the same global batch (the batch order is a function of the seed and the
// epoch), so a rank's share, the global token count and the key of its random streams need no
// communication: rank r of W takes an equal-count slice of the global batch (or the slice the
// balanced shuffler assigns), scales its loss by 1 / (supervised tokens of the global batch) and
// keys dropout and negatives by its tokens' positions in the global batch. The gradients are
// summed over ranks (grad_reducer.h), so W ranks with batch B equal one rank with batch W*B up
// to the order of the floating-point sums.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "data/batch.h"
#include "dist/comm.h"

namespace hstu {

// This rank's part of one step.
namespace dist {
class ShardedTable;
}

struct StepShare {
  dist::Comm* comm = nullptr;  // null or one rank: a plain single-process step
  int64_t token_offset = 0;    // where this rank's tokens start in the global batch
  int64_t global_count = -1;   // loss normaliser of the global batch (-1: this batch's own)
  std::span<const int32_t> global_targets;  // the global batch's target ids (in-batch pools)
  dist::ShardedTable* items = nullptr;      // retrieval: the row-sharded item table, if any
  bool distributed() const { return comm != nullptr && comm->size() > 1; }
};

class DataParallel {
 public:
  // `balanced`: split each global batch with the workload-balanced shuffler (cost per sample:
  // `cost_per_token` * tokens + `cost_per_token2` * tokens^2) instead of equal-count slices in
  // order.
  DataParallel(dist::Comm& comm, bool balanced, double cost_per_token = 1,
               double cost_per_token2 = 0);

  // This rank's samples of `global`, as a batch (valid until the next call), and its share.
  const SequenceBatch& take(const SequenceBatch& global);
  int64_t token_offset() const { return token_offset_; }
  const SequenceBatch& local() const { return local_; }  // the last take()
  // Sample indices of `global` rank r takes (plain: contiguous, as equal as the count allows).
  std::vector<int64_t> samples_of(const SequenceBatch& global, int rank) const;
  dist::Comm& comm() { return comm_; }

  // Work of the most and of the average rank for the last global batch (the balancing report).
  double max_work() const { return max_work_; }
  double mean_work() const { return mean_work_; }

 private:
  double cost(int64_t tokens) const;
  dist::Comm& comm_;
  bool balanced_;
  double c1_, c2_;
  SequenceBatch local_;
  int64_t token_offset_ = 0;
  double max_work_ = 0, mean_work_ = 0;
};

}  // namespace hstu
