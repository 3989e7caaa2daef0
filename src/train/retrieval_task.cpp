// retrieval_task.cpp — the retrieval task of the training loop (task.h): leave-one-out splits of
// user sequences, the HSTU retrieval model with sampled softmax, evaluation with the paper's
// full-catalogue protocol on the validation and test splits (with a raw-id dynamic item table:
// over the items whose keys the table holds), and the item-popularity baseline ranked with the
// same protocol.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "config/dynamic_table.h"
#include "core/checked.h"
#include "data/popularity.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "model/flops.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/dynamic_item_table.h"
#include "train/evaluator.h"
#include "train/item_window.h"
#include "train/memory_check.h"
#include "train/resume_check.h"
#include "train/runtime.h"
#include "train/task.h"

namespace hstu {
namespace {

// Whether the item table is sharded row-wise over the ranks (TrainerArgs.model_parallel_tables).
bool shard_items(const Config& cfg, const dist::Comm& comm) {
  const auto& t = cfg.trainer.model_parallel_tables;
  return data_parallel_job(comm) && std::find(t.begin(), t.end(), "item") != t.end();
}

ModelShape retrieval_shape(const Config& cfg, const SequenceDataset& ds, const dist::Comm& comm) {
  ModelShape shape = retrieval_model_shape(cfg, ds.num_items);  // the planner's shape
  // num_negatives = -1 draws one negative per query of the global batch: up to W x max_tokens.
  if (cfg.retrieval.num_negatives == -1 && data_parallel_job(comm))
    shape.num_negatives = checked_mul(shape.max_tokens, comm.size(), "negatives per query");
  // In-batch negatives of a data-parallel rank come from the global batch's targets.
  if (data_parallel_job(comm))
    shape.max_pool_targets = checked_mul(shape.max_tokens, comm.size(), "in-batch pool targets");
  if (is_dynamic_table(cfg, "item")) {
    // The step's distinct keys pass through a window; evaluation reads the catalogue
    // materialised into a dense table (dynamic_item_table.h). On several ranks the table is
    // sharded by key and each owner sums up to W windows' gradient rows (dynamic_shard.h).
    shape.window_rows = item_window_rows(cfg, ds.num_items);
    shape.full_eval_buffers = true;
    if (data_parallel_job(comm))
      shape.max_scatter_rows = checked_mul(shape.window_rows, comm.size(), "window rows");
    return shape;
  }
  // A sharded table's window holds a step's distinct ids (memory_plan.h).
  if (shard_items(cfg, comm)) shape.window_rows = item_window_rows(cfg, ds.num_items);
  if (shape.window_rows > 0) {
    shape.max_eval_queries = checked_mul(shape.max_batch, comm.size(), "eval queries");
    shape.max_scatter_rows = checked_mul(shape.window_rows, comm.size(), "window rows");
  }
  return shape;
}

// The popularity baseline on the test split, ranked with the evaluation's protocol.
NamedValues popularity_baseline(const Config& cfg, const SequenceDataset& ds,
                                const DataSplits& splits) {
  const auto counts = popularity_counts(ds, splits.train);
  const auto ranks = popularity_ranks(ds, splits.test, counts, cfg.retrieval.eval_rank_cap);
  RetrievalMetrics m;
  for (int32_t r : ranks) m.add(r);
  return m.values(cfg.retrieval.eval_metrics);
}

Json counters_json(const embed::DynamicTableCounters& c) {
  Json j = {{"size", c.size},           {"capacity", c.capacity},     {"inserts", c.inserts},
            {"evictions", c.evictions}, {"rejections", c.rejections}, {"grows", c.grows}};
  if (c.cache_misses > 0 || c.cache_evictions > 0) {
    j["cache_misses"] = c.cache_misses;
    j["cache_evictions"] = c.cache_evictions;
  }
  return j;
}

class RetrievalTask final : public Task {
 public:
  RetrievalTask(const Config& cfg, dist::Comm& comm, std::ostream* out)
      : cfg_(cfg),
        comm_(comm),
        ds_(open_dataset(cfg, false, &report_)),
        splits_(make_splits(ds_, cfg.dataset.split, cfg.dataset.max_history_seqlen)),
        device_(resolve_device(cfg.trainer.device)),
        shape_(retrieval_shape(cfg, ds_, comm)),
        plan_fits_((check_memory_plan(
                        cfg,
                        retrieval_memory(cfg, ds_.num_items, device_,
                                         device_ == Device::kCPU ? DType::kF32 : DType::kBF16),
                        comm),
                    true)),
        runtime_(device_, cfg, shape_),
        model_(cfg, shape_, device_, device_ == Device::kCPU ? DType::kF32 : DType::kBF16),
        batcher_(ds_, splits_.train, cfg.trainer.train_batch_size * comm.size(),
                 cfg.dataset.shuffle, static_cast<uint64_t>(cfg.trainer.seed)),
        stepper_(cfg, ds_.num_items),
        dp_(comm, cfg.trainer.enable_balanced_shuffler,
            [&cfg](int64_t tokens) { return sample_cost(cfg.network, tokens); }) {
    const TrainerArgs& ta = cfg.trainer;
    if (out) *out << data_line();
    HSTU_CHECK(!splits_.train.samples.empty(), "dataset '", ds_.name, "' has no training samples");
    model_.plan(static_cast<uint64_t>(ta.seed));
    if (is_dynamic_table(cfg, "item")) {
      // Sharded by key over the ranks of a data-parallel job (dynamic_shard.h).
      auto table = make_dynamic_item_table(cfg, ds_, device_, shape_.window_rows,
                                           data_parallel_job(comm_) ? &comm_ : nullptr);
      dynamic_ = table.get();
      window_ = std::move(table);
      model_.set_item_table(&window_->window());
      catalogue_.allocate("item_embedding", ds_.num_items, cfg.network.hidden_size, device_, "sgd");
    } else if (shape_.window_rows > 0) {
      items_ = std::make_unique<dist::ShardedTable>(
          comm_, "item_embedding", ds_.num_items, cfg.network.hidden_size,
          cfg.optimizer.sparse_optimizer_str,
          dist::parse_owner(ta.shard_owner, "TrainerArgs.shard_owner"), shape_.window_rows);
      // The rows a single process would start from (model.cpp), each on its owner.
      items_->init_from_full(Init::trunc_normal(0.02), static_cast<uint64_t>(ta.seed));
      window_ = std::make_unique<ShardedItemWindow>(*items_, comm_);
      model_.set_item_table(&window_->window());
    }
    if (out) {
      *out << model_line() << model_.describe_plan();
      if (items_)
        *out << "  item shards       " << comm_.size() << " ranks, "
             << dist::owner_name(items_->sharding().kind()) << " owner:\n"
             << dist::format_shards(
                    dist::describe_shards(ds_.num_items, cfg.network.hidden_size, comm_.size(),
                                          cfg.optimizer.sparse_optimizer_str,
                                          items_->sharding().kind(), shape_.window_rows));
      *out << std::flush;
    }
    if (!splits_.validation.samples.empty())
      val_eval_ =
          std::make_unique<RetrievalEvaluator>(ds_, splits_.validation, ta.eval_batch_size,
                                               ta.max_eval_iters, model_, &comm_, items_.get());
    test_eval_ = std::make_unique<RetrievalEvaluator>(
        ds_, splits_.test, ta.eval_batch_size, ta.max_eval_iters, model_, &comm_, items_.get());
    baseline_ = popularity_baseline(cfg, ds_, splits_);
  }

