// shard_test_util.h — helpers of the sharded-table tests (tests/dist on one rank, tests/mpi on
// several): the single-process reference table, seeded random ids and gradients every rank can
// recompute for any rank, and the sparse optimiser step of train/step.cpp's optimizer_step.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/philox.h"
#include "model/params.h"
#include "ops/embedding.h"

namespace hstu::test {
inline namespace shard_test_util {

inline constexpr uint64_t kShardSeed = 1234;

// The single-process table as model.cpp builds it: trunc_normal(0.02) from (seed, name).
inline void make_full_table(EmbeddingTable& t, int64_t rows, int64_t dim,
                            const std::string& optimizer,
                            const std::string& name = "item_embedding",
                            uint64_t seed = kShardSeed) {
  t.allocate(name, rows, dim, Device::kCPU, optimizer);
  init_tensor(t.weight, Init::trunc_normal(0.02), seed, name);
}

// n ids in [0, rows) drawn from Philox(seed, stream): heavy repeats when n > rows.
inline std::vector<int32_t> random_ids(uint64_t seed, uint32_t stream, int64_t n, int64_t rows) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(
        philox4x32(seed, static_cast<uint64_t>(i), stream).x % static_cast<uint64_t>(rows));
  return ids;
}

// n x dim gradients in [-1, 1) from Philox(seed, stream).
inline std::vector<float> random_grads(uint64_t seed, uint32_t stream, int64_t n, int64_t dim) {
  std::vector<float> g(static_cast<size_t>(n * dim));
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = static_cast<float>(philox4x32(seed, i, stream).y) / 2147483648.0f - 1.0f;
  return g;
}

inline SparseOptimizerSpec::Kind sparse_kind(const std::string& optimizer) {
  return optimizer == "sgd"                ? SparseOptimizerSpec::kSgd
         : optimizer == "row_wise_adagrad" ? SparseOptimizerSpec::kRowWiseAdagrad
                                           : SparseOptimizerSpec::kAdam;
}

// The sparse branch of optimizer_step (train/step.cpp) for one table.
inline void sparse_step(Ctx& ctx, EmbeddingTable& t, const std::string& optimizer, int64_t step) {
  SparseOptimizerSpec ss;
  ss.kind = sparse_kind(optimizer);
  ss.lr = 0.05f;
  ss.step = step;
  collect_touched_rows(ctx, t.touched, t.row_list, t.row_count);
  sparse_optimizer_step(ctx, ss, t.weight, t.grad, t.row_list, t.row_count, t.m, t.v);
}

// Row `r` of a host [*, dim] f32 tensor.
inline const float* row_of(const Tensor& t, int64_t r) {
  return t.as<float>() + r * t.row_stride;
}

// True when rows a[ra] and b[rb] (dim floats) have the same bits.
inline bool same_row(const float* a, const float* b, int64_t dim) {
  return std::memcmp(a, b, static_cast<size_t>(dim) * sizeof(float)) == 0;
}

}  // namespace shard_test_util
}  // namespace hstu::test
