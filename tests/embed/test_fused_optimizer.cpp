// test_fused_optimizer.cpp — the dynamic table's fused optimisers (SGD, Adam, row-wise Adagrad,
// state inside the row) are bitwise equal to sparse_optimizer_step on a dense table over the
// same ids, step after step, and honour skip_if_nonfinite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/embed_test_util.h"
#include "core/philox.h"
#include "embed/dynamic_table.h"
#include "ops/embedding.h"

namespace hstu {
namespace {

using test::vec_tensor;

void check_bitwise(const std::string& optimizer) {
  constexpr int64_t kRows = 40, kDim = 12;
  Ctx ctx = cpu_ctx();
  // The dense table: weight, grad, state, as EmbeddingTable holds them.
  std::vector<float> w(kRows * kDim), g(kRows * kDim, 0.0f), m(kRows * kDim, 0.0f),
      v(kRows * kDim, 0.0f);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = (u32_to_unit_float(philox4x32(5, i).x) - 0.5f) * 0.04f;
  embed::DynamicTableSpec s;
  s.name = "item_embedding";
  s.dim = kDim;
  s.capacity_rows = s.max_capacity_rows = 256;
  s.optimizer = optimizer;
  s.lr = 0.05f;
  embed::DynamicTable t(s, Device::kCPU);
  // Start the dynamic table from the dense table's rows (key = row id).
  std::vector<int64_t> ids(kRows);
  for (int64_t r = 0; r < kRows; ++r) ids[r] = r;
  t.import_rows(ctx, ids, w, kDim);
  std::mt19937 rng(11);
  for (int64_t step = 1; step <= 4; ++step) {
    // A random subset of rows with random gradients.
    std::vector<int32_t> rows;
    for (int32_t r = 0; r < kRows; ++r)
      if (rng() % 3 != 0) rows.push_back(r);
    std::vector<float> grad_rows(rows.size() * kDim);
    for (auto& x : grad_rows) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(&g[rows[i] * kDim], &grad_rows[i * kDim], kDim * sizeof(float));
    SparseOptimizerSpec spec = t.optimizer_spec(step, s.lr * static_cast<float>(step));
    std::vector<int32_t> count = {static_cast<int32_t>(rows.size())};
    Tensor tw(w.data(), DType::kF32, Device::kCPU, {kRows, kDim});
    Tensor tg(g.data(), DType::kF32, Device::kCPU, {kRows, kDim});
    Tensor tm, tv;
    if (optimizer == "adam") {
      tm = Tensor(m.data(), DType::kF32, Device::kCPU, {kRows, kDim});
      tv = Tensor(v.data(), DType::kF32, Device::kCPU, {kRows, kDim});
    } else if (optimizer == "row_wise_adagrad") {
      tm = Tensor(m.data(), DType::kF32, Device::kCPU, {kRows});
    }
    sparse_optimizer_step(ctx, spec, tw, tg, vec_tensor(rows), vec_tensor(count), tm, tv);
    // The dynamic table: the same rows as keys, through find_or_insert (all present).
    std::vector<int64_t> keys(rows.begin(), rows.end());
    std::vector<int32_t> counts(keys.size(), 1);
    std::vector<int64_t> refs(keys.size());
    std::vector<uint8_t> touched(keys.size(), 1);
    t.begin_step(step);
    t.find_or_insert(ctx, vec_tensor(keys), vec_tensor(counts), vec_tensor(refs));
    Tensor gt(grad_rows.data(), DType::kF32, Device::kCPU,
              {static_cast<int64_t>(keys.size()), kDim});
    t.apply(ctx, spec, vec_tensor(refs), gt, vec_tensor(touched));
    for (float x : grad_rows) ASSERT_EQ(x, 0.0f);  // cleared
    for (uint8_t x : touched) ASSERT_EQ(x, 0);
  }
  const embed::TableRows out = t.export_rows(ctx);
  ASSERT_EQ(static_cast<int64_t>(out.keys.size()), kRows);
  const int64_t rw = t.row_width();
  for (size_t i = 0; i < out.keys.size(); ++i) {
    const int64_t r = out.keys[i];
    for (int64_t c = 0; c < kDim; ++c) {
      ASSERT_EQ(std::memcmp(&out.values[i * rw + c], &w[r * kDim + c], 4), 0)
          << optimizer << " row " << r << " col " << c;
      if (optimizer == "adam") {
        ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim + c], &m[r * kDim + c], 4), 0);
        ASSERT_EQ(std::memcmp(&out.values[i * rw + 2 * kDim + c], &v[r * kDim + c], 4), 0);
      }
    }
    if (optimizer == "row_wise_adagrad") {
      ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim], &m[r], 4), 0);
    }
  }
}

TEST(FusedOptimizer, SgdBitwiseEqualsSparseOptimizerStep) {
  check_bitwise("sgd");
}
TEST(FusedOptimizer, AdamBitwiseEqualsSparseOptimizerStep) {
  check_bitwise("adam");
}
TEST(FusedOptimizer, RowWiseAdagradBitwiseEqualsSparseOptimizerStep) {
  check_bitwise("row_wise_adagrad");
}

TEST(FusedOptimizer, NonFiniteGuardSkipsTheUpdateButClearsGradients) {
  Ctx ctx = cpu_ctx();
  embed::DynamicTableSpec s;
  s.name = "t";
  s.dim = 4;
  s.capacity_rows = s.max_capacity_rows = 64;
  s.optimizer = "sgd";
  embed::DynamicTable t(s, Device::kCPU);
  t.import_rows(ctx, {7}, {1, 2, 3, 4}, 4);
  std::vector<int64_t> keys = {7}, refs(1);
  std::vector<int32_t> counts = {1};
  t.find_or_insert(ctx, vec_tensor(keys), vec_tensor(counts), vec_tensor(refs));
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<uint8_t> touched = {1};
  std::vector<double> health = {1.0, NAN};
  SparseOptimizerSpec spec = t.optimizer_spec(1, 0.5f);
  spec.skip_if_nonfinite = vec_tensor(health);
  t.apply(ctx, spec, vec_tensor(refs), Tensor(g.data(), DType::kF32, Device::kCPU, {1, 4}),
          vec_tensor(touched));
  EXPECT_EQ(g, std::vector<float>(4, 0.0f));
  const embed::TableRows r = t.export_rows(ctx);
  EXPECT_EQ(r.values, (std::vector<float>{1, 2, 3, 4}));
  SparseOptimizerSpec adam;  // the rows hold no Adam state: refused
  adam.kind = SparseOptimizerSpec::kAdam;
  EXPECT_THROW(t.apply(ctx, adam, vec_tensor(refs),
                       Tensor(g.data(), DType::kF32, Device::kCPU, {1, 4}), vec_tensor(touched)),
               Error);
}

}  // namespace
}  // namespace hstu
