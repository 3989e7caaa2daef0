// test_sharded_table.cpp — the row-sharded embedding table on 2 or 4 MPI ranks (mpi_np2,
// mpi_np4), for both owner functions: fetched rows equal the single-process table's, pushed
// gradients equal the sum over ranks computed by brute force (bit for bit: the owner adds the
// senders' rows in rank order and so does the reference), the sparse optimiser on the shards
// equals it on the full table, gather_rows serves any ids, and checkpoints saved on W ranks load
// on W ranks under either owner function, on 1 rank (a full table, or a 1-rank shard), and a
// 1-rank save and a plain full-table checkpoint load on W ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/shard_test_util.h"
#include "dist/comm.h"
#include "dist/shard_checkpoint.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "io/safetensors.h"
#include "mpi/mpi_test_util.h"

namespace hstu::dist {
namespace {

using test::make_full_table;
using test::random_grads;
using test::random_ids;
using test::row_of;
using test::same_row;

constexpr int64_t kV = 1009, kD = 6, kMaxUnique = 160;
constexpr float kScale = 0.75f;

// One rank's step (seeded by rank and step, so every rank can rebuild every rank's): ids that
// get gradients (repeats included), and ids only fetched (as untouched negatives would be).
struct RankStep {
  std::vector<int32_t> inputs, negs;
  std::vector<float> grads;  // [inputs, D]
};

RankStep rank_step(int r, uint32_t step) {
  RankStep s;
  const int64_t n = 20 + 37 * r;
  s.inputs = random_ids(21, step * 64 + static_cast<uint32_t>(r), n, kV);
  s.negs = random_ids(22, step * 64 + static_cast<uint32_t>(r), 15, kV);
  s.grads = random_grads(23, step * 64 + static_cast<uint32_t>(r), n, kD);
  return s;
}

// This rank's step on the sharded table: dedup, fetch (checked against `full` when given),
// gradients into the window, push to the owners.
void sharded_step(Ctx& ctx, Comm& comm, ShardedTable& st, RankStep s,
                  const EmbeddingTable* full = nullptr) {
  const std::span<int32_t> spans[] = {s.inputs, s.negs};
  st.dedup_and_fetch(ctx, comm, spans);
  const std::span<const int32_t> u = st.unique_ids();
  if (full) {  // EXPECT, not ASSERT: returning early would leave the other ranks waiting
    for (size_t k = 0; k < u.size(); ++k) {
      EXPECT_TRUE(same_row(row_of(st.window().weight, static_cast<int64_t>(k)),
                           row_of(full->weight, u[k]), kD))
          << "rank " << comm.rank() << " window row " << k << " id " << u[k];
    }
  }
  const int64_t n = static_cast<int64_t>(s.inputs.size());
  embedding_bwd(ctx, Tensor(s.grads.data(), DType::kF32, Device::kCPU, {n, kD}),
                Tensor(s.inputs.data(), DType::kI32, Device::kCPU, {n}), kScale, st.window().grad,
                st.window().touched, Tensor(), Tensor());
  st.push_grads(ctx, comm);
}

// Brute force: every rank's window gradients (each summed in its token order from zero), added
// into full.grad in rank order for the ids that rank touched.
void reference_grads(Ctx& ctx, EmbeddingTable& full, int world, uint32_t step) {
  for (int r = 0; r < world; ++r) {
    RankStep s = rank_step(r, step);
    EmbeddingTable acc;
    acc.allocate("acc", kV, kD, Device::kCPU, "sgd");
    const int64_t n = static_cast<int64_t>(s.inputs.size());
    embedding_bwd(ctx, Tensor(s.grads.data(), DType::kF32, Device::kCPU, {n, kD}),
                  Tensor(s.inputs.data(), DType::kI32, Device::kCPU, {n}), kScale, acc.grad,
                  acc.touched, Tensor(), Tensor());
    for (int64_t id = 0; id < kV; ++id) {
      if (!acc.touched.as<uint8_t>()[id]) continue;
      float* g = full.grad.as<float>() + id * kD;
      for (int64_t c = 0; c < kD; ++c) g[c] += row_of(acc.grad, id)[c];
      full.touched.as<uint8_t>()[id] = 1;
    }
  }
}

// The shard's rows (weight, grad, state) equal the full table's rows of its ids.
void expect_shard_equals_full(const ShardedTable& st, const EmbeddingTable& full,
                              bool grads = false) {
  const std::vector<int64_t>& ids = st.owned_ids();
  const int64_t mw = full.m.empty() ? 0 : (full.m.ndim == 1 ? 1 : kD);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int64_t l = static_cast<int64_t>(j), id = ids[j];
    ASSERT_TRUE(same_row(row_of(st.shard().weight, l), row_of(full.weight, id), kD)) << id;
    ASSERT_TRUE(!mw ||
                same_row(st.shard().m.as<float>() + l * mw, full.m.as<float>() + id * mw, mw))
        << id;
    ASSERT_TRUE(full.v.empty() || same_row(row_of(st.shard().v, l), row_of(full.v, id), kD)) << id;
    if (grads) {
      ASSERT_TRUE(same_row(row_of(st.shard().grad, l), row_of(full.grad, id), kD)) << id;
      ASSERT_EQ(st.shard().touched.as<uint8_t>()[l], full.touched.as<uint8_t>()[id]) << id;
    }
  }
}

class ShardedMpi : public ::testing::TestWithParam<OwnerKind> {};

TEST_P(ShardedMpi, FetchPushAndOptimiserEqualTheFullTable) {
  Comm& c = world();
  ASSERT_GE(c.size(), 2) << "run under mpirun -np 2 or more";
  Ctx ctx = cpu_ctx();
  for (const std::string opt : {"adam", "row_wise_adagrad"}) {
    SCOPED_TRACE(opt);
    EmbeddingTable full;
    make_full_table(full, kV, kD, opt);
    ShardedTable st(c, "item_embedding", kV, kD, opt, GetParam(), kMaxUnique);
    st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
    expect_shard_equals_full(st, full);
    for (uint32_t step = 1; step <= 3; ++step) {
      sharded_step(ctx, c, st, rank_step(c.rank(), step), &full);
      reference_grads(ctx, full, c.size(), step);
      expect_shard_equals_full(st, full, true);
      test::sparse_step(ctx, st.shard(), opt, step);
      test::sparse_step(ctx, full, opt, step);
      expect_shard_equals_full(st, full);
    }
  }
}

TEST_P(ShardedMpi, GatherRowsAnyCountPerRank) {
  Comm& c = world();
  Ctx ctx = cpu_ctx();
  EmbeddingTable full;
  make_full_table(full, kV, kD, "sgd");
  ShardedTable st(c, "item_embedding", kV, kD, "sgd", GetParam(), 32);
  st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
  const int64_t n = 45 * c.rank();  // rank 0 asks for nothing, still joins every round
  const std::vector<int32_t> ids = random_ids(31, static_cast<uint32_t>(c.rank()), n, kV);
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(n, 1) * kD));
  st.gather_rows(ctx, c, ids,
                 Tensor(out.data(), DType::kF32, Device::kCPU, {std::max<int64_t>(n, 1), kD}));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_row(&out[static_cast<size_t>(i * kD)],
                         row_of(full.weight, ids[static_cast<size_t>(i)]), kD))
        << i;
}