  const char* name() const override { return "retrieval"; }
  Ctx& ctx() override { return runtime_.ctx(); }
  Batcher& batcher() override { return batcher_; }
  std::string data_fingerprint() const override { return dataset_fingerprint(ds_); }
  CheckpointTensors checkpoint_tensors() override {
    CheckpointTensors t = hstu::checkpoint_tensors(model_);
    if (items_) t = {&model_.dense(), {}, device_, {items_.get()}, &comm_, {}, nullptr, {}, {}};
    if (dynamic_ && !dynamic_->shard())
      t = {&model_.dense(), {}, device_, {}, nullptr, {&dynamic_->table()}, &ctx(), {}, {}};
    if (dynamic_ && dynamic_->shard()) {  // every rank saves its table; loads reshard
      t = {&model_.dense(), {}, device_, {}, &comm_, {}, &ctx(), {}, {}};
      t.dynamic_sharded = {&dynamic_->table()};
      t.dynamic_owner = dynamic_->shard()->owner();
    }
    return t;
  }

  dist::Comm& comm() override { return comm_; }
  const DataParallel* data_parallel() const override {
    return data_parallel_job(comm_) ? &dp_ : nullptr;
  }

  int64_t step(const SequenceBatch& batch, int64_t step, double lr) override {
    if (!data_parallel_job(comm_)) {
      StepShare share;
      share.items = window_.get();
      stepper_.run(ctx(), model_, batch, step, lr, share);
      return batch.num_tokens();
    }
    const SequenceBatch& mine = dp_.take(batch);
    StepShare share{&comm_, dp_.token_offset(), supervised_tokens(batch), batch.target_ids,
                    window_.get()};
    stepper_.run(ctx(), model_, mine, step, lr, share);
    return mine.num_tokens();
  }
  std::vector<StepLoss> drain(bool wait_all) override { return stepper_.drain(wait_all); }
  // This rank's share of the step (the batch the loop passes is the global one).
  double step_flops(const SequenceBatch& batch) const override {
    return retrieval_step_flops(cfg_, data_parallel_job(comm_) ? dp_.local() : batch);
  }
  const StepGraph& graph() const override { return stepper_.graph(); }

