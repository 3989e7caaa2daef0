// evaluator.cpp — batched encoding + full-catalogue ranking (retrieval_rank, or
// retrieval_rank_counts over a candidate subset) into metrics.
#include "train/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/checked.h"
#include "ops/embedding.h"
#include "ops/retrieval_rank.h"
#include "train/sharded_eval.h"

namespace hstu {

RetrievalEvaluator::RetrievalEvaluator(const SequenceDataset& ds, const Split& split,
                                       int64_t batch_size, int64_t max_batches, HstuModel& model,
                                       dist::Comm* comm, dist::ShardedTable* items)
    : batcher_(ds, split, batch_size, /*shuffle=*/false, 0),
      batch_size_(batch_size),
      max_batches_(max_batches),
      comm_(comm),
      items_(items) {
  HSTU_CHECK(!items || comm, "a sharded item table is evaluated with the job's ranks");
  const int64_t d = model.config().network.hidden_size;
  const int64_t per_sample = checked_add(checked_mul(d, 4, "eval query bytes"), 12, "eval bytes");
  const size_t bytes =
      static_cast<size_t>(checked_mul(batch_size, per_sample, "eval buffer bytes")) +
      8 * Arena::kAlign;
  arena_ = std::make_unique<Arena>(model.device(), bytes, "eval");
  last_idx_ = arena_->alloc(DType::kI32, {batch_size});
  queries_ = arena_->alloc(DType::kF32, {batch_size, d});
  targets_ = arena_->alloc(DType::kI32, {batch_size});
  ranks_ = arena_->alloc(DType::kI32, {batch_size});
}

void RetrievalEvaluator::rank_batch(Ctx& ctx, HstuModel& model, const Tensor& items, int64_t i,
                                    std::vector<int32_t>& all) {
  const int32_t cap =
      checked_i32(model.config().retrieval.eval_rank_cap, "RetrievalArgs.eval_rank_cap");
  if (i >= 0) {
    batcher_.get(0, i, host_);
  } else {  // no batch: an empty one
    host_ = SequenceBatch{};
    host_.offsets = {0};
  }
  const int32_t b = host_.batch_size;
  BatchTensors& bt = model.batch_tensors();
  const SequenceBatch* batch = &host_;
  if (items_) {  // the window holds the batch's input rows
    work_ = host_;
    const std::span<int32_t> ids[] = {work_.item_ids};
    items_->dedup_and_fetch(ctx, *comm_, ids);
    batch = &work_;
  }
  const Tensor queries = queries_.rows(0, b), ranks_t = ranks_.rows(0, b);
  if (b > 0) {
    upload_batch(*batch, model.capacity(), bt);
    const Tensor out = model.encode(ctx, bt);  // [T, D] L2-normalised
    std::vector<int32_t> last(static_cast<size_t>(b));
    for (int32_t s = 0; s < b; ++s)
      last[static_cast<size_t>(s)] = host_.offsets[static_cast<size_t>(s) + 1] - 1;
    const Tensor last_idx = last_idx_.rows(0, b);
    copy_bytes(last_idx.data, last_idx.device, last.data(), Device::kCPU, b * sizeof(int32_t));
    embedding_fwd(ctx, out, last_idx, 1.0f, Tensor(), Tensor(), queries);
  }
  if (items_) {
    items_->end_read_only_fetch();  // the window was only read: no gradients go back
    const std::vector<int32_t> r = sharded_retrieval_ranks(
        ctx, *comm_, *items_, queries, host_.eval_targets, host_.offsets, host_.item_ids,
        static_cast<float>(model.config().retrieval.l2_norm_eps), cap);
    std::copy(r.begin(), r.end(), all.begin() + i * batch_size_);
    return;
  }
  const Tensor targets = targets_.rows(0, b);
  copy_bytes(targets.data, targets.device, host_.eval_targets.data(), Device::kCPU,
             b * sizeof(int32_t));
  if (cand_rows_.empty()) {
    retrieval_rank(ctx, queries, items, targets, bt.offsets.rows(0, b + 1),
                   bt.item_ids.rows(0, bt.num_tokens), cap, ranks_t);
    copy_bytes(all.data() + i * batch_size_, Device::kCPU, ranks_t.data, ranks_t.device,
               b * sizeof(int32_t));
    return;
  }
  // The candidates as one shard: counts of the candidates above each target; the target's
  // score from its own normalised catalogue row (the bits retrieval_rank gives it).
  const Tensor trows = target_rows_.rows(0, b);
  embedding_fwd(ctx, items, targets, 1.0f, Tensor(), Tensor(), trows);
  retrieval_rank_counts(ctx, queries, trows, targets, cand_rows_, cand_ids_,
                        bt.offsets.rows(0, b + 1), bt.item_ids.rows(0, bt.num_tokens), cap,
                        ranks_t);
  int32_t* out = all.data() + i * batch_size_;
  copy_bytes(out, Device::kCPU, ranks_t.data, ranks_t.device, b * sizeof(int32_t));
  for (int32_t s = 0; s < b; ++s)
    out[s] = out[s] == kRankCountNonFinite ? cap + 2 : std::min(out[s], cap) + 1;
}

void RetrievalEvaluator::gather_candidates(Ctx& ctx, const Tensor& items,
                                           const std::vector<int32_t>& ids) {
  const int64_t p = static_cast<int64_t>(ids.size()), v = items.dim(0), d = items.dim(1);
  for (size_t k = 0; k < ids.size(); ++k)
    HSTU_CHECK(ids[k] >= 1 && ids[k] < v && (k == 0 || ids[k - 1] < ids[k]),
               "RetrievalEvaluator: evaluation candidate ", k, " = ", ids[k],
               " is not an ascending id in [1, ", v, ")");
  cand_arena_ = Arena::planned(items.device, "eval candidates", [&](Arena& a) {
    cand_rows_ = a.alloc(DType::kF32, {p, d});              // [P, D] normalised candidate rows
    cand_ids_ = a.alloc(DType::kI32, {p});                  // [P] their catalogue ids
    target_rows_ = a.alloc(DType::kF32, {batch_size_, d});  // [B, D] a batch's target rows
  });
  copy_bytes(cand_ids_.data, cand_ids_.device, ids.data(), Device::kCPU, p * sizeof(int32_t));
  embedding_fwd(ctx, items, cand_ids_, 1.0f, Tensor(), Tensor(), cand_rows_);
}

RetrievalMetrics RetrievalEvaluator::run(Ctx& ctx, HstuModel& model,
                                         const std::vector<int32_t>* candidates) {
  RetrievalMetrics metrics;
  const Tensor items = items_ ? Tensor() : model.normalized_items(ctx);
  const bool subset = candidates && !candidates->empty();
  HSTU_CHECK(!subset || !items_,
             "RetrievalEvaluator: evaluation candidates with a row-sharded item table");
  if (subset) {
    gather_candidates(ctx, items, *candidates);
  } else {
    cand_arena_.reset();
    cand_rows_ = cand_ids_ = target_rows_ = Tensor();
  }
  int64_t n = batcher_.num_batches();
  if (max_batches_ > 0 && max_batches_ < n) n = max_batches_;
  const int32_t cap =
      checked_i32(model.config().retrieval.eval_rank_cap, "RetrievalArgs.eval_rank_cap");
  const int ranks = comm_ ? comm_->size() : 1, rank = comm_ ? comm_->rank() : 0;
  // Every sample's rank in split order (0 where another rank evaluates it, until the sum). Rank
  // r ranks batches r, r + W, ...; with a sharded table every rank takes part in every round.
  const int64_t samples = std::min(n * batch_size_, batcher_.num_samples());
  std::vector<int32_t> all(static_cast<size_t>(samples), 0);
  for (int64_t round = 0; round * ranks < n; ++round) {
    const int64_t i = round * ranks + rank;
    if (i < n)
      rank_batch(ctx, model, items, i, all);
    else if (items_)
      rank_batch(ctx, model, items, -1, all);
  }
  if (ranks > 1 && samples > 0)
    comm_->host_all_reduce(Tensor(all.data(), DType::kI32, Device::kCPU, {samples}),
                           dist::ReduceOp::kSum);
  int64_t nonfinite = 0;  // targets whose score is NaN or infinite (ranked last)
  for (const int32_t r : all) {
    nonfinite += r == cap + 2;
    metrics.add(r == cap + 2 ? cap + 1 : r);
  }
  if (nonfinite > 0 && (!comm_ || comm_->is_root())) {
    std::fprintf(stderr,
                 "hstu: warning: %lld of %lld evaluation targets have a non-finite score (NaN or "
                 "infinite weights, or an overflow in the forward pass); they are ranked last\n",
                 static_cast<long long>(nonfinite), static_cast<long long>(metrics.count()));
  }
  return metrics;
}

}  // namespace hstu
