// test_retrieval_rank.cpp — CPU full-catalogue rank of each user's target (retrieval eval).
//
// Asserts:
//  - a hand-computed case with exact scores, f32 and f64: ties broken by smaller id, history
//    items removed (duplicates, padding id 0 and the target itself in the history included),
//    row 0 never ranked even with the highest score, and the rank cap (rank_cap + 1);
//  - random data (several user chunks, strided queries) against a brute-force sort of the
//    filtered catalogue by (score desc, id asc): exact in f64; in f32 within the band of items
//    whose score is within float rounding of the target's;
//  - a NaN or infinite target score ranks last (rank_cap + 2), not first; a NaN item never beats;
//  - bad targets, history ids, offsets and rank_cap raise hstu::Error.
#include <algorithm>
#include <cmath>
#include <set>

#include "common/harness.h"
#include "ops/retrieval_rank.h"

namespace hstu::test {
namespace {

Tensor i32(std::initializer_list<int32_t> v) {
  Tensor t = alloc(DType::kI32, {static_cast<int64_t>(v.size())});
  int64_t i = 0;
  for (int32_t x : v) set(t, i++, x);
  return t;
}

TEST(RetrievalRankCpu, HandComputedCase) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    // Items (2-D, exact scores): 0 padding (10, 10), 1 (1, 0), 2 (0, 1), 3 (0.5, 0),
    // 4 (0.5, 1), 5 (0.75, 0), 6 (0.5, 0).
    const double item_vals[7][2] = {{10, 10}, {1, 0},    {0, 1},  {0.5, 0},
                                    {0.5, 1}, {0.75, 0}, {0.5, 0}};
    const Tensor items = alloc(dt, {7, 2});
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t k = 0; k < 2; ++k) set(items, i * 2 + k, item_vals[i][k]);
    // Queries: u0, u1, u3, u4 (1, 0); u2 (0, 1).
    const double q_vals[5][2] = {{1, 0}, {1, 0}, {0, 1}, {1, 0}, {1, 0}};
    const Tensor queries = alloc(dt, {5, 2});
    for (int64_t u = 0; u < 5; ++u)
      for (int64_t k = 0; k < 2; ++k) set(queries, u * 2 + k, q_vals[u][k]);
    const Tensor targets = i32({3, 4, 2, 2, 6});
    // u0: no history -> above: 1 (1.0), 5 (0.75); 4 and 6 tie at 0.5 with larger ids -> rank 3.
    // u1: history {1, 3, 3, 4, 0} -> 1 and 3 removed (3 would tie with a smaller id), the
    //     target 4 stays -> above: 5 -> rank 2.
    // u2: target 2 scores 1; item 4 ties with a larger id -> rank 1.
    // u3: target 2 scores 0; 1, 3, 4, 5, 6 are above -> rank 6, capped at 4 + 1 = 5.
    // u4: history {1}; target 6 scores 0.5; above: 5, and 3, 4 (ties, smaller ids) -> rank 4.
    const Tensor offsets = i32({0, 0, 5, 5, 5, 6});
    const Tensor history = i32({1, 3, 3, 4, 0, 1});
    const Tensor ranks = alloc(DType::kI32, {5});
    fill_value(ranks, -7);
    retrieval_rank(ctx, queries, items, targets, offsets, history, 4, ranks);
    const int want[5] = {3, 2, 1, 5, 4};
    for (int64_t u = 0; u < 5; ++u) EXPECT_EQ(get(ranks, u), want[u]) << "user " << u;
    retrieval_rank(ctx, queries, items, targets, offsets, history, 100, ranks);
    EXPECT_EQ(get(ranks, 3), 6) << "uncapped";
  }
}

struct Band {
  int64_t lo, hi;  // 0-based position bounds of the target in the sorted filtered catalogue
};

// Brute force: sort the filtered catalogue by (score desc, id asc) and find the target; with
// tol > 0 also the band of positions reachable by moving scores within tol of the target's.
Band brute_force(const Tensor& q, const Tensor& items, int64_t u, int32_t target,
                 const std::set<int32_t>& hist, double tol) {
  const int64_t v = items.dim(0), d = items.dim(1);
  std::vector<std::pair<double, int32_t>> list;
  for (int32_t i = 1; i < v; ++i) {
    if (i != target && hist.count(i)) continue;
    double s = 0;
    for (int64_t k = 0; k < d; ++k) s += get(q, u * d + k) * get(items, i * d + k);
    list.emplace_back(s, i);
  }
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const auto pos =
      std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.second == target; });
  const int64_t at = pos - list.begin();
  if (tol == 0) return {at, at};
  Band b{0, 0};
  for (const auto& [s, i] : list) {
    if (i == target) continue;
    b.lo += s > pos->first + tol;
    b.hi += s >= pos->first - tol;
  }
  return b;
}

