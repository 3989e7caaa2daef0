// ranking_task.cpp — the generative ranking task of the training loop (task.h): ranking samples
// (make_ranking_splits), the RankingModel (per-feature embeddings, interleaved item/action
// tokens, candidate rows, MLP head with multi-task BCE or multi-class CE), evaluation on the eval
// split (ranking_eval.h: per-task AUC, accuracy and log-loss / CE), and a logistic baseline
// scored on the same candidates by the same metric code (ranking_baseline.h). On synthetic data
// the closing report sets each task's AUC beside the planted signal's oracle AUC.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "config/dynamic_table.h"
#include "core/checked.h"
#include "data/benchmark_dataset.h"
#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/synthetic_oracle.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "model/flops.h"
#include "model/memory_plan.h"
#include "model/ranking_model.h"
#include "train/eval_report.h"
#include "train/item_window.h"
#include "train/memory_check.h"
#include "train/ranking_baseline.h"
#include "train/ranking_eval.h"
#include "train/resume_check.h"
#include "train/runtime.h"
#include "train/task.h"

namespace hstu {
namespace {

// A ranking run's dataset and samples: a real or synthetic dataset with its ranking splits, or
// recsys-examples' generated benchmark data (DatasetArgs.dataset_name = "benchmark") with its
// generated train and eval samples and their length histogram.
BenchmarkData ranking_data(const Config& cfg, DatasetReport* report) {
  if (cfg.dataset.dataset_name == "benchmark") {
    const auto t0 = std::chrono::steady_clock::now();
    BenchmarkData d = benchmark_data(cfg);
    *report = DatasetReport{};
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return d;
  }
  BenchmarkData d;
  d.ds = open_dataset(cfg, false, report);
  d.splits =
      make_ranking_splits(d.ds, cfg.dataset, cfg.dataset.ranking_split, cfg.dataset.truncate);
  return d;
}

// The ranking model's shape; on W > 1 data-parallel ranks with "item" in
// TrainerArgs.model_parallel_tables, the item table becomes a per-step window of a row-sharded
// table: the most item ids of one batch (history + candidates) + the padding id 0.
RankingShape ranking_task_shape(const Config& cfg, const SequenceDataset& ds,
                                const dist::Comm& comm) {
  RankingShape shape = ranking_shape(cfg, ds);
  const auto& t = cfg.trainer.model_parallel_tables;
  if (data_parallel_job(comm) && std::find(t.begin(), t.end(), "item") != t.end())
    shape.item_window_rows = std::min<int64_t>(
        ds.num_items, checked_add(shape.max_events, 1, "ranking item window rows"));
  return shape;
}

// Ranking trains its item table dense, one row per catalogue id (raw-id batches carry catalogue
// indices, data/batch.h). A dynamic item table (DynamicTableArgs) that can hold the whole
// catalogue and admits every key trains exactly those rows (tests/train: the dynamic step equals
// the dense one), so it is trained dense with a note; one that would evict or refuse keys
// would change the results and is refused.
void check_dynamic_items(const Config& cfg, const SequenceDataset& ds) {
  if (!is_dynamic_table(cfg, "item")) return;
  const int64_t keys = ds.num_items - 1;
  const DynamicTableConfig t = dynamic_table_config(cfg, "item", keys);
  HSTU_CHECK(t.max_capacity_rows * t.max_load_factor >= static_cast<double>(keys) &&
                 t.admit_threshold <= 1,
             "ranking with DynamicTableArgs.tables = [\"item\"]: the ranking task trains its item "
             "table dense; a dynamic table of ",
             t.max_capacity_rows, " slots (load factor ", t.max_load_factor, ", admit_threshold ",
             t.admit_threshold, ") for ", keys,
             " catalogue keys would evict or refuse keys, which only retrieval implements");
  std::fprintf(stderr,
               "hstu: note: ranking trains the item table dense (%lld rows): the same rows as the "
               "configured dynamic table, which holds the whole catalogue and admits every key\n",
               static_cast<long long>(ds.num_items));
}

class RankingTask final : public Task {
 public:
  RankingTask(const Config& cfg, dist::Comm& comm, std::ostream* out)
      : cfg_(cfg),
        comm_(comm),
        device_(resolve_device(cfg.trainer.device)),
        data_(ranking_data(cfg, &report_)),
        ds_(data_.ds),
        splits_(data_.splits),
        shape_(ranking_task_shape(cfg, ds_, comm)),
        plan_fits_(
            (check_memory_plan(cfg,
                               ranking_memory(cfg, shape_, device_,
                                              device_ == Device::kCPU ? DType::kF32 : DType::kBF16),
                               comm),
             true)),
        model_(cfg, shape_, device_, device_ == Device::kCPU ? DType::kF32 : DType::kBF16),
        runtime_(device_, cfg, model_.runtime_shape()),
        batcher_(ranking_batcher(ds_, splits_.train, cfg.trainer.train_batch_size * comm.size(),
                                 cfg.dataset.shuffle, static_cast<uint64_t>(cfg.trainer.seed))),
        stepper_(cfg),
        dp_(comm, cfg.trainer.enable_balanced_shuffler, [this](int64_t events) {
          return sample_cost(
              cfg_.network,
              ranking_sample_tokens(events, static_cast<int64_t>(ds_.contextual_names.size()),
                                    !ds_.actions.empty()));
        }) {
    const TrainerArgs& ta = cfg.trainer;
    check_dynamic_items(cfg, ds_);
    if (out) {
      *out << data_line();
      if (ds_.name == "benchmark")
        *out << "benchmark data: " << splits_.train.samples.size() << " train samples ("
             << benchmark_layout(cfg).train_batches << " generated batches, cycled), "
             << splits_.eval.samples.size() << " eval samples; item lengths of the train "
             << "samples:\n"
             << data_.histogram;
    }
    HSTU_CHECK(!splits_.train.samples.empty(), "dataset '", ds_.name,
               "' has no ranking training samples");
    model_.plan(static_cast<uint64_t>(ta.seed));
    if (shape_.item_window_rows > 0) {
      items_ = std::make_unique<dist::ShardedTable>(
          comm_, "item_embedding", ds_.num_items, cfg.network.hidden_size,
          cfg.optimizer.sparse_optimizer_str,
          dist::parse_owner(ta.shard_owner, "TrainerArgs.shard_owner"), shape_.item_window_rows);
      // The rows a single process would start from (ranking_model.cpp), each on its owner.
      items_->init_from_full(Init::trunc_normal(0.02), static_cast<uint64_t>(ta.seed));
      window_ = std::make_unique<ShardedItemWindow>(*items_, comm_);
      model_.set_item_table(&window_->window());
    }
    // Only the item table is sharded; the action and contextual tables are small (at most a few
    // thousand rows) and stay replicated, which trains the same model.
    if (data_parallel_job(comm) && comm.is_root())
      for (const std::string& t : ta.model_parallel_tables)
        if (t != "item")
          std::fprintf(stderr,
                       "hstu: warning: ranking keeps the '%s' table replicated on each rank "
                       "(TrainerArgs.model_parallel_tables shards ranking's item table only)\n",
                       t.c_str());
    if (out) {
      *out << model_line() << model_.describe_plan();
      if (items_)
        *out << "  item shards       " << comm_.size() << " ranks, "
             << dist::owner_name(items_->sharding().kind()) << " owner:\n"
             << dist::format_shards(
                    dist::describe_shards(ds_.num_items, cfg.network.hidden_size, comm_.size(),
                                          cfg.optimizer.sparse_optimizer_str,
                                          items_->sharding().kind(), shape_.item_window_rows));
      *out << std::flush;
    }
    const int64_t eval_samples =
        ranking_eval_samples(splits_.eval, ta.eval_batch_size, ta.max_eval_iters);
    baseline_ = ranking_baseline(
        ds_, splits_,
        {model_.binary(), model_.num_outputs(), shape_.movielens_ratings, cfg.ranking.eval_metrics},
        eval_samples);
    if (out) *out << baseline_line() << baseline_.describe() << std::flush;
  }

