// bench_balance.cpp — the balanced-batching benchmark (see bench_balance.h).
#include "bench/bench_balance.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "data/random_stream.h"
#include "dist/balance.h"
#include "model/flops.h"

namespace hstu {
namespace {

constexpr uint32_t kBalanceBenchStream = 0x42414c41u;  // "BALA": this benchmark's lengths

void check_args(const BalanceBenchArgs& a) {
  HSTU_CHECK(!a.world_sizes.empty(), "bench balance: --world-sizes is empty");
  for (int w : a.world_sizes)
    HSTU_CHECK(w >= 1, "bench balance: --world-sizes holds ", w, " (world sizes must be >= 1)");
  HSTU_CHECK(a.batch_per_rank >= 1, "bench balance: --batch-per-rank must be >= 1, got ",
             a.batch_per_rank);
  HSTU_CHECK(a.max_len >= 1 && a.max_len <= (int64_t{1} << 30),
             "bench balance: --max-len must be in [1, 2^30], got ", a.max_len);
  HSTU_CHECK(a.zipf_alpha > 1, "bench balance: --zipf-alpha must be > 1, got ", a.zipf_alpha);
  HSTU_CHECK(a.steps >= 1, "bench balance: --steps must be >= 1, got ", a.steps);
}

}  // namespace

std::vector<BalanceBenchRow> run_balance_bench(const Config& cfg, const BalanceBenchArgs& a) {
  check_args(a);
  const NetworkArgs& net = cfg.network;
  const bool ranking = cfg.task == "ranking";
  const int64_t tokens_per_event = ranking ? 2 : 1;
  std::printf(
      "bench balance: %lld layers, D %lld, %lld heads x %lld (%s); %lld samples per rank, "
      "lengths Zipf(%.2f) capped at %lld, %s; %lld steps, seed %llu\n",
      static_cast<long long>(net.num_layers), static_cast<long long>(net.hidden_size),
      static_cast<long long>(net.num_attention_heads), static_cast<long long>(net.kv_channels),
      cfg.task.c_str(), static_cast<long long>(a.batch_per_rank), a.zipf_alpha,
      static_cast<long long>(a.max_len),
      ranking ? "2 tokens per event (item + action)" : "1 token per event",
      static_cast<long long>(a.steps), static_cast<unsigned long long>(a.seed));
  std::printf("%-4s %-15s %-15s %-15s %-16s %-12s %s\n", "W", "plain max/mean", "KK max/mean",
              "bound max/mean", "gain (plain/KK)", "KK us/batch", "mean len");

  using Clock = std::chrono::steady_clock;
  std::vector<BalanceBenchRow> rows;
  for (int w : a.world_sizes) {
    const int64_t n = a.batch_per_rank * w;
    PhiloxStream rng(derive_seed(a.seed, static_cast<uint64_t>(w)), kBalanceBenchStream);
    BalanceBenchRow row;
    row.world_size = w;
    double plain_max = 0, kk_max = 0, len_sum = 0;
    std::vector<double> costs(static_cast<size_t>(n)), sorted, us;
    for (int64_t s = 0; s < a.steps; ++s) {
      for (double& c : costs) {
        const int64_t len = std::min<int64_t>(rng.zipf(a.zipf_alpha), a.max_len);
        len_sum += static_cast<double>(len);
        c = sample_cost(net, tokens_per_event * len);
      }
      const auto t0 = Clock::now();
      const dist::Partition kk = dist::kk_partition(costs, w);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      const dist::PartitionWork pk = dist::partition_work(costs, kk);
      const dist::PartitionWork pp = dist::partition_work(costs, dist::contiguous_partition(n, w));
      row.plain_imbalance += pp.imbalance();
      row.kk_imbalance += pk.imbalance();
      // The rank holding the largest sample also holds batch_per_rank - 1 others.
      sorted = costs;
      std::sort(sorted.begin(), sorted.end());
      double heaviest = sorted.back();
      for (int64_t i = 0; i + 1 < a.batch_per_rank; ++i) heaviest += sorted[static_cast<size_t>(i)];
      row.bound += pk.mean > 0 ? std::max(1.0, heaviest / pk.mean) : 1.0;
      plain_max += pp.max;
      kk_max += pk.max;
    }
    const double steps = static_cast<double>(a.steps);
    row.plain_imbalance /= steps;
    row.kk_imbalance /= steps;
    row.bound /= steps;
    row.gain = kk_max > 0 ? plain_max / kk_max : 1.0;
    std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
    row.kk_us = us[us.size() / 2];
    std::printf("%-4d %-15.3f %-15.3f %-15.3f %-16.3f %-12.1f %.1f\n", w, row.plain_imbalance,
                row.kk_imbalance, row.bound, row.gain, row.kk_us,
                len_sum / (steps * static_cast<double>(n)));
    rows.push_back(row);
  }
  std::printf(
      "max/mean: the slowest rank's estimated work over the mean (1 = even), averaged over "
      "steps; bound: (largest sample + the B-1 smallest) / mean or 1, which no equal-count split "
      "beats; "
      "gain: predicted step-time speed-up of a synchronous step; KK us/batch: median host time "
      "of one partition of W x %lld samples\n",
      static_cast<long long>(a.batch_per_rank));
  return rows;
}

}  // namespace hstu