TEST(RetrievalRankCpu, MatchesBruteForceSort) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t u = 600, v = 2000, d = 16;
  const int32_t cap = 1500;
  for (DType dt : {DType::kF64, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor items = alloc(dt, {v, d}), queries = alloc_strided(dt, u, d, 1);
    fill_uniform(items, -1, 1);
    const Tensor targets = alloc(DType::kI32, {u});
    fill_int(targets, 1, v);
    // Queries near their target (small ranks) or far (large, capped ranks).
    std::normal_distribution<double> noise(0, 1);
    for (int64_t k = 0; k < u; ++k) {
      const double spread = k % 3 == 0 ? 0.3 : 3.0;
      for (int64_t c = 0; c < d; ++c)
        set(queries, k * d + c,
            get(items, int64_t(get(targets, k)) * d + c) + spread * noise(rng()));
    }
    std::vector<int32_t> offs{0}, ids;
    std::vector<std::set<int32_t>> hist(static_cast<size_t>(u));
    std::uniform_int_distribution<int32_t> item(0, int32_t(v) - 1), len(0, 30);
    for (int64_t k = 0; k < u; ++k) {
      for (int n = len(rng()); n > 0; --n) {
        const int32_t h = n == 1 && k % 5 == 0 ? int32_t(get(targets, k)) : item(rng());
        ids.push_back(h);
        hist[static_cast<size_t>(k)].insert(h);
      }
      offs.push_back(static_cast<int32_t>(ids.size()));
    }
    const Tensor offsets = alloc(DType::kI32, {u + 1}),
                 history = alloc(DType::kI32, {std::max<int64_t>(1, ids.size())});
    for (size_t i = 0; i < offs.size(); ++i) set(offsets, static_cast<int64_t>(i), offs[i]);
    for (size_t i = 0; i < ids.size(); ++i) set(history, static_cast<int64_t>(i), ids[i]);
    const Tensor ranks = alloc(DType::kI32, {u});
    retrieval_rank(ctx, queries, items, targets, offsets, history, cap, ranks);
    // f32: the op's f32 chain of 16 products may round differently than this double sum.
    const double tol = dt == DType::kF32 ? 1e-5 : 0.0;
    int bad = 0;
    for (int64_t k = 0; k < u; ++k) {
      const Band b = brute_force(queries, items, k, int32_t(get(targets, k)),
                                 hist[static_cast<size_t>(k)], tol);
      const int64_t got = int64_t(get(ranks, k));
      const int64_t lo = std::min<int64_t>(b.lo, cap) + 1, hi = std::min<int64_t>(b.hi, cap) + 1;
      if (got < lo || got > hi) {
        if (++bad <= 5)
          ADD_FAILURE() << "user " << k << ": rank " << got << ", brute force [" << lo << ", " << hi
                        << "]";
      }
    }
    EXPECT_EQ(bad, 0) << "seed " << test_seed();
  }
}

TEST(RetrievalRankCpu, NonFiniteTargetScoresRankLast) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    // Items: 0 padding, 1 (1, 0), 2 (0, 1), 3 (0.5, 0), 4 (NaN, 0).
    const double nan = std::nan(""), inf = INFINITY;
    const double item_vals[5][2] = {{0, 0}, {1, 0}, {0, 1}, {0.5, 0}, {nan, 0}};
    const Tensor items = alloc(dt, {5, 2});
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t k = 0; k < 2; ++k) set(items, i * 2 + k, item_vals[i][k]);
    // u0 scores NaN everywhere, u1 +inf on its target; u2 is finite and only item 1 beats its
    // target 3 (the NaN item 4 does not).
    const double q_vals[3][2] = {{nan, 0}, {inf, 0}, {1, 0}};
    const Tensor queries = alloc(dt, {3, 2});
    for (int64_t u = 0; u < 3; ++u)
      for (int64_t k = 0; k < 2; ++k) set(queries, u * 2 + k, q_vals[u][k]);
    const Tensor ranks = alloc(DType::kI32, {3});
    retrieval_rank(ctx, queries, items, i32({1, 1, 3}), i32({0, 0, 0, 0}), i32({0}), 10, ranks);
    EXPECT_EQ(get(ranks, 0), 12);
    EXPECT_EQ(get(ranks, 1), 12);
    EXPECT_EQ(get(ranks, 2), 2);
  }
}

TEST(RetrievalRankCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor q = alloc(DType::kF32, {2, 4}), items = alloc(DType::kF32, {5, 4});
  fill_uniform(q, -1, 1);
  fill_uniform(items, -1, 1);
  const Tensor ranks = alloc(DType::kI32, {2});
  const Tensor hist = i32({1, 2});
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({0, 1}), i32({0, 1, 2}), hist, 10, ranks),
               Error);  // target 0 is padding
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 5}), i32({0, 1, 2}), hist, 10, ranks),
               Error);  // target out of range
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 2}), i32({0, 2, 1}), hist, 10, ranks),
               Error);  // decreasing offsets
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 2}), i32({0, 1, 3}), hist, 10, ranks),
               Error);  // offsets past the history
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 2}), i32({0, 1, 2}), i32({1, 9}), 10, ranks),
               Error);  // history id out of range
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 2}), i32({0, 1, 2}), hist, 0, ranks), Error);
  EXPECT_THROW(retrieval_rank(ctx, q, items, i32({1, 2}), i32({0, 1, 2}), hist, INT32_MAX, ranks),
               Error);  // rank_cap + 2 would overflow
}

}  // namespace
}  // namespace hstu::test
