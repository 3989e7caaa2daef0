// test_gpu_dynamic_table_dedupe.cpp — the CUDA dedupe's hash path (embed/cuda/hash_dedupe.h)
// against the CPU reference, output for output (unique keys, inverse, counts, the saved order:
// positions by (key, position), segment ends, each entry's key), on the key sets that reach each
// of its branches: bench-like 63-bit keys with hot keys (segments sorted by one block), the
// set's own empty pattern and the extreme keys, clustered keys (buckets ranked by a warp), one
// lookup, and a key set whose bucket is too large (the sort path runs instead, same results).
// hash_dedupe_fallbacks() tells which path ran.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dedupe_check.h"
#include "common/gpu_harness.h"
#include "embed/cuda/hash_dedupe.h"
#include "embed/table_math.h"
#include "embed/table_ops.h"

namespace hstu {
namespace {

using test::gpu::DevVec;

// Power law over `rows` ids scrambled into 63-bit keys (the bench's draw).
std::vector<int64_t> scrambled_keys(std::mt19937_64& rng, int64_t n, int64_t rows, int salt) {
  std::vector<int64_t> k(static_cast<size_t>(n));
  const double a1 = 1.0 - 1.05, top = std::pow(static_cast<double>(rows), a1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& x : k) {
    const double v = std::pow((top - 1.0) * u(rng) + 1.0, 1.0 / a1);
    const int64_t id = std::min<int64_t>(rows, static_cast<int64_t>(v));
    x = static_cast<int64_t>(embed::key_hash(id * 16 + salt) >> 1);
  }
  return k;
}

TEST(GpuDynamicTableDedupe, HashPathMatchesCpuOnBenchLikeKeysWithHotKeys) {
  HSTU_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  // Hot keys hold thousands of lookups (segments sorted through the position bitmap); a job of
  // one lookup; a job sharing another's keys.
  std::vector<std::vector<int64_t>> keys = {
      scrambled_keys(rng, 60000, 1680000, 0), scrambled_keys(rng, 104857, 1680000, 1), {12345}, {}};
  keys[3] = keys[0];
  EXPECT_EQ(test::expect_dedupe_matches_cpu(keys, "bench-like").fallbacks, 0)
      << "the hash path declined";
}

TEST(GpuDynamicTableDedupe, HashPathMatchesCpuOnExtremeKeys) {
  HSTU_REQUIRE_GPU();
  std::mt19937_64 rng(32);
  const int64_t pattern = static_cast<int64_t>(0x8080808080808080ull);  // the set's empty slot
  const std::vector<int64_t> edge = {INT64_MAX, INT64_MIN, INT64_MIN + 1, 0,
                                     -1,        pattern,   pattern + 1,   pattern - 1};
  std::vector<int64_t> a;
  for (int i = 0; i < 5000; ++i)
    a.push_back(rng() % 3 == 0 ? edge[rng() % edge.size()] : static_cast<int64_t>(rng()));
  std::vector<int64_t> b(100, pattern);  // one key, 100 lookups: one hot segment
  b.push_back(7);
  EXPECT_EQ(test::expect_dedupe_matches_cpu({a, b, {pattern}}, "extreme keys").fallbacks, 0)
      << "the hash path declined";
}

TEST(GpuDynamicTableDedupe, ClusteredKeysRankedByAWarpMatchCpu) {
  HSTU_REQUIRE_GPU();
  std::mt19937_64 rng(33);
  // 700 distinct small keys and one far key: the small ones share the job's first bucket.
  std::vector<int64_t> a;
  for (int i = 0; i < 3000; ++i) a.push_back(static_cast<int64_t>(rng() % 700));
  a.push_back(int64_t{1} << 40);
  // Two clusters at the ends of the key space.
  std::vector<int64_t> b;
  for (int i = 0; i < 2000; ++i)
    b.push_back(i % 2 ? INT64_MIN + static_cast<int64_t>(rng() % 300)
                      : INT64_MAX - static_cast<int64_t>(rng() % 300));
  EXPECT_EQ(test::expect_dedupe_matches_cpu({a, b}, "clustered keys").fallbacks, 0)
      << "the hash path declined";
}

TEST(GpuDynamicTableDedupe, OversizedBucketFallsBackToTheSortWithTheSameResults) {
  HSTU_REQUIRE_GPU();
  std::vector<int64_t> a;
  for (int64_t i = 0; i < 3000; ++i) a.push_back(i * 7 % 3000);  // 3000 keys in one bucket
  a.push_back(INT64_MAX);
  EXPECT_EQ(test::expect_dedupe_matches_cpu({a, {1, 2, 1}}, "oversized bucket").fallbacks, 1);
}

// The one-table dedupe (embed::dedupe) goes through the same path, with and without the order.
TEST(GpuDynamicTableDedupe, OneTableDedupeMatchesCpuWithAndWithoutOrder) {
  HSTU_REQUIRE_GPU();
  std::mt19937_64 rng(34);
  const std::vector<int64_t> keys = scrambled_keys(rng, 20000, 50000, 3);
  const int64_t n = static_cast<int64_t>(keys.size());
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  std::vector<int64_t> cu(n);
  std::vector<int32_t> ci(n), cc(n), co(3 * n);
  int64_t cfirst = 0;
  const int64_t u =
      embed::dedupe(cctx, keys.data(), n, cu.data(), ci.data(), cc.data(), &cfirst, co.data());
  for (const bool with_order : {true, false}) {
    DevVec<int64_t> dk(keys), du(n);
    DevVec<int32_t> di(n), dc(n), dord(3 * n);
    int64_t gfirst = 0;
    const int64_t before = embed::cuda::hash_dedupe_fallbacks();
    ASSERT_EQ(
        embed::dedupe(gctx, dk.p, n, du.p, di.p, dc.p, &gfirst, with_order ? dord.p : nullptr), u);
    EXPECT_EQ(embed::cuda::hash_dedupe_fallbacks(), before);
    EXPECT_EQ(gfirst, cfirst);
    EXPECT_EQ(du.host(u), std::vector<int64_t>(cu.begin(), cu.begin() + u));
    EXPECT_EQ(di.host(), ci);
    EXPECT_EQ(dc.host(u), std::vector<int32_t>(cc.begin(), cc.begin() + u));
    if (!with_order) continue;
    const std::vector<int32_t> go = dord.host();
    EXPECT_EQ(std::vector<int32_t>(go.begin(), go.begin() + n),
              std::vector<int32_t>(co.begin(), co.begin() + n));
    EXPECT_EQ(std::vector<int32_t>(go.begin() + n, go.begin() + n + u),
              std::vector<int32_t>(co.begin() + n, co.begin() + n + u));
    EXPECT_EQ(std::vector<int32_t>(go.begin() + 2 * n, go.end()),
              std::vector<int32_t>(co.begin() + 2 * n, co.end()));
  }
}

}  // namespace
}  // namespace hstu