  const char* name() const override { return "ranking"; }
  Ctx& ctx() override { return runtime_.ctx(); }
  Batcher& batcher() override { return batcher_; }
  std::string data_fingerprint() const override { return dataset_fingerprint(ds_); }
  CheckpointTensors checkpoint_tensors() override {
    if (!items_)
      return {&model_.dense(), model_.tables(), device_, {}, nullptr, {}, nullptr, {}, {}};
    std::vector<EmbeddingTable*> replicated = model_.tables();
    replicated.erase(replicated.begin());  // the item table: its shards instead
    return {&model_.dense(), replicated, device_, {items_.get()}, &comm_, {}, nullptr, {}, {}};
  }

  dist::Comm& comm() override { return comm_; }
  const DataParallel* data_parallel() const override {
    return data_parallel_job(comm_) ? &dp_ : nullptr;
  }

  int64_t step(const SequenceBatch& batch, int64_t step, double lr) override {
    if (!data_parallel_job(comm_)) {
      stepper_.run(ctx(), model_, batch, step, lr);
      return model_.num_tokens();
    }
    const SequenceBatch& mine = dp_.take(batch);
    // Dropout streams: a range no other rank's tokens reach (the ranking layout of the global
    // batch is not built), so ranks never share masks.
    model_.set_token_offset(comm_.rank() * model_.token_capacity());
    StepShare share{&comm_, 0, candidate_count(batch), {}, window_.get()};
    stepper_.run(ctx(), model_, mine, step, lr, share);
    return model_.num_tokens();
  }
  std::vector<StepLoss> drain(bool wait_all) override { return stepper_.drain(wait_all); }
  // The batch the last step uploaded (the loop asks right after the step).
  double step_flops(const SequenceBatch&) const override {
    return ranking_step_flops(cfg_, model_.token_offsets(), model_.num_candidates());
  }
  const StepGraph& graph() const override { return stepper_.graph(); }

