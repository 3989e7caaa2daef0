// cmd_eval.cpp — `hstu eval <run_dir>`: evaluates a run's checkpoint with the training-time
// protocol: a retrieval run on its test split (and validation split when the config has one), a
// ranking run on its eval split (per-task AUC etc.). Prints the table; --json also writes the
// values, unrounded, as {split: {metric: value}}.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/dynamic_table.h"
#include "config/load.h"
#include "config/schema.h"
#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/splits.h"
#include "io/atomic_file.h"
#include "model/memory_plan.h"
#include "model/ranking_model.h"
#include "train/checkpoint.h"
#include "train/dynamic_item_table.h"
#include "train/eval_report.h"
#include "train/evaluator.h"
#include "train/health.h"
#include "train/ranking_eval.h"
#include "train/runtime.h"

namespace hstu::cli {

namespace {

// A ranking run's checkpoint on its eval split.
std::vector<EvalRow> eval_ranking(const Config& cfg, const SequenceDataset& ds,
                                  const std::string& ckpt) {
  const RankingSplits splits =
      make_ranking_splits(ds, cfg.dataset, cfg.dataset.ranking_split, cfg.dataset.truncate);
  const Device device = resolve_device(cfg.trainer.device);
  RankingModel model(cfg, ranking_shape(cfg, ds), device,
                     device == Device::kCPU ? DType::kF32 : DType::kBF16);
  Runtime runtime(device, cfg, model.runtime_shape());
  Ctx& ctx = runtime.ctx();
  model.plan(0);
  const CheckpointTensors tensors{
      &model.dense(), model.tables(), device, {}, nullptr, {}, nullptr, {}, {}};
  load_checkpoint(tensors, ckpt, false);
  check_finite_weights(tensors, ckpt);
  model.dense().refresh_compute_copy(ctx);
  const NamedValues v =
      evaluate_ranking(ctx, model, ds, splits.eval, cfg.trainer.eval_batch_size,
                       cfg.trainer.max_eval_iters, nullptr, nullptr,
                       ranking_extra_metrics(cfg.ranking.eval_metrics));  // as training reports
  std::cout << "checkpoint " << ckpt << " (" << splits.eval.samples.size() << " eval samples):\n";
  return {{"eval", v}};
}

// A retrieval run's checkpoint on its test split (and validation split when it has one).
std::vector<EvalRow> eval_retrieval(const Config& cfg, const SequenceDataset& ds,
                                    const std::string& ckpt) {
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  const Device device = resolve_device(cfg.trainer.device);
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = cfg.trainer.eval_batch_size;
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = 1;
  HstuModel model(cfg, shape, device, device == Device::kCPU ? DType::kF32 : DType::kBF16);
  model.plan(0);
  Runtime runtime(device, cfg, shape);
  Ctx& ctx = runtime.ctx();
  // With raw ids a dynamic table's evaluation ranks the items whose keys it holds, as training's
  // evaluations did (train/retrieval_task.cpp); empty = the whole catalogue.
  std::vector<int32_t> present;
  if (is_dynamic_table(cfg, "item")) {  // the table's rows, materialised as the model's table
    const std::unique_ptr<DynamicItemTable> items =
        make_dynamic_item_table(cfg, ds, device, item_window_rows(cfg, ds.num_items));
    load_checkpoint({&model.dense(), {}, device, {}, nullptr, {&items->table()}, &ctx, {}, {}},
                    ckpt, false);
    items->materialize(ctx, model.items());
    if (items->evaluates_present_keys()) present = items->present_ids(ctx);
  } else {
    load_checkpoint(model, ckpt, false);
  }
  check_finite_weights(checkpoint_tensors(model), ckpt);
  model.dense().refresh_compute_copy(ctx);
  std::vector<EvalRow> rows;
  if (!splits.validation.samples.empty())
    rows.push_back(
        {"val", RetrievalEvaluator(ds, splits.validation, cfg.trainer.eval_batch_size, 0, model)
                    .run(ctx, model, present.empty() ? nullptr : &present)
                    .values()});
  rows.push_back({"test", RetrievalEvaluator(ds, splits.test, cfg.trainer.eval_batch_size, 0, model)
                              .run(ctx, model, present.empty() ? nullptr : &present)
                              .values()});
  std::cout << "checkpoint " << ckpt << ":\n";
  return rows;
}

struct EvalArgs {
  std::string run_dir;
  std::string checkpoint;  // "" = <run_dir>/checkpoints
  std::string json;        // "" = no JSON file
  ConfigArgs config;       // --set and the field flags (the config is the run's config.gin)
};

int run_eval(const EvalArgs& a) {
  std::vector<std::string> warnings;
  const Config cfg = load_config(a.run_dir + "/config.gin", overrides(a.config), &warnings);
  HSTU_CHECK(cfg.task != "ranking" || (cfg.dynamic.tables.empty() && !cfg.dataset.raw_ids),
             "hstu eval: ranking with dynamic tables or raw ids is not supported (the ranking "
             "task trains dense tables only)");
  const SequenceDataset ds = open_dataset(cfg);
  const std::string ckpt = a.checkpoint.empty() ? a.run_dir + "/checkpoints" : a.checkpoint;
  const std::vector<EvalRow> rows =
      cfg.task == "ranking" ? eval_ranking(cfg, ds, ckpt) : eval_retrieval(cfg, ds, ckpt);
  print_eval_table(std::cout, rows);
  if (!a.json.empty()) {
    Json out = Json::object();
    for (const EvalRow& row : rows) out[row.split] = metrics_to_json(row.values);
    atomic_write_file(a.json, json::dump(out, 2) + "\n");
  }
  return 0;
}

}  // namespace

void add_eval(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "eval", "evaluate a run's checkpoint on its test split (ranking runs: the eval split)");
  auto a = std::make_shared<EvalArgs>();
  app->add_option("run_dir", a->run_dir, "the run directory (its config.gin is the config)")
      ->type_name("DIR")
      ->required();
  app->add_option("--checkpoint", a->checkpoint,
                  "a checkpoints folder (its `latest` save) or one step folder (default: "
                  "RUN_DIR/checkpoints)")
      ->type_name("DIR");
  app->add_option("--json", a->json, "also write the metrics, unrounded, to FILE as JSON")
      ->type_name("FILE");
  add_set(*app, a->config);
  add_runtime_flags(*app, a->config);
  commands.push_back({app, [a] { return run_eval(*a); }});
}

}  // namespace hstu::cli
