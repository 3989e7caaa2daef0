// benchmark_data.cpp — recsys-examples' random benchmark batches (see benchmark_data.h).
#include "data/benchmark_data.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/philox.h"
#include "data/random_stream.h"
#include "data/synthetic.h"

namespace hstu {
namespace {

// The id range [0, rows) of `name`'s table; a dynamic table: [0, 2^62).
int64_t table_rows(const BenchmarkDatasetArgs& a, const std::string& name) {
  for (const BenchmarkTable& t : a.tables)
    for (const std::string& n : t.feature_names)
      if (n == name) return t.dynamic ? (int64_t{1} << 62) : t.vocab_size;
  HSTU_THROW("BenchmarkDatasetArgs: feature '", name, "' has no embedding table");
}

}  // namespace

const BenchmarkFeatureData& BenchmarkBatch::feature(const std::string& name) const {
  for (const BenchmarkFeatureData& f : features)
    if (f.name == name) return f;
  HSTU_THROW("benchmark batch has no feature '", name, "'");
}

BenchmarkBatch benchmark_batch(const BenchmarkDatasetArgs& args, int64_t batch_size,
                               int64_t num_tasks, uint64_t seed, int64_t index) {
  HSTU_CHECK(batch_size >= 1 && num_tasks >= 1 && num_tasks <= 62, "benchmark batch: batch_size ",
             batch_size, " and num_tasks ", num_tasks, " must be >= 1 (num_tasks <= 62)");
  const uint64_t batch_seed =
      derive_seed(seed, static_cast<uint64_t>(index % args.num_generated_batches));
  BenchmarkBatch out;
  out.batch_size = batch_size;
  std::vector<int64_t> item_lengths;
  for (size_t g = 0; g < args.features.size(); ++g) {
    const BenchmarkFeature& group = args.features[g];
    PhiloxStream len_rng(batch_seed, static_cast<uint32_t>(2 * g));
    std::vector<int64_t> lengths(static_cast<size_t>(batch_size), group.max_sequence_length);
    if (group.is_jagged) {
      RandomDistribution d = group.seqlen_dist.value_or(RandomDistribution{});
      if (d.high == -1) d.high = static_cast<double>(group.max_sequence_length);
      for (int64_t& len : lengths)
        len = sample_distribution(d, 0, group.max_sequence_length, len_rng);
    }
    for (size_t k = 0; k < group.feature_names.size(); ++k) {
      const std::string& name = group.feature_names[k];
      BenchmarkFeatureData f;
      f.name = name;
      f.offsets.push_back(0);
      for (int64_t len : lengths) f.offsets.push_back(f.offsets.back() + static_cast<int32_t>(len));
      const int64_t rows = table_rows(args, name);
      PhiloxStream value_rng(batch_seed, static_cast<uint32_t>(2 * g + 1 + 1000 * (k + 1)));
      const auto dist = group.value_dists.find(name);
      f.values.resize(static_cast<size_t>(f.offsets.back()));
      for (int64_t& v : f.values) {
        if (dist != group.value_dists.end()) {
          v = sample_distribution(dist->second, 0, rows - 1, value_rng);
        } else {
          v = static_cast<int64_t>(value_rng.next_u64() % static_cast<uint64_t>(rows));
        }
      }
      if (name == args.item_feature_name) item_lengths = lengths;
      out.features.push_back(std::move(f));
    }
  }
  HSTU_CHECK(!item_lengths.empty(), "BenchmarkDatasetArgs: no FeatureArgs holds the item feature '",
             args.item_feature_name, "'");
  PhiloxStream label_rng(batch_seed, 0xFFFFu);
  int64_t num_labels = 0;
  for (int64_t len : item_lengths) {
    const int64_t c = std::min(len, args.max_num_candidates);
    out.num_candidates.push_back(static_cast<int32_t>(c));
    num_labels += args.max_num_candidates > 0 ? c : len;
  }
  out.labels.resize(static_cast<size_t>(num_labels));
  for (int64_t& l : out.labels)
    l = static_cast<int64_t>(label_rng.next_u64() & ((uint64_t{1} << num_tasks) - 1));
  return out;
}

std::string length_histogram(const std::vector<int64_t>& lengths, int64_t max_length, int bins) {
  HSTU_CHECK(bins >= 1 && max_length >= 1, "length_histogram: bins and max_length must be >= 1");
  const int64_t width = (max_length + bins) / bins;  // bins cover [0, max_length]
  std::vector<int64_t> counts(static_cast<size_t>(bins), 0);
  for (int64_t len : lengths) {
    HSTU_CHECK(len >= 0 && len <= max_length, "length_histogram: length ", len, " outside [0, ",
               max_length, "]");
    ++counts[static_cast<size_t>(std::min<int64_t>(len / width, bins - 1))];
  }
  const int64_t top = std::max<int64_t>(1, *std::max_element(counts.begin(), counts.end()));
  std::string out;
  for (int b = 0; b < bins; ++b) {
    char line[96];
    const int64_t lo = b * width, hi = b == bins - 1 ? max_length + 1 : (b + 1) * width;
    std::snprintf(line, sizeof(line), "[%6lld, %6lld)  %8lld  ", static_cast<long long>(lo),
                  static_cast<long long>(hi),
                  static_cast<long long>(counts[static_cast<size_t>(b)]));
    out += line;
    out.append(static_cast<size_t>(40 * counts[static_cast<size_t>(b)] / top), '#');
    out += '\n';
  }
  return out;
}

}  // namespace hstu
