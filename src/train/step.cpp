// step.cpp — the retrieval and ranking training steps, their staging and the optimiser
// application.
#include "train/step.h"

#include <cstring>

#include "core/checked.h"
#include "core/phase_timer.h"
#include "core/philox.h"
#include "data/negatives.h"
#include "ops/embedding.h"
#include "ops/optimizer.h"
#include "train/data_parallel.h"
#include "train/grad_reducer.h"
#include "train/item_window.h"
#include "train/table_negatives.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/negatives_gpu.h"
#endif

namespace hstu {

int64_t supervised_tokens(const SequenceBatch& b) {
  int64_t n = 0;
  for (int32_t t : b.target_ids) n += t != 0;
  return n;
}

namespace {

// The gradient reducer of a data-parallel step (made on its first step), begun for this step;
// null on one rank.
GradReducer* reducer_for(const StepShare& share, DenseParams& dense,
                         std::unique_ptr<GradReducer>& reducer, const Config& cfg) {
  if (!share.distributed()) return nullptr;
  if (!reducer)
    reducer = std::make_unique<GradReducer>(*share.comm, dense, cfg.network.num_layers,
                                            cfg.trainer.grad_bucket_mb << 20);
  reducer->begin();
  return reducer.get();
}

// TrainerArgs.nonfinite = "skip_step": the optimisers skip a step whose health is not finite.
bool skip_nonfinite(const Config& cfg) {
  return cfg.trainer.nonfinite == "skip_step";
}

}  // namespace

int64_t candidate_count(const SequenceBatch& b) {
  int64_t n = 0;
  for (int32_t c : b.num_candidates) n += c;
  return n;
}

StepStaging::~StepStaging() {
  // Queued copies may still read or write the staging buffers.
  for (auto& b : upload_)
    if (b) b->wait();
  for (auto& b : loss_)
    if (b) b->wait();
}

HostStaging* StepStaging::next_upload(const Ctx& ctx, size_t bytes) {
  if (ctx.cpu()) return nullptr;
  if (!upload_[0]) {  // all at the first step, before any work is queued
    for (auto& b : upload_) b = std::make_unique<HostStaging>(ctx.device, bytes);
    for (auto& b : loss_) b = std::make_unique<HostStaging>(ctx.device, 2 * sizeof(double));
  }
  HostStaging& b = *upload_[uploads_++ % 2];
  HSTU_CHECK(b.size() >= bytes, "upload staging of ", b.size(), " bytes, needs ", bytes);
  return &b;
}

void StepStaging::record(Ctx& ctx, int64_t step, const Tensor& health) {
  HSTU_CHECK(health.dtype == DType::kF64 && health.numel() == 2 && health.contiguous(),
             "StepStaging: a step's health must be f64 [2], got ", health.str());
  if (ctx.cpu()) {
    const double* h = health.as<double>();
    ready_.push_back({step, h[1], h[0]});
    return;
  }
  const int parity = static_cast<int>(losses_++ % 2);
  // Values come back in step order; a slot was last used two steps ago, so that step is
  // accounted before the slot is reused.
  while (pending_.size() >= 2) finish_oldest();
  HSTU_CHECK(loss_[parity], "StepStaging: record before the step's next_upload");
  HostStaging& slot = *loss_[parity];
  slot.wait();
  copy_bytes_async(slot.data(), Device::kCPU, health.data, health.device, 2 * sizeof(double),
                   ctx.stream);
  slot.record(ctx.stream);
  pending_.push_back({step, parity});
}

void StepStaging::finish_oldest() {
  const Pending p = pending_.front();
  pending_.pop_front();
  double h[2];
  loss_[p.slot]->wait();
  std::memcpy(h, loss_[p.slot]->data(), sizeof h);
  ready_.push_back({p.step, h[1], h[0]});
}

std::vector<StepLoss> StepStaging::drain(bool wait_all) {
  while (pending_.size() > (wait_all ? 0u : 1u)) finish_oldest();
  std::vector<StepLoss> out;
  out.swap(ready_);
  return out;
}

void TrainStep::run(Ctx& ctx, HstuModel& model, const SequenceBatch& host, int64_t step, double lr,
                    const StepShare& share) {
  if (share.items) return run_windowed(ctx, model, host, step, lr, share);
  BatchTensors& bt = model.batch_tensors();
  phase(ctx, "upload");
  upload_batch(host, model.capacity(), bt,
               staging_.next_upload(ctx, upload_staging_bytes(model.capacity())), ctx.stream);
  bt.token_offset = share.token_offset;
  upload_pool(ctx, model, share);
  const uint64_t seed = static_cast<uint64_t>(cfg_.trainer.seed);
  const int64_t sup = supervised_tokens(host);
  const int64_t global_sup = share.global_count >= 0 ? share.global_count : sup;
  // R: fixed, or (-1) the global batch's query count, known on the host before any work.
  const int64_t r = negatives_per_query(cfg_.retrieval.num_negatives, global_sup);
  bt.num_negatives = r;
  graph_.run(ctx, [&] {
    phase(ctx, "negatives");
    const Tensor negs = negatives_view(bt);  // [T, R]
    if (ctx.cpu()) {
      negs_ =
          sample_negatives(cfg_.retrieval.negative_sampler, host, num_items_, r, seed,
                           static_cast<uint64_t>(step), share.token_offset, share.global_targets);
      copy_bytes(negs.data, negs.device, negs_.data(), Device::kCPU,
                 negs_.size() * sizeof(int32_t));
    } else {
      device_negatives(ctx, bt, negs, step, share);
    }
    GradReducer* red = reducer_for(share, model.dense(), reducer_, cfg_);
    if (sup > 0)
      model.forward_backward(ctx, bt, derive_seed(seed, static_cast<uint64_t>(step)),
                             1.0 / global_sup, red);
    EmbeddingTable& items = model.items();
    if (red && global_sup > 0) {  // the replicated item table and the loss join the sums
      if (sup == 0) fill_zero(model.loss_tensor(), ctx.stream);
      red->finish(ctx, {{items.grad, dist::ReduceOp::kSum},
                        {items.touched, dist::ReduceOp::kMax},
                        {model.loss_tensor(), dist::ReduceOp::kSum}});
    }
    EmbeddingTable* const tables[] = {&items};
    optimizer_step(ctx, model.dense(), tables, cfg_.optimizer, lr, step + 1,
                   global_sup > 0 ? model.loss_tensor() : Tensor(), skip_nonfinite(cfg_));
  });
  staging_.record(ctx, step, model.dense().health());
}

void TrainStep::device_negatives(Ctx& ctx, const BatchTensors& bt, const Tensor& negs, int64_t step,
                                 const StepShare& share) {
#if defined(HSTU_WITH_CUDA)
  // The same per-element formula on the device: no [T, R] host buffer or copy per step. A
  // data-parallel rank's in-batch pool is the global batch's targets (upload_pool), as on the CPU.
  const uint64_t seed = static_cast<uint64_t>(cfg_.trainer.seed);
  if (table_negatives(share)) {  // uniform over the ids the item table holds
    Tensor pool, count;
    share.items->negative_pool_device(ctx, pool, count);
    cuda::sample_pool_negatives(ctx, pool, count, num_items_, seed, static_cast<uint64_t>(step),
                                negs, share.token_offset);
  } else if (cfg_.retrieval.negative_sampler == "in_batch")
    cuda::sample_in_batch_negatives(
        ctx, pool_used_ >= 0 ? pool_.rows(0, pool_used_) : bt.target_ids.rows(0, bt.num_tokens),
        seed, static_cast<uint64_t>(step), negs, share.token_offset);
  else
    cuda::sample_uniform_negatives(ctx, num_items_, seed, static_cast<uint64_t>(step), negs,
                                   share.token_offset);
#else
  (void)ctx, (void)bt, (void)negs, (void)step, (void)share;
  HSTU_THROW("negatives on the device need a CUDA build");
#endif
}

TrainStep::~TrainStep() {
  for (auto& b : pool_up_)
    if (b) b->wait();
}

void TrainStep::upload_pool(Ctx& ctx, const HstuModel& model, const StepShare& share) {
  pool_used_ = -1;
  if (ctx.cpu() || cfg_.retrieval.negative_sampler != "in_batch" || !share.distributed() ||
      share.global_targets.empty())
    return;
  const int64_t n = static_cast<int64_t>(share.global_targets.size());
  if (!pool_arena_) {  // at the first step, before any work is queued: W x max_tokens
    const int64_t cap =
        checked_mul(model.capacity().max_tokens, share.comm->size(), "in-batch pool targets");
    pool_arena_ = std::make_unique<Arena>(
        ctx.device, static_cast<size_t>(std::max<int64_t>(cap, 1)) * sizeof(int32_t), "pool");
    pool_ = pool_arena_->alloc(DType::kI32, {std::max<int64_t>(cap, 1)});
    for (auto& b : pool_up_)
      b = std::make_unique<HostStaging>(ctx.device, static_cast<size_t>(pool_.numel()) * 4);
  }
  HSTU_CHECK(n <= pool_.numel(), "in-batch pool: the global batch's ", n,
             " targets exceed the planned ", pool_.numel(), " (W x max_tokens)");
  HostStaging& b = *pool_up_[pool_uploads_++ % 2];
  b.wait();  // its copy of two steps ago has run
  std::memcpy(b.data(), share.global_targets.data(), static_cast<size_t>(n) * sizeof(int32_t));
  copy_bytes_async(pool_.data, ctx.device, b.data(), Device::kCPU,
                   static_cast<size_t>(n) * sizeof(int32_t), ctx.stream);
  b.record(ctx.stream);
  pool_used_ = n;
}

bool TrainStep::table_negatives(const StepShare& share) const {
  return share.items && cfg_.retrieval.negative_sampler == "uniform" &&
         share.items->table_negatives();
}

bool TrainStep::window_on_device(const Ctx& ctx, const StepShare& share) const {
  return !ctx.cpu() && share.items->on_device();
}

void TrainStep::windowed_model_pass(Ctx& ctx, HstuModel& model, BatchTensors& bt, int64_t step,
                                    int64_t sup, int64_t global_sup, const StepShare& share) {
  const uint64_t seed = static_cast<uint64_t>(cfg_.trainer.seed);
  GradReducer* red = reducer_for(share, model.dense(), reducer_, cfg_);
  if (sup > 0)
    model.forward_backward(ctx, bt, derive_seed(seed, static_cast<uint64_t>(step)),
                           1.0 / global_sup, red);
  if (red && global_sup > 0) {
    if (sup == 0) fill_zero(model.loss_tensor(), ctx.stream);
    red->finish(ctx, {{model.loss_tensor(), dist::ReduceOp::kSum}});
  }
}

void TrainStep::run_windowed_device(Ctx& ctx, HstuModel& model, const SequenceBatch& host,
                                    int64_t step, double lr, const StepShare& share) {
  ItemWindow& items = *share.items;
  const int64_t sup = supervised_tokens(host);
  const int64_t global_sup = share.global_count >= 0 ? share.global_count : sup;
  const int64_t r = negatives_per_query(cfg_.retrieval.num_negatives, global_sup);
  BatchTensors& bt = model.batch_tensors();
  phase(ctx, "upload");  // the raw ids: the device rewrites them to window rows
  upload_batch(host, model.capacity(), bt,
               staging_.next_upload(ctx, upload_staging_bytes(model.capacity())), ctx.stream);
  bt.token_offset = share.token_offset;
  bt.num_negatives = r;
  upload_pool(ctx, model, share);
  const Tensor negs = negatives_view(bt);  // [T, R]
  auto fetch = [&] {
    phase(ctx, "negatives");
    device_negatives(ctx, bt, negs, step, share);
    const Tensor ids[] = {bt.item_ids.rows(0, bt.num_tokens), bt.target_ids.rows(0, bt.num_tokens),
                          negs};
    items.fetch_device(ctx, step, ids);
  };
  auto train = [&] { windowed_model_pass(ctx, model, bt, step, sup, global_sup, share); };
  auto update = [&] {
    optimizer_step(ctx, model.dense(), {}, cfg_.optimizer, lr, step + 1,
                   global_sup > 0 ? model.loss_tensor() : Tensor(), skip_nonfinite(cfg_));
    const DenseParams& dense = model.dense();
    items.update(ctx, cfg_.optimizer, lr, step + 1,
                 skip_nonfinite(cfg_) ? dense.health() : Tensor(), dense.grad_sumsq());
  };
  if (items.device_only()) {  // one rank: nothing waits, the whole step is one graph
    graph_.run(ctx, [&] {
      fetch();
      train();
      update();
    });
  } else {  // W ranks: the fetch and the gradient push wait for their counts
    fetch();
    graph_.run(ctx, train);
    update();
  }
  staging_.record(ctx, step, model.dense().health());
}

void TrainStep::run_windowed(Ctx& ctx, HstuModel& model, const SequenceBatch& host, int64_t step,
                             double lr, const StepShare& share) {
  if (window_on_device(ctx, share)) return run_windowed_device(ctx, model, host, step, lr, share);
  ItemWindow& items = *share.items;
  const uint64_t seed = static_cast<uint64_t>(cfg_.trainer.seed);
  const int64_t sup = supervised_tokens(host);
  const int64_t global_sup = share.global_count >= 0 ? share.global_count : sup;
  const int64_t r = negatives_per_query(cfg_.retrieval.num_negatives, global_sup);
  phase(ctx, "negatives");
  if (table_negatives(share)) {  // uniform over the ids the item table holds
    negs_.resize(static_cast<size_t>(host.num_tokens() * r));
    sample_pool_negatives(items.negative_pool(ctx), num_items_, host.num_tokens(), r, seed,
                          static_cast<uint64_t>(step), negs_, share.token_offset);
  } else {
    negs_ = sample_negatives(cfg_.retrieval.negative_sampler, host, num_items_, r, seed,
                             static_cast<uint64_t>(step), share.token_offset, share.global_targets);
  }
  work_ = host;
  const std::span<int32_t> ids[] = {work_.item_ids, work_.target_ids, negs_};
  items.fetch(ctx, step, ids);
  BatchTensors& bt = model.batch_tensors();
  phase(ctx, "upload");
  upload_batch(work_, model.capacity(), bt,
               staging_.next_upload(ctx, upload_staging_bytes(model.capacity())), ctx.stream);
  bt.token_offset = share.token_offset;
  bt.num_negatives = r;
  const Tensor negs = negatives_view(bt);  // [T, R]
  copy_bytes(negs.data, negs.device, negs_.data(), Device::kCPU, negs_.size() * sizeof(int32_t));
  // The window's fetch and update may wait on the host, so they stay outside the step's graph.
  graph_.run(ctx, [&] { windowed_model_pass(ctx, model, bt, step, sup, global_sup, share); });
  optimizer_step(ctx, model.dense(), {}, cfg_.optimizer, lr, step + 1,
                 global_sup > 0 ? model.loss_tensor() : Tensor(), skip_nonfinite(cfg_));
  const DenseParams& dense = model.dense();
  items.update(ctx, cfg_.optimizer, lr, step + 1, skip_nonfinite(cfg_) ? dense.health() : Tensor(),
               dense.grad_sumsq());
  staging_.record(ctx, step, model.dense().health());
}

void RankingTrainStep::run(Ctx& ctx, RankingModel& model, const SequenceBatch& batch, int64_t step,
                           double lr, const StepShare& share) {
  const SequenceBatch* in = &batch;
  if (share.items) {  // the item ids become rows of the window their rows are fetched into
    work_ = batch;
    const std::span<int32_t> ids[] = {work_.item_ids};
    share.items->fetch(ctx, step, ids);
    in = &work_;
  }
  phase(ctx, "upload");
  model.upload(*in, staging_.next_upload(ctx, model.upload_staging_bytes()), ctx.stream);
  const int64_t nc = model.num_candidates();
  const int64_t global_nc = share.global_count >= 0 ? share.global_count : nc;
  const uint64_t seed =
      derive_seed(static_cast<uint64_t>(cfg_.trainer.seed), static_cast<uint64_t>(step));
  // The tables updated here: all but a windowed item table (the first), updated by its window.
  std::vector<EmbeddingTable*> tables = model.tables();
  if (share.items) tables.erase(tables.begin());
  graph_.run(ctx, [&] {
    GradReducer* red = reducer_for(share, model.dense(), reducer_, cfg_);
    if (nc > 0) model.forward_backward(ctx, seed, 1.0 / global_nc, red);
    if (red && global_nc > 0) {  // the replicated tables and the loss join the sums
      if (nc == 0) fill_zero(model.loss_tensor(), ctx.stream);
      std::vector<std::pair<Tensor, dist::ReduceOp>> extra;
      for (EmbeddingTable* t : tables) {
        extra.emplace_back(t->grad, dist::ReduceOp::kSum);
        extra.emplace_back(t->touched, dist::ReduceOp::kMax);
      }
      extra.emplace_back(model.loss_tensor(), dist::ReduceOp::kSum);
      red->finish(ctx, extra);
    }
    optimizer_step(ctx, model.dense(), tables, cfg_.optimizer, lr, step + 1,
                   global_nc > 0 ? model.loss_tensor() : Tensor(), skip_nonfinite(cfg_));
  });
  if (share.items) {
    const DenseParams& dense = model.dense();
    share.items->update(ctx, cfg_.optimizer, lr, step + 1,
                        skip_nonfinite(cfg_) ? dense.health() : Tensor(), dense.grad_sumsq());
  }
  staging_.record(ctx, step, model.dense().health());
}

}  // namespace hstu
