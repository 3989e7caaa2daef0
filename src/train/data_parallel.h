// data_parallel.h — how a rank takes part in a data-parallel step: its share of the global batch,
// the global normaliser of the loss, and the key of its random streams.
//
// Every rank assembles the same global batch (the batch order is a function of the seed and the
// epoch), so a rank's share, the global token count and the key of its random streams need no
// communication: rank r of W takes an equal-count slice of the global batch (or, with
// TrainerArgs.enable_balanced_shuffler, the set the Karmarkar-Karp partition of the samples'
// estimated work assigns it, dist/balance.h), scales its loss by 1 / (supervised tokens of the
// global batch) and keys dropout and negatives by its tokens' positions in the global batch. The
// gradients are summed over ranks (grad_reducer.h), so W ranks with batch B equal one rank with
// batch W*B up to the order of the floating-point sums.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "data/batch.h"
#include "dist/comm.h"

namespace hstu {

class ItemWindow;  // item_window.h

// Whether a job runs the data-parallel paths: every communicator but the local one (so a 1-rank
// NCCL or MPI job exercises the collectives, as the acceptance measurements of the NCCL path
// need; `hstu` started alone gets the local one and the plain single-process step).
inline bool data_parallel_job(const dist::Comm& comm) {
  return std::string_view(comm.backend()) != "local";
}

// This rank's part of one step.
struct StepShare {
  dist::Comm* comm = nullptr;  // null or one rank: a plain single-process step
  int64_t token_offset = 0;    // where this rank's tokens start in the global batch
  int64_t global_count = -1;   // loss normaliser of the global batch (-1: this batch's own)
  std::span<const int32_t> global_targets;  // the global batch's target ids (in-batch pools)
  ItemWindow* items = nullptr;  // retrieval: an item table reached through a window, if any
  bool distributed() const { return comm != nullptr && data_parallel_job(*comm); }
};

class DataParallel {
 public:
  // The estimated work of one sample of `tokens` tokens (model/flops.h sample_cost).
  using CostFn = std::function<double(int64_t tokens)>;
  // `balanced`: split each global batch with the Karmarkar-Karp partition of the samples' cost
  // instead of equal-count slices in order.
  DataParallel(dist::Comm& comm, bool balanced, CostFn cost);

  // This rank's samples of `global`, as a batch (valid until the next call).
  const SequenceBatch& take(const SequenceBatch& global);
  const SequenceBatch& local() const { return local_; }  // the last take()
  // Where this rank's tokens start in the global batch (contiguous slices), or the start of a
  // range of the random streams no other rank's tokens reach (balanced sets are interleaved).
  int64_t token_offset() const { return token_offset_; }

  // The balancing report over the global batches so far: the mean over steps of max / mean
  // rank work, of the split used and of the plain equal-count slices.
  double mean_imbalance() const { return steps_ ? sum_used_ / steps_ : 1.0; }
  double mean_plain_imbalance() const { return steps_ ? sum_plain_ / steps_ : 1.0; }
  bool balanced() const { return balanced_; }

 private:
  dist::Comm& comm_;
  bool balanced_;
  CostFn cost_;
  SequenceBatch local_;
  std::vector<double> costs_;
  int64_t token_offset_ = 0;
  double sum_used_ = 0, sum_plain_ = 0;
  int64_t steps_ = 0;
};

}  // namespace hstu
