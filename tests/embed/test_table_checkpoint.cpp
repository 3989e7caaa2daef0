// test_table_checkpoint.cpp — save / load of dynamic tables: an exact round trip (keys, rows,
// optimiser state, scores, and the next step bit for bit), loads into another capacity, filtered
// loads that reshard keys over ranks, and errors naming the file and field.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "common/embed_test_util.h"
#include "common/test_util.h"
#include "core/error.h"
#include "embed/table_checkpoint.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;

DynamicTableSpec ckpt_spec(int64_t cap, int64_t max_cap) {
  DynamicTableSpec s;
  s.name = "items";
  s.dim = 8;
  s.capacity_rows = cap;
  s.max_capacity_rows = max_cap;
  s.eviction = "lfu";
  s.optimizer = "adam";
  s.lr = 0.01f;
  return s;
}

float g(int64_t key, int64_t c) {
  return 0.01f * static_cast<float>((key * 13 + c) % 23 - 11);
}

std::vector<int64_t> batch(int s) {
  std::mt19937_64 r(100 + s);
  std::vector<int64_t> k;
  for (int i = 0; i < 60; ++i) k.push_back(static_cast<int64_t>(r() % 500) - 250);
  return k;
}

// key -> (row, score)
std::map<int64_t, std::pair<std::vector<float>, uint64_t>> by_key(DynamicTable& t, Ctx& ctx) {
  const embed::TableRows r = t.export_rows(ctx);
  std::map<int64_t, std::pair<std::vector<float>, uint64_t>> m;
  const int64_t w = t.row_width();
  for (size_t i = 0; i < r.keys.size(); ++i)
    m[r.keys[i]] = {std::vector<float>(r.values.begin() + i * w, r.values.begin() + (i + 1) * w),
                    r.scores[i]};
  return m;
}

TEST(DynamicTableCheckpoint, RoundTripIsExactAndTheNextStepToo) {
  Ctx ctx = cpu_ctx();
  test::TempDir dir;
  DynamicTable a(ckpt_spec(1024, 1024), Device::kCPU);
  for (int s = 0; s < 6; ++s)
    test::embed_cpu_step(a, ctx, batch(s), s, a.optimizer_spec(s + 1, 0.01f), g);
  const std::string path = embed::save_dynamic_table(ctx, a, dir.path());
  EXPECT_TRUE(std::filesystem::exists(path));
  // The same capacity, and a small one that must grow.
  for (const auto& [cap, max_cap] : {std::pair<int64_t, int64_t>{1024, 1024}, {64, 8192}}) {
    DynamicTable b(ckpt_spec(cap, max_cap), Device::kCPU);
    EXPECT_EQ(embed::load_dynamic_table(ctx, b, dir.path()), a.size());
    EXPECT_EQ(b.step(), a.step());
    ASSERT_EQ(by_key(a, ctx), by_key(b, ctx)) << "capacity " << cap;
    // Every find agrees, and the next optimiser step is bitwise equal.
    DynamicTable c(ckpt_spec(1024, 1024), Device::kCPU);
    embed::load_dynamic_table(ctx, c, dir.path());
    const test::EmbedStep x =
        test::embed_cpu_step(c, ctx, batch(6), 6, c.optimizer_spec(7, 0.01f), g);
    const test::EmbedStep y =
        test::embed_cpu_step(b, ctx, batch(6), 6, b.optimizer_spec(7, 0.01f), g);
    ASSERT_EQ(x.rows, y.rows);
    for (size_t i = 0; i < x.refs.size(); ++i) ASSERT_EQ(x.refs[i] >= 0, y.refs[i] >= 0);
    ASSERT_EQ(by_key(b, ctx), by_key(c, ctx));
  }
  // The original, stepped the same way, equals the loaded copies.
  DynamicTable d(ckpt_spec(1024, 1024), Device::kCPU);
  embed::load_dynamic_table(ctx, d, dir.path());
  test::embed_cpu_step(a, ctx, batch(6), 6, a.optimizer_spec(7, 0.01f), g);
  test::embed_cpu_step(d, ctx, batch(6), 6, d.optimizer_spec(7, 0.01f), g);
  EXPECT_EQ(by_key(a, ctx), by_key(d, ctx));
}

TEST(DynamicTableCheckpoint, FilteredLoadsReshardOverRanks) {
  Ctx ctx = cpu_ctx();
  test::TempDir dir;
  DynamicTable a(ckpt_spec(1024, 1024), Device::kCPU);
  for (int s = 0; s < 4; ++s)
    test::embed_cpu_step(a, ctx, batch(s), s, a.optimizer_spec(s + 1, 0.01f), g);
  embed::save_dynamic_table(ctx, a, dir.path());
  const auto all = by_key(a, ctx);
  constexpr int kWorld = 3;  // modulo owner over 3 ranks (negative keys included)
  std::map<int64_t, std::pair<std::vector<float>, uint64_t>> joined;
  for (int rank = 0; rank < kWorld; ++rank) {
    DynamicTable r(ckpt_spec(256, 1024), Device::kCPU);
    auto owner = [](int64_t k) { return static_cast<int>(((k % kWorld) + kWorld) % kWorld); };
    embed::load_dynamic_table(ctx, r, dir.path(), [&](int64_t k) { return owner(k) == rank; });
    for (const auto& [k, v] : by_key(r, ctx)) {
      ASSERT_EQ(owner(k), rank);
      joined[k] = v;
    }
  }
  EXPECT_EQ(joined, all);
}

TEST(DynamicTableCheckpoint, MismatchesNameTheFileAndField) {
  Ctx ctx = cpu_ctx();
  test::TempDir dir;
  DynamicTable a(ckpt_spec(256, 256), Device::kCPU);
  test::embed_cpu_step(a, ctx, batch(0), 0, a.optimizer_spec(1, 0.01f), g);
  embed::save_dynamic_table(ctx, a, dir.path());
  DynamicTableSpec s = ckpt_spec(256, 256);
  s.optimizer = "sgd";
  DynamicTable b(s, Device::kCPU);
  try {
    embed::load_dynamic_table(ctx, b, dir.path());
    FAIL() << "expected an optimizer mismatch";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("items.dynamic.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("optimizer"), std::string::npos) << m;
  }
  s = ckpt_spec(256, 256);
  s.dim = 4;
  DynamicTable c(s, Device::kCPU);
  EXPECT_THROW(embed::load_dynamic_table(ctx, c, dir.path()), Error);
  s = ckpt_spec(256, 256);
  s.name = "absent";
  DynamicTable d(s, Device::kCPU);
  EXPECT_THROW(embed::load_dynamic_table(ctx, d, dir.path()), Error);
}

}  // namespace
}  // namespace hstu
