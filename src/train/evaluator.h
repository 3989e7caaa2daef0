// evaluator.h — retrieval evaluation with the paper's protocol: the output at each sample's last
// history position, L2-normalised, ranked against the whole L2-normalised item catalogue with the
// sample's history items removed; ranks beyond the cap count as cap + 1. Optionally the ranking
// runs over a subset of the catalogue (the candidates: a raw-id dynamic item table's present
// ids, train/dynamic_item_table.h present_ids).
#pragma once

#include <cstdint>
#include <memory>

#include "core/arena.h"
#include "data/batcher.h"
#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "model/model.h"
#include "train/metrics.h"

namespace hstu {

class RetrievalEvaluator {
 public:
  // `split` is evaluated in order; max_batches = 0 evaluates all of it. With a communicator of W
  // ranks, rank r ranks batches r, r + W, ... and every rank gets the metrics of all of them,
  // equal to a single process's (the ranks are gathered in split order).
  // With a row-sharded item table (`items`, whose window is the model's item table) each batch's
  // input rows are fetched into the window and the queries ranked shard by shard
  // (sharded_eval.h); the metrics still equal a single process's.
  RetrievalEvaluator(const SequenceDataset& ds, const Split& split, int64_t batch_size,
                     int64_t max_batches, HstuModel& model, dist::Comm* comm = nullptr,
                     dist::ShardedTable* items = nullptr);
  // candidates (optional, not with a sharded table): ascending ids in [1, num_items); when given
  // and not empty, each target is ranked against these items only,
  //   rank = 1 + #{candidates i != target, i not in history, score(i) > score(target) (ties:
  //   smaller id)}, capped as always,
  // the target scored from its own catalogue row whether or not it is a candidate
  // (retrieval_rank_counts over the candidates as one shard). Null or empty: the whole catalogue.
  RetrievalMetrics run(Ctx& ctx, HstuModel& model,
                       const std::vector<int32_t>* candidates = nullptr);
  int64_t num_samples() const { return batcher_.num_samples(); }

 private:
  // The ranks of batch i's samples into all[i * batch_size ...] (i < 0: this rank has no batch in
  // this round of a sharded evaluation but takes part in its collectives).
  void rank_batch(Ctx& ctx, HstuModel& model, const Tensor& items, int64_t i,
                  std::vector<int32_t>& all);
  // The candidates' normalised rows and ids gathered from `items` for run's candidate ranking.
  void gather_candidates(Ctx& ctx, const Tensor& items, const std::vector<int32_t>& ids);
  Batcher batcher_;
  int64_t batch_size_, max_batches_;
  dist::Comm* comm_;
  dist::ShardedTable* items_;
  SequenceBatch work_;  // a sharded evaluation's batch with window indices for ids
  SequenceBatch host_;
  std::unique_ptr<Arena> arena_;
  Tensor last_idx_, queries_, targets_, ranks_;  // i32 [B], f32 [B, D], i32 [B], i32 [B]
  // Candidate ranking (run with candidates): their rows f32 [P, D] and ids i32 [P], the batch's
  // target rows f32 [B, D]; empty when the whole catalogue is ranked.
  std::unique_ptr<Arena> cand_arena_;
  Tensor cand_rows_, cand_ids_, target_rows_;
};

}  // namespace hstu
