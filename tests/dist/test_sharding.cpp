// test_sharding.cpp — the sharded embedding table in one process: owner functions and shard
// sizes, id deduplication against a brute-force std::map, and ShardedTable on a 1-rank local
// communicator, which must equal the single-process table bit for bit (fetch, gradients,
// sparse optimiser), plus its checkpoints (save, load, reshard, full <-> shard, damaged files).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "common/shard_test_util.h"
#include "common/test_util.h"
#include "dist/comm.h"
#include "dist/shard_checkpoint.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "io/json.h"
#include "io/safetensors.h"

namespace hstu::dist {
namespace {

using test::make_full_table;
using test::random_grads;
using test::random_ids;
using test::row_of;
using test::same_row;

TEST(Sharding, Murmur3Fmix64KnownValues) {
  // Values of the MurmurHash3 finaliser computed independently (Python, 64-bit arithmetic).
  EXPECT_EQ(murmur3_fmix64(0), 0u);
  EXPECT_EQ(murmur3_fmix64(1), 0xb456bcfc34c2cb2cull);
  EXPECT_EQ(murmur3_fmix64(2), 0x3abf2a20650683e7ull);
  EXPECT_EQ(murmur3_fmix64(12345), 0x17d2abfbf90baef9ull);
  const RowSharding h(20000, 4, OwnerKind::kHash);
  EXPECT_EQ(h.owner(1), 0);  // 0x...2c % 4
  EXPECT_EQ(h.owner(2), 3);
  EXPECT_EQ(h.owner(12345), 1);
}

TEST(Sharding, EveryIdHasOneOwnerAndOneLocalRow) {
  for (const OwnerKind kind : {OwnerKind::kModulo, OwnerKind::kHash})
    for (const int64_t v : {1, 2, 7, 100, 1001})
      for (const int w : {1, 2, 3, 4, 8}) {
        SCOPED_TRACE(std::string(owner_name(kind)) + " V=" + std::to_string(v) +
                     " W=" + std::to_string(w));
        const RowSharding s(v, w, kind);
        std::set<std::pair<int, int64_t>> slots;
        int64_t total = 0;
        for (int r = 0; r < w; ++r) total += s.shard_rows(r);
        EXPECT_EQ(total, v);
        for (int64_t id = 0; id < v; ++id) {
          const int o = s.owner(id);
          ASSERT_TRUE(o >= 0 && o < w);
          const int64_t l = s.local_row(id);
          ASSERT_TRUE(l >= 0 && l < s.shard_rows(o)) << "id " << id;
          EXPECT_TRUE(slots.insert({o, l}).second) << "slot taken twice, id " << id;
          if (kind == OwnerKind::kModulo) {
            EXPECT_EQ(o, id % w);
            EXPECT_EQ(l, id / w);
          } else {
            EXPECT_EQ(o, static_cast<int>(murmur3_fmix64(static_cast<uint64_t>(id)) % w));
          }
        }
        for (int r = 0; r < w; ++r) {
          const std::vector<int64_t> ids = s.owned_ids(r);
          ASSERT_EQ(static_cast<int64_t>(ids.size()), s.shard_rows(r));
          for (size_t j = 0; j < ids.size(); ++j) {
            EXPECT_EQ(s.owner(ids[j]), r);
            EXPECT_EQ(s.local_row(ids[j]), static_cast<int64_t>(j));  // ascending = local order
          }
        }
      }
}

TEST(Sharding, OwnerNamesAndErrors) {
  EXPECT_EQ(parse_owner("modulo"), OwnerKind::kModulo);
  EXPECT_EQ(parse_owner("hash"), OwnerKind::kHash);
  const std::string e = test::error_of([] { parse_owner("roundrobin", "EmbeddingArgs.owner"); });
  EXPECT_NE(e.find("EmbeddingArgs.owner"), std::string::npos) << e;
  EXPECT_NE(e.find("roundrobin"), std::string::npos) << e;
  EXPECT_NE(test::error_of([] { RowSharding(10, 0, OwnerKind::kModulo); }).find("world size"),
            std::string::npos);
}

// The plan's bytes are what EmbeddingTable::allocate really reserves.
TEST(Sharding, DescribeShardsMatchesRealAllocations) {
  for (const std::string opt : {"adam", "dense_adam", "row_wise_adagrad", "sgd"}) {
    const std::vector<ShardSize> shards = describe_shards(1003, 24, 4, opt, OwnerKind::kModulo, 50);
    ASSERT_EQ(shards.size(), 4u);
    int64_t rows = 0;
    for (const ShardSize& z : shards) {
      rows += z.rows;
      EmbeddingTable t;
      t.allocate("x", z.rows, 24, Device::kCPU, opt);
      EXPECT_EQ(z.table_bytes, static_cast<int64_t>(t.arena->capacity())) << opt;
      EXPECT_GT(z.window_bytes, 0);
    }
    EXPECT_EQ(rows, 1003);
    EXPECT_EQ(shards[0].rows, 251);
    EXPECT_EQ(shards[3].rows, 250);
  }
  const std::string text = format_shards(describe_shards(100, 8, 2, "adam", OwnerKind::kHash));
  EXPECT_NE(text.find("rank 1:"), std::string::npos) << text;
  EXPECT_EQ(text.find("window"), std::string::npos) << text;  // no max_unique, no window
}

TEST(IdDedup, MatchesBruteForceMap) {
  // V = 500: U is a large part of V (sorted by a scan of V); V = 100000: U is small (sorted).
  for (const int64_t v : {500, 100000}) {
    IdDeduper dd(v);
    for (uint32_t trial = 0; trial < 20; ++trial) {
      std::vector<int32_t> a = random_ids(7, trial, trial == 19 ? 150000 : 40 + trial * 13,
                                          v),  // 150000: the parallel remap
          b = random_ids(8, trial, trial * 50, trial % 2 ? 20 : v), c = random_ids(9, trial, 3, v);
      const std::vector<int32_t> a0 = a, b0 = b, c0 = c;
      std::map<int32_t, int32_t> ref{{0, 0}};  // id 0 always present
      for (const auto* s : {&a0, &b0, &c0})
        for (const int32_t id : *s) ref.emplace(id, 0);
      int32_t k = 0;
      for (auto& [id, index] : ref) index = k++;
      const std::span<int32_t> spans[] = {a, b, c};
      const std::span<const int32_t> u = dd.run(spans);
      ASSERT_EQ(u.size(), ref.size());
      size_t i = 0;
      for (const auto& [id, index] : ref) EXPECT_EQ(u[i++], id);
      for (size_t j = 0; j < a.size(); ++j) EXPECT_EQ(a[j], ref.at(a0[j]));
      for (size_t j = 0; j < b.size(); ++j) EXPECT_EQ(b[j], ref.at(b0[j]));
      for (size_t j = 0; j < c.size(); ++j) EXPECT_EQ(c[j], ref.at(c0[j]));
    }
  }
}

TEST(IdDedup, KeepsZeroFirstAndRejectsBadIds) {
  IdDeduper dd(10);
  std::vector<int32_t> a = {5, 3, 5, 9};
  std::span<int32_t> spans[] = {a};
  const std::span<const int32_t> us = dd.run(spans);
  const std::vector<int32_t> u(us.begin(), us.end());
  EXPECT_EQ(u, (std::vector<int32_t>{0, 3, 5, 9}));
  EXPECT_EQ(a, (std::vector<int32_t>{2, 1, 2, 3}));  // no id maps to index 0 but id 0
  std::vector<int32_t> bad = {1, 10};
  std::span<int32_t> bad_spans[] = {bad};
  const std::string e = test::error_of([&] { dd.run(bad_spans); });
  EXPECT_NE(e.find("id 10 at position 1 of id array 0"), std::string::npos) << e;
  std::vector<int32_t> again = {4, 4};  // the deduper stays usable after an error
  std::span<int32_t> again_spans[] = {again};
  EXPECT_EQ(dd.run(again_spans).size(), 2u);
  EXPECT_EQ(again, (std::vector<int32_t>{1, 1}));
}

// ---- ShardedTable on one rank: equal to the single-process table bit for bit ----------------

constexpr int64_t kV = 97, kD = 8, kMaxUnique = 64;

class ShardedLocal : public ::testing::TestWithParam<std::tuple<std::string, OwnerKind>> {};

TEST_P(ShardedLocal, StepsEqualTheFullTable) {
  const auto [opt, owner] = GetParam();
  Ctx ctx = cpu_ctx();
  auto comm = make_local_comm(Device::kCPU);
  EmbeddingTable full;
  make_full_table(full, kV, kD, opt);
  ShardedTable st(*comm, "item_embedding", kV, kD, opt, owner, kMaxUnique);
  st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
  ASSERT_EQ(st.shard().rows, kV);
  for (int64_t id = 0; id < kV; ++id)
    ASSERT_TRUE(same_row(row_of(st.shard().weight, id), row_of(full.weight, id), kD));
  IdDeduper dd(kV);
  for (int64_t step = 1; step <= 4; ++step) {
    const uint32_t s = static_cast<uint32_t>(10 * step);
    std::vector<int32_t> inputs = random_ids(3, s, 30, kV), negs = random_ids(3, s + 1, 20, kV);
    const std::vector<int32_t> inputs0 = inputs;
    const std::span<int32_t> spans[] = {inputs, negs};
    const std::span<const int32_t> u = dd.run(spans);
    ASSERT_EQ(st.fetch(ctx, *comm, u), static_cast<int64_t>(u.size()));
    for (size_t k = 0; k < u.size(); ++k)
      ASSERT_TRUE(same_row(row_of(st.window().weight, static_cast<int64_t>(k)),
                           row_of(full.weight, u[k]), kD))
          << "window row " << k << " id " << u[k];
    // Gradients for the inputs only: the negatives' rows stay untouched.
    std::vector<float> g = random_grads(4, s, 30, kD);
    const Tensor gt(g.data(), DType::kF32, Device::kCPU, {30, kD});
    embedding_bwd(ctx, gt, Tensor(inputs.data(), DType::kI32, Device::kCPU, {30}), 0.5f,
                  st.window().grad, st.window().touched, Tensor(), Tensor());
    embedding_bwd(ctx, gt,
                  Tensor(const_cast<int32_t*>(inputs0.data()), DType::kI32, Device::kCPU, {30}),
                  0.5f, full.grad, full.touched, Tensor(), Tensor());
    st.push_grads(ctx, *comm);
    const uint8_t* ts = st.shard().touched.as<uint8_t>();
    const uint8_t* tf = full.touched.as<uint8_t>();
    for (int64_t id = 0; id < kV; ++id) {
      ASSERT_EQ(ts[id], tf[id]) << "touched, id " << id;
      ASSERT_TRUE(same_row(row_of(st.shard().grad, id), row_of(full.grad, id), kD)) << id;
    }
    for (int64_t k = 0; k < kMaxUnique; ++k)  // the window is clean for the next step
      ASSERT_EQ(st.window().touched.as<uint8_t>()[k], 0);
    for (int64_t i = 0; i < st.window().grad.numel(); ++i)
      ASSERT_EQ(st.window().grad.as<float>()[i], 0.0f);
    test::sparse_step(ctx, st.shard(), opt, step);
    test::sparse_step(ctx, full, opt, step);
    ASSERT_EQ(std::memcmp(st.shard().weight.data, full.weight.data, full.weight.nbytes()), 0);
    ASSERT_TRUE(full.m.empty() ||
                std::memcmp(st.shard().m.data, full.m.data, full.m.nbytes()) == 0);
    ASSERT_TRUE(full.v.empty() ||
                std::memcmp(st.shard().v.data, full.v.data, full.v.nbytes()) == 0);
  }
}

INSTANTIATE_TEST_SUITE_P(All, ShardedLocal,
                         ::testing::Combine(::testing::Values("adam", "row_wise_adagrad", "sgd"),
                                            ::testing::Values(OwnerKind::kModulo,
                                                              OwnerKind::kHash)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  owner_name(std::get<1>(info.param));
                         });

TEST(ShardedTable, GatherRowsManyRoundsWithRepeats) {
  Ctx ctx = cpu_ctx();
  auto comm = make_local_comm(Device::kCPU);
  EmbeddingTable full;
  make_full_table(full, kV, kD, "sgd");
  ShardedTable st(*comm, "item_embedding", kV, kD, "sgd", OwnerKind::kHash, 16);
  st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
  const std::vector<int32_t> ids = random_ids(5, 0, 150, kV);  // 10 rounds of 16
  std::vector<float> out(150 * kD);
  st.gather_rows(ctx, *comm, ids, Tensor(out.data(), DType::kF32, Device::kCPU, {150, kD}));
  for (size_t i = 0; i < ids.size(); ++i)
    ASSERT_TRUE(same_row(&out[i * kD], row_of(full.weight, ids[i]), kD)) << i;
}

TEST(ShardedTable, MisuseIsAnError) {
  Ctx ctx = cpu_ctx();
  auto comm = make_local_comm(Device::kCPU);
  ShardedTable st(*comm, "t", 50, 4, "sgd", OwnerKind::kModulo, 4);
  const std::vector<int32_t> too_many = {0, 1, 2, 3, 4};
  EXPECT_NE(test::error_of([&] { st.fetch(ctx, *comm, too_many); }).find("max_unique"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { st.push_grads(ctx, *comm); }).find("without a fetch"),
            std::string::npos);
  const std::vector<int32_t> bad = {0, 50};
  EXPECT_NE(test::error_of([&] { st.fetch(ctx, *comm, bad); }).find("id 50 outside"),
            std::string::npos);
}

// ---- checkpoints ------------------------------------------------------------------------------

// A table after one optimiser step, so weights and state are all non-trivial.
void train_once(Ctx& ctx, Comm& comm, ShardedTable& st, const std::string& opt) {
  IdDeduper dd(st.rows());
  std::vector<int32_t> ids = random_ids(11, 0, 40, st.rows());
  const std::span<int32_t> spans[] = {ids};
  st.fetch(ctx, comm, dd.run(spans));
  std::vector<float> g = random_grads(12, 0, 40, st.dim());
  embedding_bwd(ctx, Tensor(g.data(), DType::kF32, Device::kCPU, {40, st.dim()}),
                Tensor(ids.data(), DType::kI32, Device::kCPU, {40}), 1.0f, st.window().grad,
                st.window().touched, Tensor(), Tensor());
  st.push_grads(ctx, comm);
  test::sparse_step(ctx, st.shard(), opt, 1);
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  // An empty tensor may carry a null pointer, and memcmp of it is undefined even for 0 bytes.
  return a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data, b.data, a.nbytes()) == 0);
}

