// test_dynamic_table.cpp — the CPU dynamic table against a std::unordered_map model under random
// operation sequences (insert, find, erase, eviction under each policy, growth), admission, the
// reserved key, the no-eviction overflow error and the per-key initial values.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <unordered_map>

#include "common/embed_test_util.h"
#include "core/error.h"
#include "embed/dynamic_table.h"
#include "embed/table_math.h"
#include "embed/table_ops.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;
using test::vec_tensor;

DynamicTableSpec small_spec(const std::string& eviction, int64_t cap, int64_t max_cap) {
  DynamicTableSpec s;
  s.name = "items";
  s.dim = 5;
  s.capacity_rows = cap;
  s.max_capacity_rows = max_cap;
  s.bucket_size = 4;
  s.max_load_factor = 0.75;
  s.eviction = eviction;
  s.optimizer = "sgd";
  s.lr = 0.5f;
  s.seed = 7;
  return s;
}

// The reference: a map of key -> (row, score, last step), with the table's bucket rule.
struct Model {
  struct Entry {
    std::vector<float> row;
    uint64_t score = 0;
    int64_t last = -1;
  };
  std::unordered_map<int64_t, Entry> m;
  int64_t evictions = 0, rejections = 0;

  // One step's find_or_insert at a fixed bucket count; returns which keys hold a row.
  std::vector<bool> step(const std::vector<int64_t>& unique, const std::vector<int32_t>& counts,
                         int64_t step, embed::Eviction ev, int64_t num_buckets, int bucket_size,
                         uint64_t seed, int64_t dim, float std) {
    std::vector<bool> has(unique.size());
    for (size_t i = 0; i < unique.size(); ++i) {  // touches first, as the table does
      auto it = m.find(unique[i]);
      if (it == m.end()) continue;
      has[i] = true;
      it->second.last = step;
      it->second.score =
          ev == embed::Eviction::kLfu ? it->second.score + counts[i] : static_cast<uint64_t>(step);
    }
    for (size_t i = 0; i < unique.size(); ++i) {
      if (has[i]) continue;
      const int64_t b = embed::bucket_of(unique[i], num_buckets);
      std::vector<int64_t> members;
      for (const auto& [k, e] : m)
        if (embed::bucket_of(k, num_buckets) == b) members.push_back(k);
      if (static_cast<int>(members.size()) >= bucket_size) {
        int64_t victim = embed::kEmptyKey;
        for (int64_t k : members) {
          const Entry& e = m[k];
          if (e.last == step) continue;
          if (victim == embed::kEmptyKey ||
              embed::evicts_before(e.score, k, m[victim].score, victim))
            victim = k;
        }
        if (victim == embed::kEmptyKey) {
          ++rejections;
          continue;
        }
        m.erase(victim);
        ++evictions;
      }
      Entry e;
      e.row.resize(static_cast<size_t>(dim));
      for (int64_t c = 0; c < dim; ++c) e.row[c] = embed::key_init_value(seed, unique[i], c, std);
      e.score = ev == embed::Eviction::kLfu ? static_cast<uint64_t>(counts[i])
                                            : static_cast<uint64_t>(step);
      e.last = step;
      m[unique[i]] = std::move(e);
      has[i] = true;
    }
    return has;
  }
};

// Unsigned arithmetic: keys span the whole int64 range, and key * 31 would overflow as signed.
float test_grad(int64_t key, int64_t c) {
  const uint64_t h = static_cast<uint64_t>(key) * 31u + static_cast<uint64_t>(c) * 7u;
  return static_cast<float>(static_cast<int64_t>(h % 17u) - 8) * 0.01f;
}

