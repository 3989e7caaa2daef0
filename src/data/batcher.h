// batcher.h — turns a Split into jagged SequenceBatches: a seeded per-epoch shuffle, fixed-size
// batches (the last one of an epoch smaller) and a position that checkpoints can save and
// restore.
//
// The shaping decision: the order of epoch e is a pure function of (seed, e) — a Fisher–Yates
// shuffle on the Philox stream (seed, kShuffleStream, counter e << 32) — so resuming needs only
// (epoch, batch_index), never RNG state.
//
// Batch contents for sample b with history events h_0 .. h_{n-1} and target event t:
//   item_ids / actions / timestamps = those of h_0 .. h_{n-1}
//   target_ids[i]       = item of h_{i+1}, and item of t for i = n-1
//   query_timestamps[i] = time of h_{i+1}, and time of t for i = n-1
//   eval_targets[b] = item of t; user_ids[b]; contextual[b*C + c]; num_candidates[b] = 0
// Raw-id datasets: item_keys / target_keys / eval_target_keys hold the same events' keys and
// item_ids / target_ids / eval_targets are zeros (batch.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/splits.h"

namespace hstu {

class Batcher {
 public:
  // Builds the batch of the given sample indices (into the split this batcher walks).
  using MakeBatch = std::function<void(std::span<const int64_t> samples, SequenceBatch& out)>;

  // Walks `num_samples` samples; `make` fills a batch from sample indices.
  Batcher(int64_t num_samples, int64_t batch_size, bool shuffle, uint64_t seed, MakeBatch make);
  // The retrieval samples of `split` (make_batch). `ds` and `split` must outlive the batcher.
  // shuffle = false keeps the split's order (eval).
  Batcher(const SequenceDataset& ds, const Split& split, int64_t batch_size, bool shuffle,
          uint64_t seed);

  int64_t num_samples() const { return num_samples_; }
  int64_t num_batches() const;  // per epoch: ceil(num_samples / batch_size)

  // The next batch to be produced.
  int64_t epoch() const { return epoch_; }
  int64_t batch_index() const { return batch_index_; }
  void set_position(int64_t epoch, int64_t batch_index);

  // Fills `out` with the batch at the current position and advances (to batch 0 of the next
  // epoch after the last batch). Reuses out's buffers.
  void next(SequenceBatch& out);

  // Fills `out` with batch `batch_index` of `epoch` without moving the position.
  void get(int64_t epoch, int64_t batch_index, SequenceBatch& out);

  // Sample order of an epoch: [num_samples] sample indices.
  std::span<const int64_t> order(int64_t epoch);

 private:
  int64_t num_samples_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  MakeBatch make_;
  int64_t epoch_ = 0, batch_index_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;  // [num_samples] order of order_epoch_
};

// Fills `out` with the given samples (in this order) of `split`, as documented above.
void make_batch(const SequenceDataset& ds, const Split& split, std::span<const int64_t> samples,
                SequenceBatch& out);

}  // namespace hstu