  void evaluate(EvalRecord& rec) override {
    const std::vector<std::string>& selected = cfg_.retrieval.eval_metrics;
    std::vector<int32_t> present;  // raw ids: the items whose keys the table holds
    if (dynamic_) {                // the catalogue's rows, materialised, as the model's item table
      dynamic_->materialize(ctx(), catalogue_);
      model_.set_item_table(&catalogue_);
      // An empty table (nothing trained yet) ranks the whole catalogue, as negatives draw.
      if (dynamic_->evaluates_present_keys()) present = dynamic_->present_ids(ctx());
      eval_catalogue_ = present.empty() ? ds_.num_items - 1 : static_cast<int64_t>(present.size());
    }
    const std::vector<int32_t>* candidates = present.empty() ? nullptr : &present;
    if (val_eval_) rec.validation = val_eval_->run(ctx(), model_, candidates).values(selected);
    rec.test = test_eval_->run(ctx(), model_, candidates).values(selected);
    if (dynamic_) model_.set_item_table(&window_->window());
  }
  // A dynamic item table's counters and, after an evaluation, how many items it ranked.
  Json step_metrics() const override {
    if (!dynamic_) return Json::object();
    Json j = {{"item_table", counters_json(dynamic_->counters())}};
    if (eval_catalogue_ >= 0) j["eval_catalogue"] = eval_catalogue_;
    return j;
  }
  // A dynamic item table's final counters, printed and logged (event "item_table").
  void finish(const TrainSummary&, MetricsLog& log, std::ostream* out) const override {
    if (!dynamic_) return;
    const embed::DynamicTableCounters c = dynamic_->counters();
    if (out) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "item table (dynamic): %lld keys in %lld slots; %lld inserts, %lld evictions, "
                    "%lld rejections, %lld growths%s\n",
                    static_cast<long long>(c.size), static_cast<long long>(c.capacity),
                    static_cast<long long>(c.inserts), static_cast<long long>(c.evictions),
                    static_cast<long long>(c.rejections), static_cast<long long>(c.grows),
                    dynamic_->shard() ? " (summed over the ranks' shards)" : "");
      *out << line;
      if (eval_catalogue_ >= 0)
        *out << "evaluation ranked " << eval_catalogue_ << " of " << ds_.num_items - 1
             << " catalogue items (those the item table holds)\n";
      *out << std::flush;
    }
    Json r = counters_json(c);
    r["event"] = "item_table";
    if (eval_catalogue_ >= 0) r["eval_catalogue"] = eval_catalogue_;
    log.write(r);
  }

  const char* test_label() const override { return "test"; }
  const char* baseline_label() const override { return "popularity"; }
  const NamedValues& baseline() const override { return baseline_; }

 private:
  std::string data_line() const {
    char line[512];
    std::snprintf(
        line, sizeof line,
        "data: %s — %lld users, %lld items, %lld events (%s, %.1fs); train %zu, val %zu, "
        "test %zu samples\n",
        ds_.name.c_str(), static_cast<long long>(ds_.num_users()),
        static_cast<long long>(ds_.num_items - 1), static_cast<long long>(ds_.num_events()),
        report_.dir.empty() ? "generated" : (report_.reused_cache ? "cached" : "preprocessed"),
        report_.seconds, splits_.train.samples.size(), splits_.validation.samples.size(),
        splits_.test.samples.size());
    return line;
  }

  std::string model_line() const {
    const NetworkArgs& n = cfg_.network;
    char line[256];
    std::snprintf(line, sizeof line,
                  "model: HSTU %lld layers, D=%lld, %lld heads x %lld, %.2fM parameters\n",
                  static_cast<long long>(n.num_layers), static_cast<long long>(n.hidden_size),
                  static_cast<long long>(n.num_attention_heads),
                  static_cast<long long>(n.kv_channels), model_.num_params() / 1e6);
    return line;
  }

  const Config& cfg_;
  dist::Comm& comm_;
  DatasetReport report_;
  const SequenceDataset ds_;
  const DataSplits splits_;
  const Device device_;
  const ModelShape shape_;
  // The memory plan checked against the host's or the GPU's memory before anything is
  // allocated (memory_check.h); always true.
  const bool plan_fits_;
  Runtime runtime_;
  HstuModel model_;
  std::unique_ptr<dist::ShardedTable> items_;  // the item table, when sharded over the ranks
  std::unique_ptr<ItemWindow> window_;         // the step's way to items_ (or a dynamic table)
  DynamicItemTable* dynamic_ = nullptr;        // the dynamic item table, if the config has one
  EmbeddingTable catalogue_;                   // its rows materialised for evaluation
  int64_t eval_catalogue_ = -1;  // items the last evaluation ranked (dynamic table; -1: none yet)
  Batcher batcher_;
  TrainStep stepper_;
  DataParallel dp_;
  std::unique_ptr<RetrievalEvaluator> val_eval_, test_eval_;
  NamedValues baseline_;
};

}  // namespace

std::unique_ptr<Task> make_retrieval_task(const Config& cfg, dist::Comm& comm, std::ostream* out) {
  return std::make_unique<RetrievalTask>(cfg, comm, out);
}

}  // namespace hstu
