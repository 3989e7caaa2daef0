// retrieval_task.cpp — the retrieval task of the training loop (task.h): leave-one-out splits of
// user sequences, the HSTU retrieval model with sampled softmax, evaluation with the paper's
// full-catalogue protocol on the validation and test splits, and the item-popularity baseline
// ranked with the same protocol.
#include <cstdio>
#include <memory>

#include "data/popularity.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "model/flops.h"
#include "model/model.h"
#include "train/evaluator.h"
#include "train/runtime.h"
#include "train/task.h"

namespace hstu {
namespace {

ModelShape retrieval_shape(const Config& cfg, const SequenceDataset& ds) {
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = std::max(cfg.trainer.train_batch_size, cfg.trainer.eval_batch_size);
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = cfg.retrieval.num_negatives;
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

class RetrievalTask final : public Task {
 public:
  RetrievalTask(const Config& cfg, std::ostream* out)
      : cfg_(cfg),
        ds_(open_dataset(cfg, false, &report_)),
        splits_(make_splits(ds_, cfg.dataset.split, cfg.dataset.max_history_seqlen)),
        device_(resolve_device(cfg.trainer.device)),
        shape_(retrieval_shape(cfg, ds_)),
        runtime_(device_, cfg, shape_),
        model_(cfg, shape_, device_, device_ == Device::kCPU ? DType::kF32 : DType::kBF16),
        batcher_(ds_, splits_.train, cfg.trainer.train_batch_size, cfg.dataset.shuffle,
                 static_cast<uint64_t>(cfg.trainer.seed)),
        stepper_(cfg, ds_.num_items) {
    const TrainerArgs& ta = cfg.trainer;
    if (out) *out << data_line();
    HSTU_CHECK(!splits_.train.samples.empty(), "dataset '", ds_.name, "' has no training samples");
    model_.plan(static_cast<uint64_t>(ta.seed));
    if (out) *out << model_line() << model_.describe_plan() << std::flush;
    if (!splits_.validation.samples.empty())
      val_eval_ = std::make_unique<RetrievalEvaluator>(ds_, splits_.validation, ta.eval_batch_size,
                                                       ta.max_eval_iters, model_);
    test_eval_ = std::make_unique<RetrievalEvaluator>(ds_, splits_.test, ta.eval_batch_size,
                                                      ta.max_eval_iters, model_);
    baseline_ = popularity_baseline(cfg, ds_, splits_);
  }

  const char* name() const override { return "retrieval"; }
  Ctx& ctx() override { return runtime_.ctx(); }
  Batcher& batcher() override { return batcher_; }
  CheckpointTensors checkpoint_tensors() override { return hstu::checkpoint_tensors(model_); }

  int64_t step(const SequenceBatch& batch, int64_t step, double lr) override {
    stepper_.run(ctx(), model_, batch, step, lr);
    return batch.num_tokens();
  }
  std::vector<StepLoss> drain(bool wait_all) override { return stepper_.drain(wait_all); }
  double step_flops(const SequenceBatch& batch) const override {
    return retrieval_step_flops(cfg_, batch);
  }
  const StepGraph& graph() const override { return stepper_.graph(); }

  void evaluate(EvalRecord& rec) override {
    const std::vector<std::string>& selected = cfg_.retrieval.eval_metrics;
    if (val_eval_) rec.validation = val_eval_->run(ctx(), model_).values(selected);
    rec.test = test_eval_->run(ctx(), model_).values(selected);
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
  DatasetReport report_;
  const SequenceDataset ds_;
  const DataSplits splits_;
  const Device device_;
  const ModelShape shape_;
  Runtime runtime_;
  HstuModel model_;
  Batcher batcher_;
  TrainStep stepper_;
  std::unique_ptr<RetrievalEvaluator> val_eval_, test_eval_;
  NamedValues baseline_;
};

}  // namespace

std::unique_ptr<Task> make_retrieval_task(const Config& cfg, std::ostream* out) {
  HSTU_CHECK(cfg.retrieval.num_negatives > 0,
             "RetrievalArgs.num_negatives = ", cfg.retrieval.num_negatives,
             " (one negative per query of the batch) is not supported yet; "
             "set a positive count, e.g. 128");
  return std::make_unique<RetrievalTask>(cfg, out);
}

}  // namespace hstu
