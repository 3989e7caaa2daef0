// cmd_eval.cpp — `hstu eval <run_dir>`: evaluates a run's checkpoint on its test split (and
// validation split when the config has one) with the training-time protocol.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "config/load.h"
#include "config/schema.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "train/checkpoint.h"
#include "train/evaluator.h"
#include "train/metrics_log.h"
#include "train/runtime.h"

namespace hstu::cli {

int cmd_eval(const Args& a) {
  check_known(a, {"device", "checkpoint"}, "eval");
  HSTU_CHECK(!a.positional.empty(), "usage: hstu eval <run_dir> [--checkpoint DIR] [--set ...]");
  const std::string run_dir = a.positional[0];
  std::vector<std::string> sets = a.sets;
  if (a.has("device")) sets.push_back("TrainerArgs.device=" + a.get("device"));
  std::vector<std::string> warnings;
  const Config cfg = load_config(run_dir + "/config.gin", sets, &warnings);
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  const Device device = resolve_device(cfg.trainer.device);
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = cfg.trainer.eval_batch_size;
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = 1;
  HstuModel model(cfg, shape, device, device == Device::kCPU ? DType::kF32 : DType::kBF16);
  model.plan(0);
  const std::string ckpt = a.get("checkpoint", run_dir + "/checkpoints");
  load_checkpoint(model, ckpt, false);
  Runtime runtime(device, cfg, shape);
  Ctx& ctx = runtime.ctx();
  model.dense().refresh_compute_copy(ctx);
  std::vector<EvalRow> rows;
  if (!splits.validation.samples.empty())
    rows.push_back({"val", RetrievalEvaluator(ds, splits.validation, cfg.trainer.eval_batch_size, 0, model).run(ctx, model).values()});
  rows.push_back({"test", RetrievalEvaluator(ds, splits.test, cfg.trainer.eval_batch_size, 0, model).run(ctx, model).values()});
  std::cout << "checkpoint " << ckpt << ":\n";
  print_eval_table(std::cout, rows);
  return 0;
}

}  // namespace hstu::cli
