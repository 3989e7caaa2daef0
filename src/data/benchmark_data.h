// benchmark_data.h — recsys-examples' random benchmark batches (its HSTUBatch.random /
// hstu_random_dataset.py, reference/recsys-examples-hstu.md §3), from BenchmarkDatasetArgs:
// - each FeatureArgs group draws one length per sample shared by its features: max_sequence_length
//   when not jagged, else a draw of seqlen_dist (default uniform [0, max)), its high defaulting to
//   max_sequence_length;
// - each feature's ids: a draw of its value_dists entry, else uniform over its table's rows
//   (a dynamic table's ids are unbounded, drawn uniformly below 2^62);
// - candidates per sample: min(item length, max_num_candidates);
// - labels: uniform in [0, 2^num_tasks), one per candidate, or one per item when there are no
//   candidates (recsys-examples scores every item then).
// Batch b of a run is a pure function of (seed, b mod num_generated_batches), as recsys-examples
// generates num_generated_batches batches once and cycles them.
//
// The trainer consumes them through data/benchmark_dataset.h (dataset "benchmark").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/benchmark_args.h"

namespace hstu {

struct BenchmarkFeatureData {
  std::string name;
  std::vector<int32_t> offsets;  // [B + 1]
  std::vector<int64_t> values;   // [offsets[B]]
};

struct BenchmarkBatch {
  int64_t batch_size = 0;
  std::vector<BenchmarkFeatureData> features;  // in FeatureArgs order, then feature_names order
  std::vector<int32_t> num_candidates;         // [B]
  std::vector<int64_t> labels;                 // [sum of candidates, or of item lengths]

  const BenchmarkFeatureData& feature(const std::string& name) const;
};

// Batch `index` of a run (index mod num_generated_batches is generated).
BenchmarkBatch benchmark_batch(const BenchmarkDatasetArgs& args, int64_t batch_size,
                               int64_t num_tasks, uint64_t seed, int64_t index);

// A text histogram of lengths in [0, max_length]: `bins` equal-width bins, one line each
// ("[lo, hi)  count  ####").
std::string length_histogram(const std::vector<int64_t>& lengths, int64_t max_length, int bins);

}  // namespace hstu
