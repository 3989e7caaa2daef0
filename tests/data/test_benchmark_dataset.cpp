// test_benchmark_dataset.cpp — recsys-examples' benchmark data as the ranking dataset the trainer
// consumes (data/benchmark_dataset.h): samples in generation order (so an unshuffled batcher
// yields the generated batches), ids mapped to table rows (dynamic: order-preserving dense rows;
// static: id + base), the generated labels on the scored events, candidates or every event
// scored, the separate eval batches and the length histogram.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "config/config.h"
#include "core/error.h"
#include "data/batch_select.h"
#include "data/benchmark_data.h"
#include "data/benchmark_dataset.h"
#include "data/ranking.h"

namespace hstu {
namespace {

// A recsys-examples benchmark description: jagged zipf lengths, a dynamic item table, a static
// action table and one contextual feature.
std::string write_gin(int64_t candidates) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hstu_bench_" + std::to_string(candidates) + ".gin"))
                               .string();
  std::ofstream f(path);
  f << "len/RandomDistribution.dist_type = 'zipf'\n"
       "len/RandomDistribution.alpha = 1.2\n"
       "len/RandomDistribution.low = 0\n"
       "ids/RandomDistribution.dist_type = 'zipf'\n"
       "ids/RandomDistribution.alpha = 1.2\n"
       "seq/FeatureArgs.feature_names = ['item', 'action']\n"
       "seq/FeatureArgs.max_sequence_length = 40\n"
       "seq/FeatureArgs.is_jagged = True\n"
       "seq/FeatureArgs.seqlen_dist = @len/RandomDistribution()\n"
       "seq/FeatureArgs.value_dists = {'item': @ids/RandomDistribution()}\n"
       "user/FeatureArgs.feature_names = ['age']\n"
       "user/FeatureArgs.max_sequence_length = 1\n"
       "BenchmarkDatasetArgs.feature_args = [@seq/FeatureArgs(), @user/FeatureArgs()]\n"
       "item/DynamicEmbeddingArgs.feature_names = ['item']\n"
       "item/DynamicEmbeddingArgs.table_name = 'item'\n"
       "item/DynamicEmbeddingArgs.item_vocab_size_or_capacity = 1000000\n"
       "action/EmbeddingArgs.feature_names = ['action']\n"
       "action/EmbeddingArgs.table_name = 'action'\n"
       "action/EmbeddingArgs.item_vocab_size_or_capacity = 16\n"
       "age/EmbeddingArgs.feature_names = ['age']\n"
       "age/EmbeddingArgs.table_name = 'age'\n"
       "age/EmbeddingArgs.item_vocab_size_or_capacity = 7\n"
       "BenchmarkDatasetArgs.embedding_args = [@item/DynamicEmbeddingArgs(), "
       "@action/EmbeddingArgs(), @age/EmbeddingArgs()]\n"
       "BenchmarkDatasetArgs.item_feature_name = 'item'\n"
       "BenchmarkDatasetArgs.action_feature_name = 'action'\n"
       "BenchmarkDatasetArgs.contextual_feature_names = ['age']\n"
       "BenchmarkDatasetArgs.max_num_candidates = "
    << candidates << "\nBenchmarkDatasetArgs.num_generated_batches = 4\n";
  return path;
}

Config bench_config(int64_t candidates) {
  Config cfg;
  cfg.task = "ranking";
  cfg.dataset.dataset_name = "benchmark";
  cfg.dataset.dataset_path = write_gin(candidates);
  cfg.dataset.max_num_candidates = candidates;
  cfg.trainer.train_batch_size = 8;
  cfg.trainer.eval_batch_size = 5;
  cfg.trainer.max_eval_iters = 2;
  cfg.trainer.seed = 9;
  cfg.ranking.num_tasks = 3;
  cfg.ranking.prediction_head_arch = {4, 3};
  return cfg;
}

TEST(BenchmarkDataset, SamplesAreTheGeneratedBatchesInOrder) {
  const Config cfg = bench_config(0);
  const BenchmarkData d = benchmark_data(cfg);
  const BenchmarkLayout l = benchmark_layout(cfg);
  EXPECT_EQ(d.ds.name, "benchmark");
  EXPECT_EQ(d.ds.num_actions, 16);  // the static table's rows
  EXPECT_EQ(d.ds.contextual_cardinalities, std::vector<int32_t>{7});
  // Train: 4 generated batches of 8; eval: max_eval_iters = 2 batches of 5, another stream.
  EXPECT_EQ(static_cast<int64_t>(d.splits.train.samples.size()) + d.splits.train.skipped_users, 32);
  EXPECT_EQ(static_cast<int64_t>(d.splits.eval.samples.size()) + d.splits.eval.skipped_users, 10);
  // Replay the generator: sample by sample, the dataset holds the generated values and labels,
  // every event scored (max_num_candidates = 0).
  std::map<int64_t, int32_t> item_row;  // raw id -> row, must be order-preserving
  size_t u = 0;
  for (int64_t i = 0; i < l.train_batches; ++i) {
    const BenchmarkBatch b = benchmark_batch(l.args, 8, 3, 9, i);
    const BenchmarkFeatureData& it = b.feature("item");
    const BenchmarkFeatureData& ac = b.feature("action");
    int64_t label = 0;
    for (int64_t s = 0; s < 8; ++s) {
      const int64_t o = it.offsets[s], n = it.offsets[s + 1] - o;
      if (n == 0) continue;
      const RankingSample& rs = d.splits.train.samples.at(u++);
      ASSERT_EQ(rs.end - rs.begin, n);
      EXPECT_EQ(rs.candidates, rs.begin);  // all scored
      for (int64_t e = 0; e < n; ++e) {
        const int32_t row = d.ds.items[rs.begin + e];
        const auto [pos, fresh] = item_row.emplace(it.values[o + e], row);
        EXPECT_EQ(pos->second, row);
        EXPECT_EQ(d.ds.actions[rs.begin + e], ac.values[o + e]);
        EXPECT_EQ(d.ds.labels[rs.begin + e], b.labels[label++]);
      }
      EXPECT_EQ(d.ds.contextual_values[rs.user], b.feature("age").values[s]);
    }
  }
  EXPECT_EQ(u, d.splits.train.samples.size());
  int32_t last = 0;
  for (const auto& [id, row] : item_row) {  // ids ascending -> rows ascending, from 1
    EXPECT_GT(row, last);
    last = row;
  }
  EXPECT_LT(last, d.ds.num_items);
  // The histogram counts every generated training sample once.
  int64_t counted = 0;
  for (size_t p = d.histogram.find(')'); p != std::string::npos; p = d.histogram.find(')', p + 1))
    counted += std::stoll(d.histogram.substr(p + 1));
  EXPECT_EQ(counted, 32);
}

TEST(BenchmarkDataset, CandidatesAreTheLastEventsAndCarryTheLabels) {
  const Config cfg = bench_config(3);
  const BenchmarkData d = benchmark_data(cfg);
  ASSERT_FALSE(d.splits.eval.samples.empty());
  for (const RankingSplit* split : {&d.splits.train, &d.splits.eval}) {
    for (const RankingSample& s : split->samples) {
      EXPECT_EQ(s.end - s.candidates, std::min<int64_t>(s.end - s.begin, 3));
      for (int64_t e = s.begin; e < s.candidates; ++e) EXPECT_EQ(d.ds.labels[e], 0);
    }
  }
  // A batch of the split: num_candidates and labels as the model reads them.
  SequenceBatch b;
  const std::vector<int64_t> first{0, 1};
  make_ranking_batch(d.ds, d.splits.train, first, b);
  std::vector<int32_t> labels;
  ranking_labels(b, labels);
  EXPECT_EQ(static_cast<int64_t>(labels.size()), b.num_candidates[0] + b.num_candidates[1]);
  for (int32_t l : labels) EXPECT_LT(l, 8);  // 3 task bits
  // A data-parallel rank's share of the batch keeps its samples' labels.
  SequenceBatch second;
  const std::vector<int64_t> one{1};
  select_samples(b, one, second);
  EXPECT_EQ(second.labels,
            std::vector<int32_t>(b.labels.begin() + b.offsets[1], b.labels.begin() + b.offsets[2]));
  // The eval batches come from their own stream: not the training samples again.
  const RankingSample& t0 = d.splits.train.samples[0];
  const RankingSample& e0 = d.splits.eval.samples[0];
  const bool same = t0.end - t0.begin == e0.end - e0.begin &&
                    std::equal(d.ds.items.begin() + t0.begin, d.ds.items.begin() + t0.end,
                               d.ds.items.begin() + e0.begin);
  EXPECT_FALSE(same);
}

TEST(BenchmarkDataset, ErrorsNameTheProblem) {
  Config cfg = bench_config(0);
  cfg.dataset.max_num_candidates = 2;
  try {
    benchmark_data(cfg);
    FAIL() << "a max_num_candidates mismatch must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BenchmarkDatasetArgs.max_num_candidates = 0"),
              std::string::npos);
  }
  cfg = bench_config(0);
  cfg.dataset.dataset_path = "/nonexistent/bench.gin";
  EXPECT_THROW(benchmark_data(cfg), Error);
}

}  // namespace
}  // namespace hstu
