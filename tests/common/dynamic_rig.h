// dynamic_rig.h — a retrieval model whose item table is a dynamic table (its window in the
// model), with the training step over a batcher of the train split: the setup the dynamic-table
// training tests share (tests/train on the CPU, tests/gpu/test_gpu_window.cpp on CUDA with a bf16
// model, optionally sharded by key over a communicator's ranks).
#pragma once

#include <memory>
#include <vector>

#include "config/config.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "dist/comm.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/dynamic_item_table.h"
#include "train/runtime.h"
#include "train/step.h"

namespace hstu::test {

struct DynamicRig {
  Config cfg;
  SequenceDataset ds;
  DataSplits splits;
  ModelShape shape;
  std::unique_ptr<Runtime> runtime;  // made first, destroyed last
  std::unique_ptr<HstuModel> model;
  std::unique_ptr<DynamicItemTable> items;
  std::unique_ptr<Batcher> batcher;  // the train split, shuffled with seed 7
  std::unique_ptr<TrainStep> stepper;
  StepShare share;
  SequenceBatch batch;  // the last batch next() drew

  // The model planned with `plan_seed` (its initial weights), its activations of dtype `act` on
  // `device`; with `comm` the table is sharded by key over its ranks (dynamic_shard.h) and each
  // step is a data-parallel one.
  DynamicRig(const Config& c, uint64_t plan_seed, Device device = Device::kCPU,
             DType act = DType::kF32, dist::Comm* comm = nullptr)
      : cfg(c), ds(open_dataset(cfg)), comm_(comm) {
    splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
    shape = retrieval_model_shape(cfg, ds.num_items);
    shape.window_rows = item_window_rows(cfg, ds.num_items);
    shape.full_eval_buffers = true;
    if (comm) {  // as retrieval_task.cpp's shape of a data-parallel job
      shape.max_pool_targets = shape.max_tokens * comm->size();
      shape.max_scatter_rows = shape.window_rows * comm->size();
    }
    runtime = std::make_unique<Runtime>(device, cfg, shape);
    model = std::make_unique<HstuModel>(cfg, shape, device, act);
    model->plan(plan_seed);
    items = make_dynamic_item_table(cfg, ds, device, shape.window_rows, comm);
    model->set_item_table(&items->window());
    batcher = std::make_unique<Batcher>(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
    stepper = std::make_unique<TrainStep>(cfg, ds.num_items);
    share.items = items.get();
  }

  Ctx& ctx() { return runtime->ctx(); }
  // Draws the next batch into `batch`.
  void next() { batcher->next(batch); }
  // Trains step `step` on `batch` at learning rate lr.
  void run(int64_t step, double lr) {
    if (comm_) {
      share.comm = comm_;
      share.global_count = supervised_tokens(batch);
      share.global_targets = batch.target_ids;
    }
    stepper->run(ctx(), *model, batch, step, lr, share);
  }
  // `steps` steps from step 0, each on the next batch; returns every step's loss.
  std::vector<double> train(int64_t steps, double lr) {
    for (int64_t s = 0; s < steps; ++s) {
      next();
      run(s, lr);
    }
    return losses();
  }
  // The losses of the steps run since the last call (waits for the last step).
  std::vector<double> losses() {
    std::vector<double> out;
    for (const StepLoss& l : stepper->drain(true)) out.push_back(l.loss);
    return out;
  }

 private:
  dist::Comm* comm_;
};

}  // namespace hstu::test