  void evaluate(EvalRecord& rec) override {
    const TrainerArgs& ta = cfg_.trainer;
    if (!splits_.eval.samples.empty())
      rec.test =
          evaluate_ranking(ctx(), model_, ds_, splits_.eval, ta.eval_batch_size, ta.max_eval_iters,
                           &comm_, window_.get(), ranking_extra_metrics(cfg_.ranking.eval_metrics));
  }
  const char* test_label() const override { return "eval"; }
  const char* baseline_label() const override { return "baseline"; }
  const NamedValues& baseline() const override { return baseline_.eval; }

  // The metrics.jsonl "baseline" event: its metrics and each logistic fit.
  void log_setup(MetricsLog& log) const override {
    Json r = Json::object();
    r["event"] = "baseline";
    r["test"] = metrics_to_json(baseline_.eval);
    r["train_candidates"] = baseline_.train_candidates;
    r["eval_candidates"] = baseline_.eval_candidates;
    Json fits = Json::array();
    for (const LogisticFit& f : baseline_.fits) {
      Json o = Json::object();
      Json coef = Json::array();
      for (double c : f.coef) coef.push_back(c);
      o["coef"] = coef;  // [rows, intercept + 2 features], row-major
      o["rows"] = f.num_rows;
      o["iterations"] = f.iterations;
      o["converged"] = f.converged;
      fits.push_back(o);
    }
    r["fits"] = fits;
    log.write(r);
  }

