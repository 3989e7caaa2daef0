// test_eval_present_keys.cpp — full-catalogue evaluation with a raw-id dynamic item table ranks
// the targets against the items whose keys the table holds (issue 18 item 5,
// DynamicItemTable::present_ids + RetrievalEvaluator::run's candidates):
//  - after a few training steps with a table of half the catalogue, the evaluator's metrics
//    equal a brute-force rank over the present keys: retrieval_rank over the whole normalised
//    catalogue with every absent id added to each sample's filtered history (so only present
//    items can rank above the target; the target keeps its own catalogue row);
//  - with every key present, the candidate ranking equals today's full-catalogue ranking bit
//    for bit;
//  - a dense-id dynamic table does not rank a subset;
//  - a whole raw-id run logs how many items its evaluation ranked (metrics.jsonl
//    "eval_catalogue", in the train lines after an evaluation and the closing "item_table").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/dynamic_rig.h"
#include "common/test_util.h"
#include "common/tiny_gin.h"
#include "config/load.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "io/json.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "ops/retrieval_rank.h"
#include "train/dynamic_item_table.h"
#include "train/evaluator.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/trainer.h"

namespace hstu {
namespace {

const std::string kGin = test::raw_id_dynamic_gin(300, 4, 8, R"(TrainerArgs.eval_batch_size = 8
RetrievalArgs.eval_rank_cap = 250
)");

// A trained raw-id retrieval model whose item table is a dynamic table, with the catalogue
// materialised as the model's item table (as RetrievalTask::evaluate does).
struct Fixture : test::DynamicRig {
  EmbeddingTable catalogue;