// A folder every rank names the same (rank 0's pid), created by rank 0.
std::string shared_dir(Comm& c, const std::string& what) {
  const int64_t pid = c.all_gather_host(static_cast<int64_t>(::getpid()))[0];
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hstu_mpi_" + what + "_" + std::to_string(pid)))
          .string();
  if (c.is_root()) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  c.barrier();
  return dir;
}

TEST_P(ShardedMpi, CheckpointsReshard) {
  Comm& c = world();
  Ctx ctx = cpu_ctx();
  const OwnerKind owner = GetParam();
  const OwnerKind other = owner == OwnerKind::kModulo ? OwnerKind::kHash : OwnerKind::kModulo;
  const std::string dir = shared_dir(c, std::string("ckpt_") + owner_name(owner));
  const std::string dir1 = dir + "/one_rank";
  for (const std::string opt : {"adam", "row_wise_adagrad", "sgd"}) {
    SCOPED_TRACE(opt);
    // A trained table (non-zero state) and its single-process reference.
    EmbeddingTable full;
    make_full_table(full, kV, kD, opt);
    ShardedTable st(c, "item_embedding", kV, kD, opt, owner, kMaxUnique);
    st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
    sharded_step(ctx, c, st, rank_step(c.rank(), 1));
    test::sparse_step(ctx, st.shard(), opt, 1);
    reference_grads(ctx, full, c.size(), 1);
    test::sparse_step(ctx, full, opt, 1);
    expect_shard_equals_full(st, full);

    const std::vector<std::string> files = save_shard(dir, "item_embedding", c, st);
    ASSERT_EQ(files.size(), static_cast<size_t>(c.size()) + 1);
    for (const std::string& f : files) EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
    // W ranks, the same placement (each rank reads its own file) and the other owner function.
    for (const OwnerKind k : {owner, other}) {
      ShardedTable back(c, "item_embedding", kV, kD, opt, k, kMaxUnique);
      load_shards(dir, "item_embedding", c, back, true);
      expect_shard_equals_full(back, full);
    }
    // 1 rank: rank 0 assembles the full table, and loads a 1-rank shard, then saves it as a
    // 1-rank checkpoint; the W ranks load that (1 -> W).
    if (c.is_root()) {
      EmbeddingTable whole;
      whole.allocate("item_embedding", kV, kD, Device::kCPU, opt);
      assemble_full_table(dir, "item_embedding", whole, true);
      EXPECT_EQ(std::memcmp(whole.weight.data, full.weight.data, full.weight.nbytes()), 0);
      EXPECT_TRUE(full.m.empty() || std::memcmp(whole.m.data, full.m.data, full.m.nbytes()) == 0);
      EXPECT_TRUE(full.v.empty() || std::memcmp(whole.v.data, full.v.data, full.v.nbytes()) == 0);
      auto one = make_local_comm(Device::kCPU);
      ShardedTable single(*one, "item_embedding", kV, kD, opt, other, kMaxUnique);
      load_shards(dir, "item_embedding", *one, single, true);
      expect_shard_equals_full(single, full);
      save_shard(dir1, "item_embedding", *one, single);
      // A plain single-process checkpoint's tensors, as train/checkpoint.cpp names them.
      std::vector<std::pair<std::string, Tensor>> state;
      if (!full.m.empty()) state.emplace_back("item_embedding.state_m", full.m);
      if (!full.v.empty()) state.emplace_back("item_embedding.state_v", full.v);
      save_safetensors(dir1 + "/model.safetensors", {{"item_embedding", full.weight}});
      save_safetensors(dir1 + "/optimizer.safetensors", state);
    }
    c.barrier();
    ShardedTable from_one(c, "item_embedding", kV, kD, opt, owner, kMaxUnique);
    load_shards(dir1, "item_embedding", c, from_one, true);
    expect_shard_equals_full(from_one, full);
    ShardedTable from_full(c, "item_embedding", kV, kD, opt, owner, kMaxUnique);
    load_full_into_shard(dir1 + "/model.safetensors", dir1 + "/optimizer.safetensors", from_full,
                         true);
    expect_shard_equals_full(from_full, full);
    c.barrier();  // every rank has read before the next optimiser's files replace these
  }
  if (c.is_root()) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Owners, ShardedMpi,
                         ::testing::Values(OwnerKind::kModulo, OwnerKind::kHash),
                         [](const auto& info) { return std::string(owner_name(info.param)); });

// Shard sizes are uneven under hash placement and when W does not divide V; the plan and the
// real shards agree on every rank.
TEST(ShardedMpiPlan, DescribeShardsMatchesTheRealShards) {
  Comm& c = world();
  for (const OwnerKind k : {OwnerKind::kModulo, OwnerKind::kHash}) {
    ShardedTable st(c, "item_embedding", kV, kD, "adam", k, kMaxUnique);
    const std::vector<ShardSize> plan = describe_shards(kV, kD, c.size(), "adam", k, kMaxUnique);
    EXPECT_EQ(plan[static_cast<size_t>(c.rank())].rows, st.shard().rows);
    EXPECT_EQ(plan[static_cast<size_t>(c.rank())].table_bytes,
              static_cast<int64_t>(st.shard().arena->capacity()));
    EXPECT_EQ(c.all_reduce_host(st.shard().rows, ReduceOp::kSum), kV);
  }
}

}  // namespace
}  // namespace hstu::dist