TEST(ShardCheckpoint, SaveLoadAssembleAndFullToShard) {
  test::TempDir dir;
  Ctx ctx = cpu_ctx();
  auto comm = make_local_comm(Device::kCPU);
  for (const std::string opt : {"adam", "row_wise_adagrad", "sgd"}) {
    SCOPED_TRACE(opt);
    ShardedTable st(*comm, "item_embedding", kV, kD, opt, OwnerKind::kModulo, kMaxUnique);
    st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
    train_once(ctx, *comm, st, opt);
    const std::vector<std::string> files = save_shard(dir.path(), "item_embedding", *comm, st);
    EXPECT_EQ(files, (std::vector<std::string>{"item_embedding.shard-0-of-1.safetensors",
                                               "item_embedding.shards.json"}));
    const Json index = json::parse_file(dir.file("item_embedding.shards.json"));
    EXPECT_EQ(json::int_at(index, "rows"), kV);
    EXPECT_EQ(json::string_at(index, "owner"), "modulo");
    EXPECT_EQ(json::int_at(json::array_at(index, "files")[0], "bytes"),
              static_cast<int64_t>(std::filesystem::file_size(dir.file(files[0]))));
    // Into a table placed by the other owner function (every file read, ids re-placed).
    ShardedTable back(*comm, "item_embedding", kV, kD, opt, OwnerKind::kHash, kMaxUnique);
    load_shards(dir.path(), "item_embedding", *comm, back, true);
    EXPECT_TRUE(same_tensor(back.shard().weight, st.shard().weight));
    EXPECT_TRUE(same_tensor(back.shard().m, st.shard().m));
    EXPECT_TRUE(same_tensor(back.shard().v, st.shard().v));
    // Shard files -> a full single-process table.
    EmbeddingTable full;
    full.allocate("item_embedding", kV, kD, Device::kCPU, opt);
    assemble_full_table(dir.path(), "item_embedding", full, true);
    EXPECT_TRUE(same_tensor(full.weight, st.shard().weight));
    EXPECT_TRUE(same_tensor(full.m, st.shard().m));
    EXPECT_TRUE(same_tensor(full.v, st.shard().v));
    // A plain checkpoint's tensors (train/checkpoint.cpp's names) -> a shard.
    std::vector<std::pair<std::string, Tensor>> model = {{"item_embedding", full.weight}}, state;
    if (!full.m.empty()) state.emplace_back("item_embedding.state_m", full.m);
    if (!full.v.empty()) state.emplace_back("item_embedding.state_v", full.v);
    save_safetensors(dir.file("model.safetensors"), model);
    save_safetensors(dir.file("optimizer.safetensors"), state);
    ShardedTable from_full(*comm, "item_embedding", kV, kD, opt, OwnerKind::kHash, kMaxUnique);
    load_full_into_shard(dir.file("model.safetensors"), dir.file("optimizer.safetensors"),
                         from_full, true);
    EXPECT_TRUE(same_tensor(from_full.shard().weight, full.weight));
    EXPECT_TRUE(same_tensor(from_full.shard().m, full.m));
  }
}