  Fixture(const std::string& capacity_ratio, bool raw_ids, int steps)
      : DynamicRig(
            load_config_text(kGin, "<eval present keys>",
                             {"DynamicTableArgs.capacity_ratio=" + capacity_ratio,
                              std::string("DatasetArgs.raw_ids=") + (raw_ids ? "True" : "False")},
                             nullptr),
            3) {
    for (const double loss : train(steps, 1e-2)) EXPECT_TRUE(std::isfinite(loss));
    catalogue.allocate("catalogue", ds.num_items, cfg.network.hidden_size, Device::kCPU, "sgd");
    items->materialize(ctx(), catalogue);
    model->set_item_table(&catalogue);
  }
};

// The brute-force metrics over `split`: each sample's query (the encoder's output at its last
// history position, as the evaluator takes it) ranked by retrieval_rank over the whole
// normalised catalogue with the absent ids filtered like history items.
RetrievalMetrics brute_force(Fixture& f, const Split& split, const std::vector<int32_t>& present) {
  const int64_t v = f.ds.num_items, d = f.cfg.network.hidden_size;
  const int32_t cap = static_cast<int32_t>(f.cfg.retrieval.eval_rank_cap);
  std::vector<char> is_present(static_cast<size_t>(v), 0);
  for (int32_t id : present) is_present[static_cast<size_t>(id)] = 1;
  std::vector<int32_t> absent;
  for (int32_t id = 1; id < v; ++id)
    if (!is_present[static_cast<size_t>(id)]) absent.push_back(id);
  Ctx& ctx = f.ctx();
  const Tensor items = f.model->normalized_items(ctx);  // f32 [V, D]
  Batcher batcher(f.ds, split, f.cfg.trainer.eval_batch_size, false, 0);
  RetrievalMetrics m;
  SequenceBatch b;
  for (int64_t i = 0; i < batcher.num_batches(); ++i) {
    batcher.get(0, i, b);
    BatchTensors& bt = f.model->batch_tensors();
    upload_batch(b, f.model->capacity(), bt);
    const Tensor out = f.model->encode(ctx, bt);  // f32 [T, D], normalised
    const int32_t n = b.batch_size;
    std::vector<float> queries(static_cast<size_t>(n * d));
    const float* o = static_cast<const float*>(out.data);
    for (int32_t s = 0; s < n; ++s) {
      const int64_t last = b.offsets[static_cast<size_t>(s) + 1] - 1;
      std::copy(o + last * out.row_stride, o + last * out.row_stride + d, queries.begin() + s * d);
    }
    std::vector<int32_t> offsets = {0}, hist;  // history + every absent id
    for (int32_t s = 0; s < n; ++s) {
      hist.insert(hist.end(), b.item_ids.begin() + b.offsets[static_cast<size_t>(s)],
                  b.item_ids.begin() + b.offsets[static_cast<size_t>(s) + 1]);
      hist.insert(hist.end(), absent.begin(), absent.end());
      offsets.push_back(static_cast<int32_t>(hist.size()));
    }
    std::vector<int32_t> targets(b.eval_targets.begin(), b.eval_targets.begin() + n), ranks(n);
    retrieval_rank(
        ctx, Tensor(queries.data(), DType::kF32, Device::kCPU, {n, d}), items,
        Tensor(targets.data(), DType::kI32, Device::kCPU, {n}),
        Tensor(offsets.data(), DType::kI32, Device::kCPU, {n + 1}),
        Tensor(hist.data(), DType::kI32, Device::kCPU, {static_cast<int64_t>(hist.size())}), cap,
        Tensor(ranks.data(), DType::kI32, Device::kCPU, {n}));
    for (int32_t r : ranks) m.add(r == cap + 2 ? cap + 1 : r);
  }
  return m;
}

TEST(EvalPresentKeys, RanksOverTheKeysTheTableHolds) {
  Fixture f("0.5", /*raw_ids=*/true, 6);  // a table of half the catalogue, LRU eviction
  ASSERT_TRUE(f.items->evaluates_present_keys());
  const std::vector<int32_t> present = f.items->present_ids(f.ctx());
  ASSERT_GT(present.size(), 0u);
  ASSERT_LT(present.size(), static_cast<size_t>(f.ds.num_items - 1));  // some keys absent
  EXPECT_TRUE(std::is_sorted(present.begin(), present.end()));
  // The same ids the negatives are drawn from.
  const std::span<const int32_t> pool = f.items->negative_pool(f.ctx());
  EXPECT_EQ(present, std::vector<int32_t>(pool.begin(), pool.end()));

  RetrievalEvaluator eval(f.ds, f.splits.test, f.cfg.trainer.eval_batch_size, 0, *f.model);
  const NamedValues got = eval.run(f.ctx(), *f.model, &present).values();
  const NamedValues want = brute_force(f, f.splits.test, present).values();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].second, want[k].second) << got[k].first;
  // Ranking fewer items changes the result (the test can tell the two apart).
  const NamedValues full = eval.run(f.ctx(), *f.model).values();
  bool differs = false;
  for (size_t k = 0; k < got.size(); ++k) differs |= got[k].second != full[k].second;
  EXPECT_TRUE(differs);
  // ... and the full-catalogue run is the brute force with nothing absent.
  std::vector<int32_t> all(static_cast<size_t>(f.ds.num_items - 1));
  std::iota(all.begin(), all.end(), 1);
  const NamedValues full_bf = brute_force(f, f.splits.test, all).values();
  for (size_t k = 0; k < full.size(); ++k) EXPECT_EQ(full[k].second, full_bf[k].second);
}