  // The final eval beside the baseline; on synthetic data, the planted signal's oracle AUC per
  // task beside the model's (printed and logged as a "synthetic_oracle" event).
  void finish(const TrainSummary& summary, MetricsLog& log, std::ostream* out) const override {
    if (splits_.eval.samples.empty()) return;
    if (out) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "final eval vs the logistic baseline: MeanAUC %.4f vs %.4f (%lld eval "
                    "candidates)\n",
                    metric(summary.final_test, "MeanAUC"), metric(baseline_.eval, "MeanAUC"),
                    static_cast<long long>(baseline_.eval_candidates));
      *out << line;
    }
    if (ds_.name != "synthetic" || cfg_.synthetic.num_tasks <= 0) return;
    const TrainerArgs& ta = cfg_.trainer;
    const SyntheticOracle oracle = synthetic_oracle(
        cfg_.synthetic, ds_, splits_.eval,
        ta.max_eval_iters > 0 ? ta.max_eval_iters * ta.eval_batch_size : -1, roc_auc);
    if (out) *out << synthetic_oracle_report(oracle, summary.final_test) << std::flush;
    Json o = Json::object(), auc = Json::array();
    for (double a : oracle.auc) auc.push_back(std::isfinite(a) ? Json(a) : Json());
    o["event"] = "synthetic_oracle";
    o["oracle_auc"] = auc;
    log.write(o);
  }

 private:
  std::string data_line() const {
    char line[512];
    std::snprintf(line, sizeof line,
                  "data: %s — %lld users, %lld items, %lld events, %zu contextual features "
                  "(%.1fs); ranking split '%s': train %zu, eval %zu samples\n",
                  ds_.name.c_str(), static_cast<long long>(ds_.num_users()),
                  static_cast<long long>(ds_.num_items - 1),
                  static_cast<long long>(ds_.num_events()), ds_.contextual_names.size(),
                  report_.seconds,
                  ds_.name == "benchmark" ? "generated" : cfg_.dataset.ranking_split.c_str(),
                  splits_.train.samples.size(), splits_.eval.samples.size());
    return line;
  }

  std::string model_line() const {
    const NetworkArgs& n = cfg_.network;
    char line[256];
    std::snprintf(line, sizeof line,
                  "model: HSTU ranking %lld layers, D=%lld, %lld heads x %lld, %s head with %lld "
                  "outputs, %.2fM parameters\n",
                  static_cast<long long>(n.num_layers), static_cast<long long>(n.hidden_size),
                  static_cast<long long>(n.num_attention_heads),
                  static_cast<long long>(n.kv_channels), model_.binary() ? "BCE" : "cross-entropy",
                  static_cast<long long>(model_.num_outputs()), model_.num_params() / 1e6);
    return line;
  }

  std::string baseline_line() const {
    char line[256];
    std::snprintf(line, sizeof line,
                  "baseline: logistic regression on log(1 + train-split item count) and the "
                  "user's history mean of the %s, fitted on %lld train candidates (%.1fs):\n",
                  model_.binary() ? "task bit" : "label class",
                  static_cast<long long>(baseline_.train_candidates), baseline_.seconds);
    return line;
  }

  const Config& cfg_;
  dist::Comm& comm_;
  const Device device_;
  DatasetReport report_;
  const BenchmarkData data_;  // the dataset and samples; ds_ and splits_ name them
  const SequenceDataset& ds_;
  const RankingSplits& splits_;
  const RankingShape shape_;
  // The memory plan checked against the host's or the GPU's memory before anything is
  // allocated (memory_check.h); always true.
  const bool plan_fits_;
  RankingModel model_;
  Runtime runtime_;
  std::unique_ptr<dist::ShardedTable> items_;  // the item table, when sharded over the ranks
  std::unique_ptr<ItemWindow> window_;         // the step's and evaluation's way to items_
  Batcher batcher_;
  RankingTrainStep stepper_;
  DataParallel dp_;
  RankingBaseline baseline_;
};

}  // namespace

std::unique_ptr<Task> make_ranking_task(const Config& cfg, dist::Comm& comm, std::ostream* out) {
  return std::make_unique<RankingTask>(cfg, comm, out);
}

}  // namespace hstu