TEST(ShardCheckpoint, DamagedShardsNameTheFile) {
  test::TempDir dir;
  auto comm = make_local_comm(Device::kCPU);
  ShardedTable st(*comm, "items", 20, 4, "row_wise_adagrad", OwnerKind::kModulo, 8);
  st.init_from_full(Init::trunc_normal(0.02), 1);
  save_shard(dir.path(), "items", *comm, st);
  const std::string file = dir.file("items.shard-0-of-1.safetensors");
  const std::string index_path = dir.file("items.shards.json");
  auto write_shard = [&](std::vector<int64_t> ids, DType weight_dtype) {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<double> w(static_cast<size_t>(n * 4), 0.5);
    std::vector<float> wf(static_cast<size_t>(n * 4), 0.5f), m(static_cast<size_t>(n), 0.1f);
    const Tensor wt = weight_dtype == DType::kF32
                          ? Tensor(wf.data(), DType::kF32, Device::kCPU, {n, 4})
                          : Tensor(w.data(), DType::kF64, Device::kCPU, {n, 4});
    save_safetensors(file,
                     {{"ids", Tensor(ids.data(), DType::kI64, Device::kCPU, {n})},
                      {"weight", wt},
                      {"state_m", Tensor(m.data(), DType::kF32, Device::kCPU, {n})}},
                     {{"format", "hstu-shard"}});
    Json index = json::parse_file(index_path);
    index["files"][0]["rows"] = n;
    test::write_file(index_path, json::dump(index, 2));
  };
  std::vector<int64_t> ids(20);
  for (int64_t i = 0; i < 20; ++i) ids[static_cast<size_t>(i)] = i;
  ShardedTable dst(*comm, "items", 20, 4, "row_wise_adagrad", OwnerKind::kHash, 8);
  auto load_error = [&] {
    return test::error_of([&] { load_shards(dir.path(), "items", *comm, dst, true); });
  };
  ids[7] = 3;  // 3 twice, 7 missing
  write_shard(ids, DType::kF32);
  std::string e = load_error();
  EXPECT_NE(e.find(file), std::string::npos) << e;
  EXPECT_NE(e.find("id 3 appears a second time"), std::string::npos) << e;
  ids.erase(ids.begin() + 7);  // 7 missing only
  write_shard(ids, DType::kF32);
  e = load_error();
  EXPECT_NE(e.find(index_path), std::string::npos) << e;
  EXPECT_NE(e.find("id 7 of table 'items' is in none"), std::string::npos) << e;
  ids.insert(ids.begin() + 7, 7);
  write_shard(ids, DType::kF64);
  e = load_error();
  EXPECT_NE(e.find("'weight' is F64[20,4], expected F32[20,4]"), std::string::npos) << e;
  write_shard(ids, DType::kF32);
  EXPECT_EQ(load_error(), "<no error>");
  // A table of another shape, another optimiser's state, another table name.
  ShardedTable wide(*comm, "items", 20, 5, "row_wise_adagrad", OwnerKind::kHash, 8);
  e = test::error_of([&] { load_shards(dir.path(), "items", *comm, wide, false); });
  EXPECT_NE(e.find("saved as [20, 4]"), std::string::npos) << e;
  ShardedTable adam(*comm, "items", 20, 4, "adam", OwnerKind::kHash, 8);
  e = test::error_of([&] { load_shards(dir.path(), "items", *comm, adam, true); });
  EXPECT_NE(e.find("optimizer 'row_wise_adagrad'"), std::string::npos) << e;
  EXPECT_EQ(test::error_of([&] { load_shards(dir.path(), "items", *comm, adam, false); }),
            "<no error>");
  e = test::error_of([&] { load_shards(dir.path(), "users", *comm, adam, false); });
  EXPECT_NE(e.find("users.shards.json"), std::string::npos) << e;
}

}  // namespace
}  // namespace hstu::dist