TEST(EvalPresentKeys, EveryKeyPresentEqualsTheFullCatalogueBitForBit) {
  Fixture f("4.0", /*raw_ids=*/true, 2);
  // Insert every catalogue key with its materialised row: the table then holds them all.
  const int64_t v = f.ds.num_items, d = f.cfg.network.hidden_size;
  std::vector<int64_t> keys;
  for (int64_t i = 1; i < v; ++i)
    keys.push_back(f.ds.catalogue_keys[static_cast<size_t>(i - 1)] + 1);
  const float* w = static_cast<const float*>(f.catalogue.weight.data);
  std::vector<float> rows(w + d, w + v * d);
  f.items->table().import_rows(f.ctx(), keys, rows, d);
  const std::vector<int32_t> present = f.items->present_ids(f.ctx());
  ASSERT_EQ(present.size(), static_cast<size_t>(v - 1));
  f.items->materialize(f.ctx(), f.catalogue);

  for (const Split* split : {&f.splits.validation, &f.splits.test}) {
    if (split->samples.empty()) continue;
    RetrievalEvaluator eval(f.ds, *split, f.cfg.trainer.eval_batch_size, 0, *f.model);
    const NamedValues full = eval.run(f.ctx(), *f.model).values();
    const NamedValues subset = eval.run(f.ctx(), *f.model, &present).values();
    ASSERT_EQ(full.size(), subset.size());
    for (size_t k = 0; k < full.size(); ++k)
      EXPECT_EQ(full[k].second, subset[k].second) << full[k].first;  // bitwise (doubles)
    const std::vector<int32_t> none;  // empty candidates: the whole catalogue
    const NamedValues again = eval.run(f.ctx(), *f.model, &none).values();
    for (size_t k = 0; k < full.size(); ++k) EXPECT_EQ(full[k].second, again[k].second);
  }
}

TEST(EvalPresentKeys, DenseIdsRankTheWholeCatalogue) {
  Fixture f("4.0", /*raw_ids=*/false, 1);
  EXPECT_FALSE(f.items->evaluates_present_keys());
  EXPECT_THROW(f.items->present_ids(f.ctx()), Error);
}

TEST(EvalPresentKeys, RejectsCandidatesThatAreNotAscendingIds) {
  Fixture f("4.0", /*raw_ids=*/true, 1);
  RetrievalEvaluator eval(f.ds, f.splits.test, f.cfg.trainer.eval_batch_size, 1, *f.model);
  const std::vector<int32_t> bad = {5, 3}, zero = {0, 4},
                             out_of_range = {static_cast<int32_t>(f.ds.num_items)};
  EXPECT_THROW(eval.run(f.ctx(), *f.model, &bad), Error);
  EXPECT_THROW(eval.run(f.ctx(), *f.model, &zero), Error);
  EXPECT_THROW(eval.run(f.ctx(), *f.model, &out_of_range), Error);
}

TEST(EvalPresentKeys, ARunLogsTheItemsItRanked) {
  test::TempDir dir;
  const Config cfg =
      load_config_text(kGin, "<eval present keys run>",
                       {"DynamicTableArgs.capacity_ratio=0.5", "TrainerArgs.max_train_iters=6",
                        "TrainerArgs.eval_interval=3", "TrainerArgs.log_interval=1",
                        "TrainerArgs.run_dir=\"" + dir.file("run") + "\""},
                       nullptr);
  TrainOptions opts;
  opts.quiet = true;
  train(cfg, opts);
  const int64_t catalogue = open_dataset(cfg).num_items - 1;
  std::istringstream lines(test::read_file(cfg.trainer.run_dir + "/metrics.jsonl"));
  int64_t train_lines = 0, last_train = -1, closing = -1;
  for (std::string line; std::getline(lines, line);) {
    const Json r = json::parse(line, "metrics.jsonl");
    const std::string event = r.value("event", "");
    if (event == "train" && r.contains("eval_catalogue")) {
      ++train_lines;
      last_train = r["eval_catalogue"].get<int64_t>();
    }
    if (event == "item_table") closing = json::int_at(r, "eval_catalogue");
  }
  EXPECT_GT(train_lines, 0);  // the train lines after the first evaluation
  EXPECT_GT(closing, 0);
  EXPECT_LT(closing, catalogue);  // a table of half the catalogue holds fewer keys
  EXPECT_LE(last_train, catalogue);
}

}  // namespace
}  // namespace hstu
