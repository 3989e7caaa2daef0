// test_retrieval_rank_counts.cpp — the per-shard counts of the distributed retrieval rank (CPU).
//
// Asserts:
//  - a random catalogue dealt at random into shards (one of them empty; padding row 0 in one,
//    scoring above everything): 1 + the sum of the shards' counts equals retrieval_rank on the
//    full table EXACTLY, in f32 and f64, with the targets scored from copies of their rows, rows
//    duplicated across shards (exact ties, broken by id), targets and duplicate entries and id 0
//    in the histories, strided queries, a query whose target score is NaN (every shard reports
//    the sentinel, the full rank is cap + 2), and a small rank cap (counts capped per shard);
//  - the whole table as one shard gives the full rank minus 1;
//  - unsorted shard ids, negative history ids, target 0 and a bad rank_cap raise hstu::Error.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/harness.h"
#include "ops/retrieval_rank.h"

namespace hstu::test {
namespace {

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = alloc(DType::kI32, {std::max<int64_t>(static_cast<int64_t>(v.size()), 1)});
  for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), v[i]);
  return t.rows(0, static_cast<int64_t>(v.size()));
}

// rows[ids[i]] of a [V, D] table as a new [n, D] tensor.
Tensor take_rows(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t d = table.dim(1), n = static_cast<int64_t>(ids.size());
  const Tensor out = alloc(table.dtype, {std::max<int64_t>(n, 1), d});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k)
      set(out, i * d + k, get(table, int64_t(ids[static_cast<size_t>(i)]) * d + k));
  return out.rows(0, n);
}

struct Problem {
  Tensor queries, items, targets, offsets, history;
  std::vector<int32_t> target_ids;
};

Problem make_problem(DType dt, int64_t u, int64_t v, int64_t d) {
  Problem p;
  p.items = alloc(dt, {v, d});
  fill_uniform(p.items, -1, 1);
  // Duplicated rows: each of items 10..39 copied to a random other id (ties across shards).
  std::uniform_int_distribution<int32_t> any(1, int32_t(v) - 1);
  for (int32_t i = 10; i < 40; ++i) {
    const int32_t to = any(rng());
    for (int64_t k = 0; k < d; ++k) set(p.items, to * d + k, get(p.items, i * d + k));
  }
  p.queries = alloc_strided(dt, u, d, 3);
  std::normal_distribution<double> noise(0, 1);
  std::uniform_int_distribution<int32_t> dup_src(10, 39);
  for (int64_t k = 0; k < u; ++k) {
    // Every third target is a duplicated row (an exact tie with its copy).
    const int32_t t = k % 3 == 0 ? dup_src(rng()) : any(rng());
    p.target_ids.push_back(t);
    const double spread = k % 2 == 0 ? 0.3 : 2.0;
    for (int64_t c = 0; c < d; ++c)
      set(p.queries, k * d + c, get(p.items, int64_t(t) * d + c) + spread * noise(rng()));
  }
  // Padding row 0 = query 0 scaled up: it would rank first for query 0 if it counted.
  for (int64_t c = 0; c < d; ++c) set(p.items, c, 4 * get(p.queries, c));
  // Query 5 is NaN: its target score is not finite.
  for (int64_t c = 0; c < d; ++c) set(p.queries, 5 * d + c, std::nan(""));
  std::vector<int32_t> offs{0}, ids;
  std::uniform_int_distribution<int32_t> item(0, int32_t(v) - 1), len(0, 25);
  for (int64_t k = 0; k < u; ++k) {
    for (int n = len(rng()); n > 0; --n) ids.push_back(item(rng()));
    if (k % 4 == 0) ids.push_back(p.target_ids[static_cast<size_t>(k)]);  // the target
    if (k % 5 == 0 && !ids.empty()) ids.push_back(ids.back());            // a duplicate entry
    if (k % 7 == 0) ids.push_back(0);                                     // padding
    offs.push_back(static_cast<int32_t>(ids.size()));
  }
  p.targets = i32(p.target_ids);
  p.offsets = i32(offs);
  p.history = i32(ids);
  return p;
}