// Random steps of power-law keys with erases and read-only finds; the table's rows, sizes and
// eviction counts must equal the model's at every step.
// *evictions (optional) = the number of evictions seen.
void run_model_sequence(const std::string& eviction, int64_t cap, int64_t max_cap, uint32_t seed,
                        int steps, bool erase_some, int64_t* evictions = nullptr) {
  Ctx ctx = cpu_ctx();
  DynamicTable t(small_spec(eviction, cap, max_cap), Device::kCPU);
  Model model;
  std::mt19937_64 rng(seed);
  const auto ev = embed::parse_eviction(eviction, "items");
  const SparseOptimizerSpec opt = t.optimizer_spec(1, t.spec().lr);
  int64_t steps_done = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> keys;
    const int n = 10 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      int64_t k = static_cast<int64_t>(std::pow(400.0, u));  // power law on [1, 400)
      if (rng() % 5 == 0) k = -k * 1000003;                  // negative keys too
      if (rng() % 50 == 0) k = INT64_MAX - static_cast<int64_t>(rng() % 3);
      keys.push_back(k);
    }
    const int64_t cap_before = t.capacity();
    const test::EmbedStep st = test::embed_cpu_step(t, ctx, keys, s, opt, test_grad);
    ++steps_done;
    // Growth happens before the model's fixed-bucket step; only compare evictions at max capacity.
    const int64_t nb = t.capacity() / t.spec().bucket_size;
    ASSERT_TRUE(t.capacity() >= cap_before);
    const std::vector<bool> has = model.step(st.unique, st.counts, s, ev, nb, 4, t.table_seed(),
                                             t.spec().dim, static_cast<float>(t.spec().init_std));
    for (size_t i = 0; i < st.unique.size(); ++i) {
      ASSERT_EQ(st.refs[i] >= 0, has[i]) << "key " << st.unique[i] << " step " << s;
      const auto it = model.m.find(st.unique[i]);
      for (int64_t c = 0; c < t.spec().dim; ++c) {
        const float want = it != model.m.end()
                               ? it->second.row[c]
                               : embed::key_init_value(t.table_seed(), st.unique[i], c, 0.02f);
        ASSERT_EQ(st.rows[i * t.spec().dim + c], want) << "key " << st.unique[i] << " c " << c;
      }
      if (it != model.m.end())  // the same SGD update, double math as sparse_optimizer_step
        for (int64_t c = 0; c < t.spec().dim; ++c)
          it->second.row[c] = static_cast<float>(
              it->second.row[c] - static_cast<double>(opt.lr) * test_grad(st.unique[i], c));
    }
    ASSERT_EQ(t.size(), static_cast<int64_t>(model.m.size())) << "step " << s;
    ASSERT_EQ(t.counters().evictions, model.evictions);
    // Read-only finds of random keys, present or not.
    std::vector<int64_t> probe;
    for (int i = 0; i < 20; ++i) probe.push_back(static_cast<int64_t>(rng() % 500) - 50);
    std::vector<int64_t> refs(probe.size());
    t.find(ctx, vec_tensor(probe), vec_tensor(refs));
    for (size_t i = 0; i < probe.size(); ++i)
      ASSERT_EQ(refs[i] >= 0, model.m.count(probe[i]) == 1) << "probe " << probe[i];
    if (erase_some && s % 3 == 2) {
      std::vector<int64_t> gone;
      for (const auto& kv : model.m)
        if (rng() % 4 == 0) gone.push_back(kv.first);
      gone.push_back(123456789);  // absent
      ASSERT_EQ(t.erase(ctx, vec_tensor(gone)), static_cast<int64_t>(gone.size()) - 1);
      for (int64_t k : gone) model.m.erase(k);
    }
  }
  // Every key of the model, exported, with its row.
  const embed::TableRows rows = t.export_rows(ctx);
  ASSERT_EQ(rows.keys.size(), model.m.size());
  for (size_t i = 0; i < rows.keys.size(); ++i) {
    const auto& e = model.m.at(rows.keys[i]);
    for (int64_t c = 0; c < t.spec().dim; ++c)
      ASSERT_EQ(rows.values[i * t.row_width() + c], e.row[c]);
    ASSERT_EQ(rows.scores[i], e.score);
  }
  EXPECT_EQ(steps_done, steps);
  if (evictions) *evictions = model.evictions;
}

// A sharded table's rank holds the keys with fmix64(key) mod W == rank (dist::key_owner's hash
// owner, = key_hash here); their buckets must still spread over the whole table, not the 1 / W
// of them whose index shares those low bits.
TEST(DynamicTable, BucketsAreIndependentOfTheHashOwner) {
  constexpr int64_t kBuckets = 64;
  for (const uint64_t w : {2u, 4u, 8u}) {
    std::vector<int64_t> load(kBuckets, 0);
    int64_t n = 0;
    for (int64_t k = 0; k < 40000; ++k) {
      if (embed::key_hash(k) % w != 0) continue;  // the keys rank 0 owns
      ++load[static_cast<size_t>(embed::bucket_of(k, kBuckets))];
      ++n;
    }
    const double mean = static_cast<double>(n) / kBuckets;
    for (int64_t b = 0; b < kBuckets; ++b) {
      EXPECT_GT(load[static_cast<size_t>(b)], 0.7 * mean) << "bucket " << b << ", W = " << w;
      EXPECT_LT(load[static_cast<size_t>(b)], 1.3 * mean) << "bucket " << b << ", W = " << w;
    }
  }
}

