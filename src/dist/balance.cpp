// balance.cpp — the equal-count Karmarkar-Karp partition and its baseline (see balance.h).
#include "dist/balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <tuple>

#include "core/error.h"

namespace hstu::dist {
namespace {

// One set of a state: a linked list of sorted positions (next[] in kk_partition), its cost sum
// and its smallest position (the tie-breaker and the set's identity).
struct Set {
  double sum = 0;
  int64_t head = -1, tail = -1, first = 0;
};

bool set_less(const Set& a, const Set& b) {
  return std::tie(a.sum, a.first) < std::tie(b.sum, b.first);
}

// A partial solution: k sets ordered by set_less.
struct State {
  std::vector<Set> sets;  // [k]
  double spread() const { return sets.back().sum - sets.front().sum; }
  int64_t first() const {
    int64_t f = sets.front().first;
    for (const Set& s : sets) f = std::min(f, s.first);
    return f;
  }
};

void check_k(int k, const char* what) {
  HSTU_CHECK(k >= 1, what, ": the number of ranks k must be >= 1, got ", k);
}

}  // namespace

Partition kk_partition(std::span<const double> costs, int k) {
  check_k(k, "kk_partition");
  const auto n = static_cast<int64_t>(costs.size());
  for (int64_t i = 0; i < n; ++i)
    HSTU_CHECK(std::isfinite(costs[i]) && costs[i] >= 0, "kk_partition: cost of sample ", i, " is ",
               costs[i], " (costs must be finite and >= 0)");
  const int64_t kk = k;
  const int64_t padded = (n + kk - 1) / kk * kk;  // phantoms n..padded-1 cost 0
  auto cost_of = [&](int64_t i) { return i < n ? costs[i] : 0.0; };

  // Step 1: order[p] = the sample at sorted position p, by (cost, index).
  std::vector<int64_t> order(static_cast<size_t>(padded));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::make_tuple(cost_of(a), a) < std::make_tuple(cost_of(b), b);
  });

  // Step 2: a state per run of k consecutive positions (already ordered by sum and position).
  std::vector<int64_t> next(static_cast<size_t>(padded), -1);
  std::vector<State> states(static_cast<size_t>(padded / kk));
  for (size_t s = 0; s < states.size(); ++s) {
    states[s].sets.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t p = static_cast<int64_t>(s) * kk + j;
      states[s].sets[static_cast<size_t>(j)] = Set{cost_of(order[static_cast<size_t>(p)]), p, p, p};
    }
  }

  // Step 3: a max-heap on (spread, then smaller first position) of state slots.
  using Key = std::tuple<double, int64_t, size_t>;  // spread, -first, slot
  auto key = [&](size_t slot) { return Key{states[slot].spread(), -states[slot].first(), slot}; };
  std::priority_queue<Key> heap;
  for (size_t s = 0; s < states.size(); ++s) heap.push(key(s));

  // Step 4: merge the two states of largest spread until one remains.
  while (heap.size() > 1) {
    const size_t a = std::get<2>(heap.top());
    heap.pop();
    const size_t b = std::get<2>(heap.top());
    heap.pop();
    std::vector<Set>& x = states[a].sets;
    std::vector<Set>& y = states[b].sets;
    for (int64_t i = 0; i < kk; ++i) {
      Set& s = x[static_cast<size_t>(i)];
      const Set& t = y[static_cast<size_t>(kk - 1 - i)];
      next[static_cast<size_t>(s.tail)] = t.head;
      s.tail = t.tail;
      s.sum += t.sum;
      s.first = std::min(s.first, t.first);
    }
    std::sort(x.begin(), x.end(), set_less);
    std::vector<Set>().swap(y);
    heap.push(key(a));
  }

  Partition out(static_cast<size_t>(k));
  if (heap.empty()) return out;  // n == 0
  const State& last = states[std::get<2>(heap.top())];
  for (size_t r = 0; r < out.size(); ++r) {
    for (int64_t p = last.sets[r].head; p != -1; p = next[static_cast<size_t>(p)]) {
      const int64_t i = order[static_cast<size_t>(p)];
      if (i < n) out[r].push_back(i);
    }
    std::sort(out[r].begin(), out[r].end());
  }
  return out;
}

Partition contiguous_partition(int64_t n, int k) {
  check_k(k, "contiguous_partition");
  HSTU_CHECK(n >= 0, "contiguous_partition: sample count ", n, " < 0");
  Partition out(static_cast<size_t>(k));
  for (int64_t r = 0; r < k; ++r) {
    const int64_t lo = r * n / k, hi = (r + 1) * n / k;
    out[static_cast<size_t>(r)].resize(static_cast<size_t>(hi - lo));
    std::iota(out[static_cast<size_t>(r)].begin(), out[static_cast<size_t>(r)].end(), lo);
  }
  return out;
}

PartitionWork partition_work(std::span<const double> costs, const Partition& p) {
  HSTU_CHECK(!p.empty(), "partition_work: a partition of 0 ranks");
  const auto n = static_cast<int64_t>(costs.size());
  std::vector<char> seen(static_cast<size_t>(n), 0);
  PartitionWork w;
  w.rank_sums.assign(p.size(), 0.0);
  int64_t used = 0;
  for (size_t r = 0; r < p.size(); ++r) {
    for (int64_t i : p[r]) {
      HSTU_CHECK(i >= 0 && i < n, "partition_work: rank ", r, " holds sample ", i, " of ", n);
      HSTU_CHECK(!seen[static_cast<size_t>(i)], "partition_work: sample ", i,
                 " appears twice (again on rank ", r, ")");
      seen[static_cast<size_t>(i)] = 1;
      w.rank_sums[r] += costs[static_cast<size_t>(i)];
      ++used;
    }
  }
  HSTU_CHECK(used == n, "partition_work: ", n - used, " of ", n, " samples are on no rank");
  w.max = *std::max_element(w.rank_sums.begin(), w.rank_sums.end());
  w.min = *std::min_element(w.rank_sums.begin(), w.rank_sums.end());
  w.mean =
      std::accumulate(w.rank_sums.begin(), w.rank_sums.end(), 0.0) / static_cast<double>(p.size());
  return w;
}

}  // namespace hstu::dist
