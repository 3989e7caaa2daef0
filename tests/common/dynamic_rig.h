// dynamic_rig.h — a CPU retrieval model whose item table is a dynamic table (its window in the
// model), with the training step over a batcher of the train split: the setup the dynamic-table
// training tests share (tests/train).
#pragma once

#include <memory>
#include <vector>

#include "config/config.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
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
  std::unique_ptr<HstuModel> model;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<DynamicItemTable> items;
  std::unique_ptr<Batcher> batcher;  // the train split, shuffled with seed 7
  std::unique_ptr<TrainStep> stepper;
  StepShare share;
  SequenceBatch batch;  // the last batch next() drew

  // The model planned with `plan_seed` (its initial weights).
  DynamicRig(const Config& c, uint64_t plan_seed) : cfg(c), ds(open_dataset(cfg)) {
    splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
    shape = retrieval_model_shape(cfg, ds.num_items);
    shape.window_rows = item_window_rows(cfg, ds.num_items);
    shape.full_eval_buffers = true;
    model = std::make_unique<HstuModel>(cfg, shape, Device::kCPU, DType::kF32);
    model->plan(plan_seed);
    runtime = std::make_unique<Runtime>(Device::kCPU, cfg, shape);
    items = make_dynamic_item_table(cfg, ds, Device::kCPU, shape.window_rows);
    model->set_item_table(&items->window());
    batcher = std::make_unique<Batcher>(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
    stepper = std::make_unique<TrainStep>(cfg, ds.num_items);
    share.items = items.get();
  }

  Ctx& ctx() { return runtime->ctx(); }
  // Draws the next batch into `batch`.
  void next() { batcher->next(batch); }
  // Trains step `step` on `batch` at learning rate lr.
  void run(int64_t step, double lr) { stepper->run(ctx(), *model, batch, step, lr, share); }
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
};

}  // namespace hstu::test