TEST(DynamicTable, LruMatchesModel) {
  int64_t evictions = 0;
  run_model_sequence("lru", 64, 64, 1, 60, true, &evictions);
  EXPECT_GT(evictions, 0);
}
TEST(DynamicTable, LfuMatchesModel) {
  int64_t evictions = 0;
  run_model_sequence("lfu", 64, 64, 2, 60, true, &evictions);
  EXPECT_GT(evictions, 0);
}
TEST(DynamicTable, LruEvictsUnderPressure) {
  Ctx ctx = cpu_ctx();
  // A table of 16 rows for keys from 400: evictions must happen, and the model agrees.
  run_model_sequence("lru", 16, 16, 3, 40, false);
  DynamicTable t(small_spec("lru", 16, 16), Device::kCPU);
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> keys;  // a new key set each step: the old keys are evicted
    for (int64_t k = 1; k <= 200; ++k) keys.push_back(k + 1000 * s);
    test::embed_cpu_step(t, ctx, keys, s, t.optimizer_spec(1, 0.1f), test_grad);
  }
  EXPECT_GT(t.counters().evictions, 0);
  EXPECT_GT(t.counters().rejections, 0);  // buckets full of this step's keys
  EXPECT_EQ(t.size(), t.capacity());
}

TEST(DynamicTable, GrowsByDoublingWithoutEviction) {
  // Eviction none and room to grow: the model needs no bucket rule (nothing is ever evicted).
  run_model_sequence("none", 8, 4096, 4, 50, true);
  Ctx ctx = cpu_ctx();
  DynamicTableSpec spec = small_spec("none", 8, 4096);
  spec.bucket_size = 32;
  DynamicTable t(spec, Device::kCPU);
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 1000; ++k) keys.push_back(k * 7919 - 3000);
  test::embed_cpu_step(t, ctx, keys, 0, t.optimizer_spec(1, 0.1f), test_grad);
  EXPECT_EQ(t.size(), 1000);
  EXPECT_GE(t.capacity(), 1024);
  EXPECT_GT(t.counters().grows, 0);
  EXPECT_LE(static_cast<double>(t.size()), 0.75 * static_cast<double>(t.capacity()) + 1e-9);
}

// Keys already present when a batch makes the table grow before inserting keep their rows: the
// slots found before the rehash are looked up again (they were stale, and read other rows).
TEST(DynamicTable, PresentKeysKeepTheirRowsWhenABatchGrowsTheTable) {
  Ctx ctx = cpu_ctx();
  DynamicTableSpec spec = small_spec("none", 256, 4096);
  spec.bucket_size = 32;  // 8 buckets: the first batch fits without growing
  DynamicTable t(spec, Device::kCPU);
  std::vector<int64_t> first, second;
  for (int64_t k = 0; k < 100; ++k) first.push_back(k * 7919 + 11);
  for (int64_t k = 0; k < 300; ++k) second.push_back(k * 7919 + 11);
  const SparseOptimizerSpec frozen = t.optimizer_spec(1, 0.0f);  // lr 0: rows stay initial
  test::embed_cpu_step(t, ctx, first, 0, frozen, test_grad);
  ASSERT_EQ(t.counters().grows, 0);
  const test::EmbedStep s = test::embed_cpu_step(t, ctx, second, 1, frozen, test_grad);
  ASSERT_GT(t.counters().grows, 0);
  ASSERT_EQ(t.size(), 300);
  for (size_t i = 0; i < s.unique.size(); ++i) {
    ASSERT_GE(s.refs[i], 0);
    for (int64_t c = 0; c < 5; ++c)
      ASSERT_EQ(s.rows[i * 5 + c], embed::key_init_value(t.table_seed(), s.unique[i], c, 0.02f))
          << "key " << s.unique[i] << " column " << c;
  }
}

