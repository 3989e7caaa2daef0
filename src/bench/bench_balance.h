// bench_balance.h — `hstu bench balance`: how much balanced batching (dist/balance.h) evens out
// the per-rank work of a data-parallel step, on simulated ranks (no devices, no communication).
//
// For each world size W it draws `steps` global batches of W x batch_per_rank sequence lengths,
// Zipf(alpha)-distributed on 1, 2, ... and capped at max_len (recsys-examples' balanced-batching
// benchmark data: Zipf(1.2), at most 4096), from a seeded Philox stream; turns each length into a
// per-sample cost with the config's layer shape (model/flops.h: sample_cost; a ranking config's
// samples interleave item and action tokens, 2 tokens per event); and compares the contiguous
// split (plain data parallelism) with the Karmarkar-Karp partition: max/mean rank work, the
// step-time gain a synchronous step would see (sum over steps of the slowest rank's work, plain
// over KK) and the host time of one KK partition.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"

namespace hstu {

struct BalanceBenchArgs {
  std::vector<int> world_sizes = {2, 3, 4, 5, 6, 7, 8};
  int64_t batch_per_rank = 32;
  int64_t max_len = 4096;
  double zipf_alpha = 1.2;
  int64_t steps = 200;
  uint64_t seed = 1234;
};

// One row of the table, over `steps` global batches.
struct BalanceBenchRow {
  int world_size = 0;
  double plain_imbalance = 0;  // mean over steps of max / mean rank work, contiguous split
  double kk_imbalance = 0;     // the same for the KK partition
  double bound = 0;            // mean over steps of max(1, (largest sample + the batch_per_rank - 1
                               // smallest) / mean rank work): no equal-count split does better
  double gain = 0;             // sum of plain max / sum of KK max: predicted step-time speed-up
  double kk_us = 0;            // median host time of one kk_partition call, microseconds
};

// Runs the benchmark for cfg's network shape and task, prints its table, returns the rows.
std::vector<BalanceBenchRow> run_balance_bench(const Config& cfg, const BalanceBenchArgs& args);

}  // namespace hstu
