// test_host_tier.cpp — the host tier (a store with every row and a small device cache) gives the
// same rows, step after step, as the table without a tier, with misses, write-backs of changed
// rows, store evictions and prefetches exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/embed_test_util.h"
#include "embed/dynamic_table.h"

namespace hstu {
namespace {

using test::vec_tensor;

embed::DynamicTableSpec tier_spec(int64_t cache_rows, const std::string& eviction,
                                  int64_t max_cap) {
  embed::DynamicTableSpec s;
  s.name = "items";
  s.dim = 6;
  s.capacity_rows = 64;
  s.max_capacity_rows = max_cap;
  s.bucket_size = 8;
  s.eviction = eviction;
  s.optimizer = "adam";
  s.lr = 0.01f;
  s.gpu_cache_rows = cache_rows;
  return s;
}

float grad_of(int64_t key, int64_t c) {
  return std::sin(0.1f * static_cast<float>(key + 3 * c));
}

void compare_tiers(const std::string& eviction, int64_t max_cap, bool prefetch) {
  Ctx ctx = cpu_ctx();
  embed::DynamicTable flat(tier_spec(0, eviction, max_cap), Device::kCPU);
  embed::DynamicTable tier(tier_spec(32, eviction, max_cap), Device::kCPU);
  ASSERT_TRUE(tier.tiered());
  ASSERT_FALSE(flat.tiered());
  std::mt19937_64 rng(5);
  auto batch = [&](int s) {
    std::mt19937_64 r(1000 + s);
    std::vector<int64_t> keys;
    for (int i = 0; i < 24; ++i) {
      const double u = std::uniform_real_distribution<double>(0, 1)(r);
      keys.push_back(static_cast<int64_t>(std::pow(300.0, u)) * 7 - 11);
    }
    return keys;
  };
  for (int s = 0; s < 40; ++s) {
    const std::vector<int64_t> keys = batch(s);
    const SparseOptimizerSpec opt = flat.optimizer_spec(s + 1, 0.01f);
    auto touched = [&](int64_t k) { return (k + s) % 5 != 0; };  // some rows get no gradient
    const test::EmbedStep a = test::embed_cpu_step(flat, ctx, keys, s, opt, grad_of, touched);
    const test::EmbedStep b = test::embed_cpu_step(tier, ctx, keys, s, opt, grad_of, touched);
    ASSERT_EQ(a.unique, b.unique);
    ASSERT_EQ(a.rows, b.rows) << "step " << s;
    for (size_t i = 0; i < a.refs.size(); ++i) ASSERT_EQ(a.refs[i] >= 0, b.refs[i] >= 0);
    if (prefetch) {  // the next batch's keys, as the training loop would while this step runs
      std::vector<int64_t> next = batch(s + 1), u(next.size());
      std::vector<int32_t> inv(next.size()), cnt(next.size());
      const int64_t n =
          tier.dedupe(ctx, vec_tensor(next), vec_tensor(u), vec_tensor(inv), vec_tensor(cnt));
      u.resize(static_cast<size_t>(n));
      tier.prefetch(ctx, vec_tensor(u));
    }
    (void)rng;
  }
  const embed::DynamicTableCounters c = tier.counters();
  EXPECT_GT(c.cache_misses, 0);
  EXPECT_GT(c.cache_evictions, 0);  // the cache (32 rows) is far smaller than the key set
  EXPECT_EQ(c.size, flat.counters().size);
  EXPECT_EQ(c.evictions, flat.counters().evictions);
  const embed::TableRows ra = flat.export_rows(ctx), rb = tier.export_rows(ctx);
  auto sorted = [](const embed::TableRows& r, int64_t w) {
    std::vector<std::pair<int64_t, std::vector<float>>> v;
    for (size_t i = 0; i < r.keys.size(); ++i)
      v.emplace_back(r.keys[i],
                     std::vector<float>(r.values.begin() + i * w, r.values.begin() + (i + 1) * w));
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(ra, flat.row_width()), sorted(rb, tier.row_width()));
  // Read-only lookups through the tier see the newest rows too.
  std::vector<int64_t> keys = batch(7), u(keys.size()), refs(keys.size());
  std::vector<int32_t> inv(keys.size()), cnt(keys.size());
  const int64_t n =
      flat.dedupe(ctx, vec_tensor(keys), vec_tensor(u), vec_tensor(inv), vec_tensor(cnt));
  u.resize(static_cast<size_t>(n));
  refs.resize(static_cast<size_t>(n));
  std::vector<float> oa(static_cast<size_t>(n * 6)), ob(oa.size());
  flat.find(ctx, vec_tensor(u), vec_tensor(refs));
  flat.gather(ctx, vec_tensor(u), vec_tensor(refs),
              Tensor(oa.data(), DType::kF32, Device::kCPU, {n, 6}), false);
  tier.find(ctx, vec_tensor(u), vec_tensor(refs));
  tier.gather(ctx, vec_tensor(u), vec_tensor(refs),
              Tensor(ob.data(), DType::kF32, Device::kCPU, {n, 6}), false);
  EXPECT_EQ(oa, ob);
  // The key set and its rows on the device (full-catalogue evaluation), through either table.
  for (embed::DynamicTable* t : {&flat, &tier}) {
    std::vector<int64_t> all(static_cast<size_t>(t->size())), all_refs(all.size());
    ASSERT_EQ(t->list_keys(ctx, vec_tensor(all), vec_tensor(all_refs)), t->size());
    const int64_t m = t->size();
    std::vector<float> rows(static_cast<size_t>(m * 6));
    t->gather(ctx, vec_tensor(all), vec_tensor(all_refs),
              Tensor(rows.data(), DType::kF32, Device::kCPU, {m, 6}), false);
    std::vector<std::pair<int64_t, std::vector<float>>> got;
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_GE(all_refs[i], 0);
      got.emplace_back(all[i], std::vector<float>(rows.begin() + i * 6, rows.begin() + i * 6 + 6));
    }
    std::sort(got.begin(), got.end());
    const auto want = sorted(ra, flat.row_width());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      ASSERT_EQ(got[i].second,
                std::vector<float>(want[i].second.begin(), want[i].second.begin() + 6));
    }
  }
}

TEST(HostTier, EqualsAllInMemoryTable) {
  compare_tiers("none", 4096, false);
}
TEST(HostTier, EqualsAllInMemoryTableWithStoreEviction) {
  compare_tiers("lru", 256, false);
}
TEST(HostTier, EqualsAllInMemoryTableWithPrefetch) {
  compare_tiers("lfu", 256, true);
}

}  // namespace
}  // namespace hstu
