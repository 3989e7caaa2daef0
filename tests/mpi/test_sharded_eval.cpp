// test_sharded_eval.cpp — distributed retrieval ranks over a row-sharded item table on 2 or 4
// MPI ranks (mpi_np2, mpi_np4), for both owner functions: every rank's
// sharded_retrieval_ranks equals the single-process retrieval_rank of its queries over the whole
// normalised table, exactly. Each rank has its own number of queries (rank 1 none), histories
// whose offsets do not start at 0 and hold targets, padding and duplicates, targets tied with
// duplicated rows owned by other ranks, more targets than one gather_rows round, a NaN query
// (rank cap + 2), and a small rank cap as well as a large one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/shard_test_util.h"
#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "mpi/mpi_test_util.h"
#include "ops/l2norm.h"
#include "ops/retrieval_rank.h"
#include "train/sharded_eval.h"

namespace hstu::dist {
namespace {

using test::make_full_table;
using test::random_grads;
using test::random_ids;

constexpr int64_t kV = 1201, kD = 12, kMaxUnique = 48;
constexpr float kEps = 1e-6f;

// Rows 20..39 copied onto ids 600..619 (exact ties between rows of different owners).
void duplicate_rows(EmbeddingTable& full) {
  for (int64_t i = 0; i < 20; ++i)
    std::copy(full.weight.as<float>() + (20 + i) * kD, full.weight.as<float>() + (21 + i) * kD,
              full.weight.as<float>() + (600 + i) * kD);
}

// One rank's evaluation input, a function of (rank, world) only.
struct RankQueries {
  std::vector<float> queries;  // [Q, D], normalised
  std::vector<int32_t> targets, offsets, history;
};

RankQueries rank_queries(Ctx& ctx, const EmbeddingTable& full, int r) {
  RankQueries q;
  const int64_t n = r == 1 ? 0 : 40 + 31 * r;  // rank 1 has none; > kMaxUnique for r >= 2
  q.targets = random_ids(31, static_cast<uint32_t>(r), n, kV - 1);
  for (int64_t k = 0; k < n; ++k) {
    int32_t& t = q.targets[static_cast<size_t>(k)];
    // [1, V); a quarter rows 20..39 (their copies 600.. tie, with larger ids), a quarter the
    // copies 600..619 (rows 20.. tie with smaller ids, so they rank above).
    t = k % 4 == 0   ? static_cast<int32_t>(20 + k % 20)
        : k % 4 == 1 ? static_cast<int32_t>(600 + k % 20)
                     : t + 1;
  }
  const std::vector<float> noise = random_grads(32, static_cast<uint32_t>(r), n, kD);
  std::vector<float> raw(static_cast<size_t>(n * kD));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t c = 0; c < kD; ++c) {
      const float row = full.weight.as<float>()[q.targets[static_cast<size_t>(k)] * kD + c];
      raw[static_cast<size_t>(k * kD + c)] = row + (k % 5 == 2 ? 1.0f
                                                    : k % 2    ? 0.02f
                                                            : 0.005f) *  // far (k % 5 == 2) or near
                                                       noise[static_cast<size_t>(k * kD + c)];
    }
  if (n > 3)
    for (int64_t c = 0; c < kD; ++c) raw[static_cast<size_t>(3 * kD + c)] = std::nanf("");
  q.queries.resize(raw.size());
  if (n > 0) {
    std::vector<float> norms(static_cast<size_t>(n));
    l2norm_fwd(ctx, host_tensor(raw, {n, kD}), kEps, host_tensor(q.queries, {n, kD}),
               host_tensor(norms));
  }
  // Histories: 3 leading entries of no query (offsets start at 3), then 0..9 random ids, the
  // target for every third query, padding 0 and a repeated entry now and then.
  const std::vector<int32_t> ids = random_ids(33, static_cast<uint32_t>(r), 12 * n + 3, kV);
  size_t next = 0;
  for (int i = 0; i < 3; ++i) q.history.push_back(ids[next++]);
  q.offsets.push_back(3);
  for (int64_t k = 0; k < n; ++k) {
    const int len = static_cast<int>(ids[next] % 10);
    for (int i = 0; i < len; ++i) q.history.push_back(ids[next++]);
    if (k % 3 == 0) q.history.push_back(q.targets[static_cast<size_t>(k)]);
    if (k % 5 == 0) q.history.push_back(0);
    if (k % 7 == 0 && len > 0) q.history.push_back(q.history.back());
    q.offsets.push_back(static_cast<int32_t>(q.history.size()));
  }
  return q;
}

class ShardedEvalMpi : public ::testing::TestWithParam<OwnerKind> {};

TEST_P(ShardedEvalMpi, RanksEqualTheSingleProcessRanks) {
  Comm& c = world();
  Ctx ctx = cpu_ctx();
  EmbeddingTable full;
  make_full_table(full, kV, kD, "sgd");
  duplicate_rows(full);
  ShardedTable st(c, "item_embedding", kV, kD, "sgd", GetParam(), kMaxUnique);
  st.init_from_full(Init::trunc_normal(0.02), test::kShardSeed);
  for (size_t j = 0; j < st.owned_ids().size(); ++j) {  // the same duplicates in the shard
    const int64_t id = st.owned_ids()[j];
    std::copy(full.weight.as<float>() + id * kD, full.weight.as<float>() + (id + 1) * kD,
              st.shard().weight.as<float>() + static_cast<int64_t>(j) * kD);
  }
  // The single-process evaluator's table: the full table normalised.
  std::vector<float> items(static_cast<size_t>(kV * kD)), norms(static_cast<size_t>(kV));
  l2norm_fwd(ctx, full.weight, kEps, host_tensor(items, {kV, kD}), host_tensor(norms));

  RankQueries q = rank_queries(ctx, full, c.rank());
  const int64_t n = static_cast<int64_t>(q.targets.size());
  for (const int32_t cap : {2000, 25}) {
    SCOPED_TRACE("rank " + std::to_string(c.rank()) + ", rank_cap " + std::to_string(cap));
    const Tensor queries = n > 0 ? host_tensor(q.queries, {n, kD}) : Tensor();
    const std::vector<int32_t> got =
        sharded_retrieval_ranks(ctx, c, st, queries, q.targets, q.offsets, q.history, kEps, cap);
    ASSERT_EQ(static_cast<int64_t>(got.size()), n);
    if (n == 0) continue;
    std::vector<int32_t> want(static_cast<size_t>(n));
    retrieval_rank(ctx, queries, host_tensor(items, {kV, kD}), host_tensor(q.targets),
                   host_tensor(q.offsets), host_tensor(q.history), cap, host_tensor(want));
    EXPECT_EQ(want[3], cap + 2);  // the NaN query
    int64_t capped = 0;
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_EQ(got[static_cast<size_t>(k)], want[static_cast<size_t>(k)]) << "query " << k;
      capped += want[static_cast<size_t>(k)] == cap + 1;
    }
    if (cap == 25) {
      EXPECT_GT(capped, 0) << "the small cap should bind for some queries";
    }
  }
  // No queries anywhere: every rank returns an empty result without communicating.
  const std::vector<int32_t> none =
      sharded_retrieval_ranks(ctx, c, st, Tensor(), {}, {}, {}, kEps, 10);
  EXPECT_TRUE(none.empty());
}

INSTANTIATE_TEST_SUITE_P(Owners, ShardedEvalMpi,
                         ::testing::Values(OwnerKind::kModulo, OwnerKind::kHash),
                         [](const ::testing::TestParamInfo<OwnerKind>& i) {
                           return std::string(owner_name(i.param));
                         });

}  // namespace
}  // namespace hstu::dist