// dedupe_tables gives each table what its own dedupe gives (tables sharing keys included).
TEST(DynamicTable, DedupeTablesEqualsPerTableDedupe) {
  Ctx ctx = cpu_ctx();
  std::vector<std::unique_ptr<DynamicTable>> tables;
  std::vector<std::vector<int64_t>> keys(3), unique(3), u2(3);
  std::vector<std::vector<int32_t>> inverse(3), counts(3), i2(3), c2(3);
  std::mt19937_64 rng(4);
  std::vector<DynamicTable::DedupeCall> calls;
  for (int t = 0; t < 3; ++t) {
    DynamicTableSpec s = small_spec("lru", 64, 64);
    s.name = "t" + std::to_string(t);
    tables.push_back(std::make_unique<DynamicTable>(s, Device::kCPU));
    const size_t n = t == 1 ? 0 : 200 + 50 * t;  // an empty table among them
    for (size_t i = 0; i < n; ++i) keys[t].push_back(static_cast<int64_t>(rng() % 90) - 40);
    for (auto* v : {&unique[t], &u2[t]}) v->assign(n, 0);
    for (auto* v : {&inverse[t], &counts[t], &i2[t], &c2[t]}) v->assign(n, 0);
    calls.push_back({tables[t].get(), vec_tensor(keys[t]), vec_tensor(unique[t]),
                     vec_tensor(inverse[t]), vec_tensor(counts[t]), -1});
  }
  DynamicTable::dedupe_tables(ctx, calls);
  for (int t = 0; t < 3; ++t) {
    const int64_t u = tables[t]->dedupe(ctx, vec_tensor(keys[t]), vec_tensor(u2[t]),
                                        vec_tensor(i2[t]), vec_tensor(c2[t]));
    ASSERT_EQ(calls[t].u, u) << t;
    EXPECT_EQ(unique[t], u2[t]);
    EXPECT_EQ(inverse[t], i2[t]);
    EXPECT_EQ(std::vector<int32_t>(counts[t].begin(), counts[t].begin() + u),
              std::vector<int32_t>(c2[t].begin(), c2[t].begin() + u));
  }
  calls.push_back(calls[0]);
  EXPECT_THROW(DynamicTable::dedupe_tables(ctx, calls), Error);  // a table twice
}

TEST(DynamicTable, NoEvictionOverflowNamesTableAndCapacity) {
  Ctx ctx = cpu_ctx();
  DynamicTable t(small_spec("none", 16, 32), Device::kCPU);
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 100; ++k) keys.push_back(k);
  try {
    test::embed_cpu_step(t, ctx, keys, 0, t.optimizer_spec(1, 0.1f), test_grad);
    FAIL() << "expected an overflow error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'items'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("capacity 32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("eviction = none"), std::string::npos) << msg;
  }
}

TEST(DynamicTable, ReservedKeyIsRejected) {
  Ctx ctx = cpu_ctx();
  DynamicTable t(small_spec("lru", 64, 64), Device::kCPU);
  std::vector<int64_t> keys = {3, embed::kEmptyKey, 5};
  std::vector<int64_t> u(3);
  std::vector<int32_t> inv(3), cnt(3);
  EXPECT_THROW(t.dedupe(ctx, vec_tensor(keys), vec_tensor(u), vec_tensor(inv), vec_tensor(cnt)),
               Error);
  EXPECT_THROW(t.import_rows(ctx, {embed::kEmptyKey}, std::vector<float>(5), 5), Error);
}

TEST(DynamicTable, DedupeReturnsSortedUniqueInverseAndCounts) {
  Ctx ctx = cpu_ctx();
  DynamicTable t(small_spec("lru", 64, 64), Device::kCPU);
  std::vector<int64_t> keys = {9, -4, 9, 0, -4, 9, INT64_MAX};
  std::vector<int64_t> u(keys.size());
  std::vector<int32_t> inv(keys.size()), cnt(keys.size());
  const int64_t n =
      t.dedupe(ctx, vec_tensor(keys), vec_tensor(u), vec_tensor(inv), vec_tensor(cnt));
  ASSERT_EQ(n, 4);
  EXPECT_EQ(std::vector<int64_t>(u.begin(), u.begin() + 4),
            (std::vector<int64_t>{-4, 0, 9, INT64_MAX}));
  EXPECT_EQ(std::vector<int32_t>(cnt.begin(), cnt.begin() + 4), (std::vector<int32_t>{2, 1, 3, 1}));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(u[inv[i]], keys[i]);
}

// dedupe's saved order (i32 [3n]): positions in (key, position) order, each unique key's
// segment end, and the unique key of each sorted entry.
TEST(DynamicTable, DedupeOrderHasPositionsSegmentEndsAndEntryKeys) {
  Ctx ctx = cpu_ctx();
  const std::vector<int64_t> keys = {9, -4, 9, 0, -4, 9, INT64_MAX};
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int64_t> u(n);
  std::vector<int32_t> inv(n), cnt(n), order(3 * n, -1);
  int64_t first = 0;
  ASSERT_EQ(
      embed::dedupe(ctx, keys.data(), n, u.data(), inv.data(), cnt.data(), &first, order.data()),
      4);
  EXPECT_EQ(first, -4);
  EXPECT_EQ(std::vector<int32_t>(order.begin(), order.begin() + n),
            (std::vector<int32_t>{1, 4, 3, 0, 2, 5, 6}));
  EXPECT_EQ(std::vector<int32_t>(order.begin() + n, order.begin() + n + 4),
            (std::vector<int32_t>{2, 3, 6, 7}));
  EXPECT_EQ(std::vector<int32_t>(order.begin() + 2 * n, order.end()),
            (std::vector<int32_t>{0, 0, 1, 2, 2, 2, 3}));
}