TEST(RetrievalRankCountsCpu, ShardSumsEqualTheFullRank) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t u = 300, v = 1500, d = 12, w = 4;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Problem p = make_problem(dt, u, v, d);
    const Tensor target_rows = take_rows(p.items, p.target_ids);  // copies of the targets' rows
    // Deal the ids into w - 1 shards at random; shard w - 1 stays empty.
    std::vector<std::vector<int32_t>> shard_ids(static_cast<size_t>(w));
    std::uniform_int_distribution<int64_t> pick(0, w - 2);
    for (int32_t id = 0; id < v; ++id) shard_ids[static_cast<size_t>(pick(rng()))].push_back(id);
    for (const int32_t cap : {5000, 7}) {
      SCOPED_TRACE("rank_cap " + std::to_string(cap));
      const Tensor ranks = alloc(DType::kI32, {u});
      retrieval_rank(ctx, p.queries, p.items, p.targets, p.offsets, p.history, cap, ranks);
      EXPECT_EQ(get(ranks, 5), cap + 2);
      std::vector<int64_t> sum(static_cast<size_t>(u), 0);
      std::vector<int> nonfinite(static_cast<size_t>(u), 0);
      for (const std::vector<int32_t>& ids : shard_ids) {
        const Tensor counts = alloc(DType::kI32, {u});
        fill_value(counts, -7);
        retrieval_rank_counts(ctx, p.queries, target_rows, p.targets, take_rows(p.items, ids),
                              i32(ids), p.offsets, p.history, cap, counts);
        for (int64_t k = 0; k < u; ++k) {
          const int32_t c = int32_t(get(counts, k));
          if (c == kRankCountNonFinite) {
            ++nonfinite[static_cast<size_t>(k)];
            continue;
          }
          ASSERT_GE(c, 0) << "user " << k;
          ASSERT_LE(c, cap) << "user " << k;
          sum[static_cast<size_t>(k)] += c;
        }
      }
      int bad = 0;
      for (int64_t k = 0; k < u; ++k) {
        const int nf = nonfinite[static_cast<size_t>(k)];
        ASSERT_TRUE(nf == 0 || nf == w) << "user " << k << ": sentinel on " << nf << " shards";
        const int64_t want = nf ? cap + 2 : std::min<int64_t>(sum[static_cast<size_t>(k)], cap) + 1;
        if (want != int64_t(get(ranks, k)) && ++bad <= 5)
          ADD_FAILURE() << "user " << k << ": shards give " << want << ", full table "
                        << get(ranks, k);
      }
      EXPECT_EQ(bad, 0) << "seed " << test_seed();
    }
    // The whole table as one shard.
    std::vector<int32_t> all(static_cast<size_t>(v));
    for (int32_t i = 0; i < v; ++i) all[static_cast<size_t>(i)] = i;
    const Tensor ranks = alloc(DType::kI32, {u}), counts = alloc(DType::kI32, {u});
    retrieval_rank(ctx, p.queries, p.items, p.targets, p.offsets, p.history, 5000, ranks);
    retrieval_rank_counts(ctx, p.queries, target_rows, p.targets, p.items, i32(all), p.offsets,
                          p.history, 5000, counts);
    for (int64_t k = 0; k < u; ++k)
      if (k != 5) {
        ASSERT_EQ(get(counts, k) + 1, get(ranks, k)) << "user " << k;
      }
    EXPECT_EQ(get(counts, 5), kRankCountNonFinite);
  }
}

TEST(RetrievalRankCountsCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor q = alloc(DType::kF32, {2, 4}), rows = alloc(DType::kF32, {3, 4});
  fill_uniform(q, -1, 1);
  fill_uniform(rows, -1, 1);
  const Tensor counts = alloc(DType::kI32, {2});
  const Tensor off = i32({0, 1, 2}), hist = i32({1, 2}), tgt = i32({1, 2});
  EXPECT_NO_THROW(
      retrieval_rank_counts(ctx, q, q, tgt, rows, i32({0, 4, 9}), off, hist, 10, counts));
  EXPECT_THROW(retrieval_rank_counts(ctx, q, q, tgt, rows, i32({0, 9, 4}), off, hist, 10, counts),
               Error);  // shard ids not ascending
  EXPECT_THROW(retrieval_rank_counts(ctx, q, q, tgt, rows, i32({0, 4, 4}), off, hist, 10, counts),
               Error);  // repeated shard id
  EXPECT_THROW(retrieval_rank_counts(ctx, q, q, tgt, rows, i32({-1, 4, 9}), off, hist, 10, counts),
               Error);  // negative shard id
  EXPECT_THROW(
      retrieval_rank_counts(ctx, q, q, tgt, rows, i32({0, 4, 9}), off, i32({1, -2}), 10, counts),
      Error);  // negative history id
  EXPECT_THROW(
      retrieval_rank_counts(ctx, q, q, i32({0, 2}), rows, i32({0, 4, 9}), off, hist, 10, counts),
      Error);  // target 0 is padding
  EXPECT_THROW(
      retrieval_rank_counts(ctx, q, q, tgt, rows, i32({0, 4, 9}), off, hist, INT32_MAX, counts),
      Error);  // rank_cap
  EXPECT_THROW(retrieval_rank_counts(ctx, q, rows.rows(0, 1), tgt, rows, i32({0, 4, 9}), off, hist,
                                     10, counts),
               Error);  // target_rows shape
}

}  // namespace
}  // namespace hstu::test
