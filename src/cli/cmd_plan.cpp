// cmd_plan.cpp — `hstu plan`: the per-rank memory plan of a config on W data-parallel ranks (the
// dense parameters, replicated tables, each rank's shard and window of the model-parallel tables,
// the activations of its batch, the totals) and the traffic of one step, without a GPU and
// without allocating the model: model/memory_plan.h measures the models' allocation sequence,
// dist/rank_plan.h places the tables. The dataset is opened as `hstu train` opens it (synthetic
// data generated, raw data preprocessed into or loaded from its cache) for its table sizes.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/checked.h"
#include "data/benchmark_dataset.h"
#include "data/preprocess.h"
#include "dist/rank_plan.h"
#include "model/memory_plan.h"
#include "model/ranking_model.h"
#include "train/runtime.h"

namespace hstu::cli {
namespace {

struct PlanArgs {
  ConfigArgs config;
  std::vector<int64_t> worlds{1};
};

int run_plan(const PlanArgs& a) {
  const Config cfg = resolve_config(a.config, NoFile::kEmbeddedDefault, nullptr);
  // The trainer's device and activation dtype; naming cuda needs no GPU here.
  const std::string& dev = cfg.trainer.device;
  const Device device = dev == "cuda"  ? Device::kCUDA
                        : dev == "cpu" ? Device::kCPU
                                       : resolve_device(dev);
  const DType act = device == Device::kCPU ? DType::kF32 : DType::kBF16;
  // recsys-examples' benchmark data (ranking only) is generated, not read: its dataset is the
  // generated one, as the trainer sees it.
  DatasetReport report;
  const SequenceDataset ds = cfg.dataset.dataset_name == "benchmark"
                                 ? benchmark_data(cfg).ds
                                 : open_dataset(cfg, false, &report);
  const bool ranking = cfg.task == "ranking";
  const ModelMemory model = ranking ? ranking_memory(cfg, ranking_shape(cfg, ds), device, act)
                                    : retrieval_memory(cfg, ds.num_items, device, act);
  const dist::OwnerKind owner =
      dist::parse_owner(cfg.trainer.shard_owner, "TrainerArgs.shard_owner");
  std::cout << "hstu plan: "
            << (a.config.files.empty() ? "embedded default config" : files_label(a.config)) << " — "
            << model.task << " on " << ds.name << " (" << ds.num_items - 1 << " items";
  if (ranking) std::cout << ", " << ds.num_actions << " actions";
  std::cout << "), " << model.layers << " layers, D=" << model.dim << ", batch "
            << cfg.trainer.train_batch_size << " per rank\n";
  for (const int64_t w : a.worlds) {
    const dist::RankPlan plan = dist::plan_ranks(
        model, static_cast<int>(w), cfg.trainer.model_parallel_tables, owner,
        cfg.optimizer.sparse_optimizer_str,
        checked_mul(cfg.trainer.table_budget_mb, int64_t{1} << 20, "TrainerArgs.table_budget_mb"));
    std::cout << "\nworld size " << w << " (global batch " << cfg.trainer.train_batch_size * w
              << "):\n"
              << dist::describe_rank_plan(plan);
  }
  return 0;
}

}  // namespace

void add_plan(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "plan",
      "the per-rank memory plan of a config on W ranks (dense, replicated and sharded tables, "
      "windows, activations, totals) and the traffic of one step; no GPU needed");
  auto a = std::make_shared<PlanArgs>();
  add_config_file(*app, a->config, "default: the embedded configs/default.gin, synthetic data");
  add_set(*app, a->config);
  add_field_flag(*app, a->config, "--device", "TrainerArgs.device", "")
      ->description(
          "the device planned for: cpu (f32 activations) or cuda (bf16 activations; no GPU "
          "needed); auto: this machine's");
  app->add_option("--world-size", a->worlds,
                  "data-parallel ranks; several give one plan each (e.g. 2,4,8)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(int_in(1, 1 << 20))
      ->type_name("W[,W...]");
  commands.push_back({app, [a] { return run_plan(*a); }});
}

}  // namespace hstu::cli