TEST(DynamicTable, AdmissionThreshold) {
  Ctx ctx = cpu_ctx();
  DynamicTableSpec s = small_spec("lru", 256, 256);
  s.admit_threshold = 3;
  DynamicTable t(s, Device::kCPU);
  const SparseOptimizerSpec opt = t.optimizer_spec(1, 0.5f);
  // Key 10 seen once per step: admitted at its third sighting; key 20 twice in one batch, then
  // once: admitted at the second step; key 30 once only: never.
  test::EmbedStep a = test::embed_cpu_step(t, ctx, {10, 20, 20, 30}, 0, opt, test_grad);
  EXPECT_EQ(a.refs, (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(t.size(), 0);
  EXPECT_EQ(t.counters().rejections, 3);
  // Not admitted: the initial value, and the gradient was dropped (nothing stored).
  for (int64_t c = 0; c < s.dim; ++c)
    EXPECT_EQ(a.rows[c], embed::key_init_value(t.table_seed(), 10, c, 0.02f));
  test::EmbedStep b = test::embed_cpu_step(t, ctx, {10, 20}, 1, opt, test_grad);
  EXPECT_LT(b.refs[0], 0);
  EXPECT_GE(b.refs[1], 0);
  // Its first row is the initial value: the rejected step's gradient did not touch it.
  for (int64_t c = 0; c < s.dim; ++c)
    EXPECT_EQ(b.rows[s.dim + c], embed::key_init_value(t.table_seed(), 20, c, 0.02f));
  test::EmbedStep c3 = test::embed_cpu_step(t, ctx, {10}, 2, opt, test_grad);
  EXPECT_GE(c3.refs[0], 0);
  EXPECT_EQ(t.size(), 2);
  EXPECT_EQ(t.counters().inserts, 2);
  // Eval reads of a key never admitted: zeros.
  std::vector<int64_t> k = {30}, r(1);
  std::vector<float> out(static_cast<size_t>(s.dim), 1.0f);
  t.find(ctx, vec_tensor(k), vec_tensor(r));
  EXPECT_EQ(r[0], -1);
  t.gather(ctx, vec_tensor(k), vec_tensor(r), Tensor(out.data(), DType::kF32, Device::kCPU, {1, 5}),
           false);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(DynamicTable, InitialValuesDependOnlyOnSeedNameAndKey) {
  Ctx ctx = cpu_ctx();
  DynamicTableSpec s = small_spec("lru", 4096, 4096);
  s.dim = 64;
  DynamicTable a(s, Device::kCPU), b(s, Device::kCPU);
  std::vector<int64_t> ka, kb;
  for (int64_t k = 0; k < 500; ++k) ka.push_back(k * 1000003 - 77);
  kb = ka;
  std::reverse(kb.begin(), kb.end());
  kb.resize(300);  // another order and subset
  const SparseOptimizerSpec none = a.optimizer_spec(1, 0.0f);
  test::EmbedStep ra = test::embed_cpu_step(a, ctx, ka, 0, none, test_grad);
  test::EmbedStep rb = test::embed_cpu_step(b, ctx, kb, 0, none, test_grad);
  std::map<int64_t, std::vector<float>> rows;
  for (size_t i = 0; i < ra.unique.size(); ++i)
    rows[ra.unique[i]].assign(ra.rows.begin() + i * 64, ra.rows.begin() + (i + 1) * 64);
  double sum = 0, sq = 0, mx = 0;
  for (size_t i = 0; i < rb.unique.size(); ++i)
    for (int64_t c = 0; c < 64; ++c) {
      const float v = rb.rows[i * 64 + c];
      ASSERT_EQ(v, rows.at(rb.unique[i])[c]);
      sum += v, sq += double(v) * v, mx = std::max(mx, std::abs(double(v)));
    }
  const double n = 300.0 * 64, mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02 * 0.88, 0.002);  // std of N(0,1) truncated at +-2 is 0.880
  EXPECT_LE(mx, 0.04 + 1e-6);
  s.name = "users";  // another table: other values
  DynamicTable c(s, Device::kCPU);
  test::EmbedStep rc = test::embed_cpu_step(c, ctx, {ka[0]}, 0, none, test_grad);
  EXPECT_NE(rc.rows[0], rows.at(ka[0])[0]);
}

}  // namespace
}  // namespace hstu
