// test_balance.cpp — the balanced-batching partition (dist/balance.h): the Karmarkar-Karp
// equal-count split against exhaustive search on small inputs, its stated guarantees (equal
// counts, every sample once, spread bound, optimality at two samples per rank), determinism and
// permutation behaviour, zero-cost padding, and the contiguous baseline.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "dist/balance.h"

namespace hstu::dist {
namespace {

// Random integer-valued costs (sums stay exact in double): uniform in [0, 1000) when
// `heavy` is false, else a heavy tail min(floor(1000 u^-1.5), 10^6), like the quadratic cost of
// Zipf-distributed lengths under a length cap.
std::vector<double> random_costs(int64_t n, uint64_t seed, bool heavy) {
  std::vector<double> c(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = (philox4x32(seed, static_cast<uint64_t>(i)).x >> 8) * (1.0 / 16777216.0);
    c[static_cast<size_t>(i)] = heavy ? std::min(std::floor(1000.0 * std::pow(1.0 - u, -1.5)), 1e6)
                                      : std::floor(1000.0 * u);
  }
  return c;
}

// Every index of [0, n) exactly once, each rank ascending, counts floor or ceil of n/k.
void expect_valid(const Partition& p, int64_t n, int k) {
  ASSERT_EQ(p.size(), static_cast<size_t>(k));
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (const auto& rank : p) {
    EXPECT_TRUE(std::is_sorted(rank.begin(), rank.end()));
    const auto count = static_cast<int64_t>(rank.size());
    EXPECT_TRUE(count == n / k || count == (n + k - 1) / k) << count << " of " << n << " / " << k;
    for (int64_t i : rank) {
      ASSERT_TRUE(i >= 0 && i < n) << i;
      ++seen[static_cast<size_t>(i)];
    }
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "sample " << i;
}

// The smallest max-rank sum over all partitions of `costs` into k sets of n/k (brute force;
// items join groups in order, a new group only after the previous ones, so each partition is
// visited once).
double optimum(const std::vector<double>& costs, int k) {
  const auto n = static_cast<int64_t>(costs.size());
  const int64_t cap = n / k;
  std::vector<double> sums(static_cast<size_t>(k), 0);
  std::vector<int64_t> counts(static_cast<size_t>(k), 0);
  double best = std::numeric_limits<double>::infinity();
  auto rec = [&](auto&& self, int64_t i, int used) -> void {
    if (i == n) {
      best = std::min(best, *std::max_element(sums.begin(), sums.end()));
      return;
    }
    for (int g = 0; g < std::min(used + 1, k); ++g) {
      if (counts[static_cast<size_t>(g)] == cap) continue;
      sums[static_cast<size_t>(g)] += costs[static_cast<size_t>(i)];
      ++counts[static_cast<size_t>(g)];
      if (*std::max_element(sums.begin(), sums.end()) < best)
        self(self, i + 1, std::max(used, g + 1));
      sums[static_cast<size_t>(g)] -= costs[static_cast<size_t>(i)];
      --counts[static_cast<size_t>(g)];
    }
  };
  rec(rec, 0, 0);
  return best;
}

// The largest spread of a run of k consecutive costs in sorted order: the bound on KK's final
// max - min rank sum.
double run_spread_bound(std::vector<double> costs, int k) {
  while (costs.size() % static_cast<size_t>(k) != 0) costs.push_back(0);
  std::sort(costs.begin(), costs.end());
  double bound = 0;
  for (size_t s = 0; s < costs.size(); s += static_cast<size_t>(k))
    bound = std::max(bound, costs[s + static_cast<size_t>(k) - 1] - costs[s]);
  return bound;
}

TEST(Balance, EqualCountsAndEverySampleOnce) {
  for (int k : {1, 2, 3, 4, 7, 8}) {
    for (int64_t per_rank : {1, 2, 5, 32}) {
      const int64_t n = per_rank * k;
      const auto costs = random_costs(n, 100 + static_cast<uint64_t>(n), true);
      const Partition p = kk_partition(costs, k);
      expect_valid(p, n, k);
      for (const auto& rank : p) EXPECT_EQ(static_cast<int64_t>(rank.size()), per_rank);
      const PartitionWork w = partition_work(costs, p);
      const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
      EXPECT_DOUBLE_EQ(w.mean * k, total);
      EXPECT_LE(w.max - w.min, run_spread_bound(costs, k)) << "n " << n << " k " << k;
    }
  }
}

// Two samples per rank (N = 2k): pairing the i-th smallest with the i-th largest is optimal,
// and that is what KK does with two runs.
TEST(Balance, OptimalWithTwoSamplesPerRank) {
  for (int k : {2, 3, 4, 5}) {
    for (uint64_t seed = 0; seed < 200; ++seed) {
      for (bool heavy : {false, true}) {
        const auto costs = random_costs(2 * k, seed * 7 + static_cast<uint64_t>(k), heavy);
        const PartitionWork w = partition_work(costs, kk_partition(costs, k));
        ASSERT_EQ(w.max, optimum(costs, k)) << "k " << k << " seed " << seed;
      }
    }
  }
}

// Small inputs against every equal-count partition. KK is a heuristic with no ratio guarantee
// beyond the spread bound (asserted exactly) and optimality at N = 2k (asserted: ratio 1.0).
// The other bounds are the worst ratios to the optimum measured over 300 random inputs per case
// (150 seeds x uniform and heavy-tailed costs; printed below), rounded up by about 0.03, so a
// change that makes the partition worse fails. Measured on these inputs: KK/opt worst 1.18-1.25
// at k = 2, 1.11-1.22 at k = 3, 1.15 at k = 4, mean 1.01-1.03 against 1.14-1.24 for the plain
// split; KK's max-rank work exceeds the plain split's on up to 27 of 300 inputs (never at
// N = 2k), which is why only the mean, not every input, is asserted to beat the plain split.
TEST(Balance, NearOptimalAgainstExhaustiveSearch) {
  struct Case {
    int k;
    int64_t n;
    double max_ratio;  // asserted: KK max-rank sum / optimum, worst case
  };
  const Case cases[] = {{2, 6, 1.21}, {2, 8, 1.25},  {2, 10, 1.22}, {2, 12, 1.28}, {3, 6, 1.0},
                        {3, 9, 1.14}, {3, 12, 1.25}, {4, 8, 1.0},   {4, 12, 1.18}};
  for (const Case& c : cases) {
    double worst = 1, sum_ratio = 0, sum_plain = 0;
    int trials = 0, kk_worse_than_plain = 0;
    for (uint64_t seed = 0; seed < 150; ++seed) {
      for (bool heavy : {false, true}) {
        const auto costs =
            random_costs(c.n, 1000 + seed * 31 + static_cast<uint64_t>(c.n * c.k), heavy);
        const Partition p = kk_partition(costs, c.k);
        expect_valid(p, c.n, c.k);
        const PartitionWork w = partition_work(costs, p);
        const double opt = optimum(costs, c.k);
        const double plain = partition_work(costs, contiguous_partition(c.n, c.k)).max;
        ASSERT_GE(w.max, opt);
        ASSERT_LE(w.max - w.min, run_spread_bound(costs, c.k));
        const double ratio = opt > 0 ? w.max / opt : 1.0;
        worst = std::max(worst, ratio);
        sum_ratio += ratio;
        sum_plain += opt > 0 ? plain / opt : 1.0;
        kk_worse_than_plain += w.max > plain;
        ++trials;
      }
    }
    std::printf(
        "k %d n %2lld: KK/opt worst %.4f mean %.4f; plain/opt mean %.4f; KK worse than "
        "plain in %d of %d\n",
        c.k, static_cast<long long>(c.n), worst, sum_ratio / trials, sum_plain / trials,
        kk_worse_than_plain, trials);
    EXPECT_LE(worst, c.max_ratio) << "k " << c.k << " n " << c.n;
    EXPECT_LE(sum_ratio / trials, 1.04) << "k " << c.k << " n " << c.n;
    EXPECT_LT(sum_ratio, sum_plain) << "k " << c.k << " n " << c.n;
    EXPECT_LE(kk_worse_than_plain, trials / 10) << "k " << c.k << " n " << c.n;
    if (c.n == 2 * c.k) {
      EXPECT_EQ(kk_worse_than_plain, 0);
    }
  }
}

TEST(Balance, DeterministicAndPermutationEquivariant) {
  const int k = 4;
  const int64_t n = 64;
  // Many equal costs: lengths from a small set, as token-count costs are.
  std::vector<double> costs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    costs[static_cast<size_t>(i)] = static_cast<double>(1 + philox4x32(7, i).x % 5) * 100;
  const Partition p = kk_partition(costs, k);
  EXPECT_EQ(kk_partition(costs, k), p);
  const PartitionWork w = partition_work(costs, p);

  // Reversing the input: the per-rank sums are the same (a function of the cost multiset).
  std::vector<double> rev(costs.rbegin(), costs.rend());
  const PartitionWork wr = partition_work(rev, kk_partition(rev, k));
  EXPECT_EQ(wr.rank_sums, w.rank_sums);

  // Any permutation: the same per-rank sums. With no equal costs the partition itself moves
  // with the samples: kk(costs permuted) = kk(costs) with every index mapped through it.
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[static_cast<size_t>(i)], perm[philox4x32(9, i).x % (i + 1)]);
  std::vector<double> shuffled(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    shuffled[static_cast<size_t>(i)] = costs[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  EXPECT_EQ(partition_work(shuffled, kk_partition(shuffled, k)).rank_sums, w.rank_sums);

  std::vector<double> distinct = random_costs(n, 11, false);
  for (int64_t i = 0; i < n; ++i) distinct[static_cast<size_t>(i)] += i * 1e-3;  // no ties
  std::vector<double> moved(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    moved[static_cast<size_t>(i)] = distinct[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  const Partition pd = kk_partition(distinct, k), pm = kk_partition(moved, k);
  for (int r = 0; r < k; ++r) {
    std::vector<int64_t> mapped;
    for (int64_t i : pm[static_cast<size_t>(r)]) mapped.push_back(perm[static_cast<size_t>(i)]);
    std::sort(mapped.begin(), mapped.end());
    EXPECT_EQ(mapped, pd[static_cast<size_t>(r)]) << "rank " << r;
  }
}

// Equal costs are told apart by index only: all-equal costs give the same equal-count split
// every time, and the documented tie rule fixes which: sorted positions are the indices, the
// runs {0,1,2} {3,4,5} {6,7,8} {9,10,11} all have spread 0, so the state holding position 0 is
// popped first and merged with the next run, set i with set 2-i, each time.
TEST(Balance, AllEqualCostsAreSplitByIndex) {
  const std::vector<double> costs(12, 5.0);
  const Partition p = kk_partition(costs, 3);
  expect_valid(p, 12, 3);
  EXPECT_EQ(p, (Partition{{0, 5, 8, 11}, {1, 4, 7, 10}, {2, 3, 6, 9}}));
  const PartitionWork w = partition_work(costs, p);
  EXPECT_EQ(w.max, 20.0);
  EXPECT_EQ(w.min, 20.0);
  EXPECT_EQ(kk_partition(costs, 3), p);
}

TEST(Balance, ZeroCostPaddingIsDropped) {
  // 10 samples on 4 ranks: two phantoms pad to 12 and are dropped; ranks get 2 or 3.
  const auto costs = random_costs(10, 5, true);
  const Partition p = kk_partition(costs, 4);
  expect_valid(p, 10, 4);
  const PartitionWork w = partition_work(costs, p);
  std::vector<double> padded = costs;
  padded.resize(12, 0.0);
  const PartitionWork wp = partition_work(padded, kk_partition(padded, 4));
  // Real zero-cost samples sort before the phantoms, so padding by hand gives the same sums.
  auto sorted = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(w.rank_sums), sorted(wp.rank_sums));
  // More ranks than samples: some ranks get nothing.
  const Partition few = kk_partition(std::vector<double>{3, 1}, 4);
  expect_valid(few, 2, 4);
  EXPECT_EQ(partition_work(std::vector<double>{3, 1}, few).max, 3.0);
  // Zero samples.
  const Partition none = kk_partition(std::vector<double>{}, 3);
  EXPECT_EQ(none, Partition(3));
  // Zero-cost samples (padding samples of a short last batch) still take their slots.
  const std::vector<double> zeros{0, 0, 9, 0, 0, 1};
  const Partition pz = kk_partition(zeros, 2);
  expect_valid(pz, 6, 2);
  EXPECT_EQ(partition_work(zeros, pz).max, 9.0);
}

TEST(Balance, ContiguousBaseline) {
  const Partition p = contiguous_partition(10, 4);
  expect_valid(p, 10, 4);
  EXPECT_EQ(p[0], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p[1], (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(p[3], (std::vector<int64_t>{7, 8, 9}));
}

TEST(Balance, LargeBatchKeepsTheSpreadBound) {
  // 8 ranks x 4096 samples of heavy-tailed cost: valid, and max - min within the run bound
  // (at most the largest cost, 10^6, against a mean rank work near 10^9, so max/mean < 1.001),
  // where the plain split is visibly uneven. Not a timing test.
  const int k = 8;
  const int64_t n = 8 * 4096;
  const auto costs = random_costs(n, 77, true);
  const Partition p = kk_partition(costs, k);
  expect_valid(p, n, k);
  const PartitionWork w = partition_work(costs, p);
  const PartitionWork plain = partition_work(costs, contiguous_partition(n, k));
  EXPECT_LE(w.max - w.min, run_spread_bound(costs, k));
  EXPECT_LT(w.imbalance(), plain.imbalance());
  EXPECT_LT(w.imbalance(), 1.001);
}

TEST(Balance, RejectsBadInput) {
  EXPECT_THROW(kk_partition(std::vector<double>{1, 2}, 0), Error);
  EXPECT_THROW(kk_partition(std::vector<double>{1, -2}, 2), Error);
  EXPECT_THROW(kk_partition(std::vector<double>{1, std::nan("")}, 2), Error);
  EXPECT_THROW(contiguous_partition(-1, 2), Error);
  const std::vector<double> costs{1, 2, 3};
  EXPECT_THROW(partition_work(costs, Partition{{0, 1}, {1, 2}}), Error);  // 1 twice
  EXPECT_THROW(partition_work(costs, Partition{{0}, {2}}), Error);        // 1 missing
  EXPECT_THROW(partition_work(costs, Partition{{0, 1}, {3}}), Error);     // out of range
}

}  // namespace
}  // namespace hstu::dist
