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

// reduce_grad (per-key sums over dedupe's sorted order) equals embedding_bwd on the window
// bit for bit on the CPU: the same additions in the same (position) order.
TEST(DynamicTable, ReduceGradEqualsEmbeddingBwd) {
  Ctx ctx = cpu_ctx();
  embed::DynamicTableSpec s;
  s.name = "items";
  s.dim = 7;
  s.capacity_rows = s.max_capacity_rows = 1024;
  embed::DynamicTable t(s, Device::kCPU);
  std::mt19937_64 rng(5);
  std::vector<int64_t> keys(500);
  for (auto& k : keys) k = static_cast<int64_t>(rng() % 60) * 1000003 - 9;
  const int64_t n = 500, d = 7;
  std::vector<float> dout(n * d);
  for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<int64_t> unique(n);
  std::vector<int32_t> inverse(n), counts(n);
  const int64_t u =
      t.dedupe(ctx, vec_tensor(keys), vec_tensor(unique), vec_tensor(inverse), vec_tensor(counts));
  std::vector<float> a(u * d, 0.0f), b(u * d, 0.0f);
  std::vector<uint8_t> ta(u, 0), tb(u, 0);
  const Tensor dt(dout.data(), DType::kF32, Device::kCPU, {n, d});
  t.reduce_grad(ctx, dt, 0.25f, Tensor(a.data(), DType::kF32, Device::kCPU, {u, d}),
                vec_tensor(ta));
  embedding_bwd(ctx, dt, vec_tensor(inverse), 0.25f,
                Tensor(b.data(), DType::kF32, Device::kCPU, {u, d}), vec_tensor(tb), Tensor(),
                Tensor());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  EXPECT_EQ(ta, tb);
  // dout of another length than the last dedupe's lookups is refused.
  EXPECT_THROW(t.reduce_grad(ctx, Tensor(dout.data(), DType::kF32, Device::kCPU, {n - 1, d}), 1.0f,
                             Tensor(a.data(), DType::kF32, Device::kCPU, {u, d}), vec_tensor(ta)),
               Error);
}

// lookup equals gather into a window + embedding_fwd, and backward equals reduce_grad + apply,
// bit for bit on the CPU (Adam: the fused path; row-wise Adagrad: its two-pass fallback).
TEST(DynamicTable, LookupAndBackwardEqualTheUnfusedSteps) {
  for (const char* opt : {"adam", "sgd", "row_wise_adagrad"}) {
    Ctx ctx = cpu_ctx();
    embed::DynamicTableSpec s;
    s.name = "items";
    s.dim = 6;
    s.optimizer = opt;
    s.capacity_rows = s.max_capacity_rows = 1024;
    embed::DynamicTable a(s, Device::kCPU), b(s, Device::kCPU);
    std::mt19937_64 rng(12);
    const int64_t n = 400, d = 6;
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> keys(n);
      for (auto& k : keys) k = static_cast<int64_t>(rng() % 80) * 31 - 700;
      std::vector<float> dout(n * d);
      for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      const Tensor dt(dout.data(), DType::kF32, Device::kCPU, {n, d});
      std::vector<int64_t> ua(n), ub(n), ra, rb;
      std::vector<int32_t> ia(n), ib(n), ca(n), cb(n);
      const int64_t u =
          a.dedupe(ctx, vec_tensor(keys), vec_tensor(ua), vec_tensor(ia), vec_tensor(ca));
      ASSERT_EQ(b.dedupe(ctx, vec_tensor(keys), vec_tensor(ub), vec_tensor(ib), vec_tensor(cb)), u);
      ua.resize(u), ub.resize(u), ca.resize(u), cb.resize(u), ra.resize(u), rb.resize(u);
      a.begin_step(step), b.begin_step(step);
      a.find_or_insert(ctx, vec_tensor(ua), vec_tensor(ca), vec_tensor(ra));
      b.find_or_insert(ctx, vec_tensor(ub), vec_tensor(cb), vec_tensor(rb));
      std::vector<float> oa(n * d), win(u * d), ob(n * d);
      a.lookup(ctx, vec_tensor(ua), vec_tensor(ra), vec_tensor(ia),
               Tensor(oa.data(), DType::kF32, Device::kCPU, {n, d}), true);
      b.gather(ctx, vec_tensor(ub), vec_tensor(rb),
               Tensor(win.data(), DType::kF32, Device::kCPU, {u, d}), true);
      embedding_fwd(ctx, Tensor(win.data(), DType::kF32, Device::kCPU, {u, d}), vec_tensor(ib),
                    1.0f, Tensor(), Tensor(), Tensor(ob.data(), DType::kF32, Device::kCPU, {n, d}));
      ASSERT_EQ(oa, ob) << opt;
      // backward's grad and touched are scratch (any contents on entry): poisoned here.
      std::vector<float> ga(u * d, std::nanf("")), gb(u * d, 0.0f);
      std::vector<uint8_t> ta(u, 1), tb(u, 0);
      const SparseOptimizerSpec spec = a.optimizer_spec(step + 1, 0.05f);
      a.backward(ctx, spec, vec_tensor(ra), dt, 0.5f,
                 Tensor(ga.data(), DType::kF32, Device::kCPU, {u, d}), vec_tensor(ta));
      b.reduce_grad(ctx, dt, 0.5f, Tensor(gb.data(), DType::kF32, Device::kCPU, {u, d}),
                    vec_tensor(tb));
      b.apply(ctx, spec, vec_tensor(rb), Tensor(gb.data(), DType::kF32, Device::kCPU, {u, d}),
              vec_tensor(tb));
      ASSERT_EQ(ga, std::vector<float>(u * d, 0.0f));
      ASSERT_EQ(ta, std::vector<uint8_t>(u, 0));
    }
    const embed::TableRows xa = a.export_rows(ctx), xb = b.export_rows(ctx);
    EXPECT_EQ(xa.keys, xb.keys);
    EXPECT_EQ(std::memcmp(xa.values.data(), xb.values.data(), xa.values.size() * 4), 0) << opt;
  }
}

}  // namespace
}  // namespace hstu
