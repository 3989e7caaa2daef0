// test_losses.cpp — the ranking losses: multi-task BCE from label bitmasks and multi-class
// cross-entropy.
//
// Asserts:
//  - losses and gradients match naive long-double formulas (log(sigmoid), log(softmax)) at
//    moderate logits, in f32 and f64, on strided logits, with loss_scale applied to both;
//  - gradients match float64 finite differences of the loss;
//  - logits of +-1000 give finite losses equal to the asymptotic values and finite gradients;
//  - label bits >= K are ignored (bit i = task i, LSB first), the gradient is optional, the
//    result does not depend on the thread count, and bad labels / shapes raise hstu::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/harness.h"
#include "core/context.h"
#include "ops/losses.h"

namespace hstu::test {
namespace {

Tensor labels_tensor(const std::vector<int32_t>& v) {
  const Tensor t = alloc(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), v[i]);
  return t;
}

long double naive_bce(const Tensor& x, const std::vector<int32_t>& y, int64_t k,
                      std::vector<long double>& grad) {
  long double sum = 0;
  grad.assign(static_cast<size_t>(x.numel()), 0);
  for (int64_t r = 0; r < x.dim(0); ++r)
    for (int64_t t = 0; t < k; ++t) {
      const long double v = get(x, r * k + t), s = 1 / (1 + std::exp(-v));
      const int bit = (y[r] >> t) & 1;
      sum -= bit ? std::log(s) : std::log(1 - s);
      grad[r * k + t] = s - bit;
    }
  return sum;
}

long double naive_ce(const Tensor& x, const std::vector<int32_t>& y, int64_t c,
                     std::vector<long double>& grad) {
  long double sum = 0;
  grad.assign(static_cast<size_t>(x.numel()), 0);
  for (int64_t r = 0; r < x.dim(0); ++r) {
    long double z = 0;
    for (int64_t j = 0; j < c; ++j) z += std::exp(static_cast<long double>(get(x, r * c + j)));
    sum -= std::log(std::exp(static_cast<long double>(get(x, r * c + y[r]))) / z);
    for (int64_t j = 0; j < c; ++j)
      grad[r * c + j] = std::exp(static_cast<long double>(get(x, r * c + j))) / z - (j == y[r]);
  }
  return sum;
}

std::vector<int32_t> random_labels(int64_t n, int64_t hi) {
  std::vector<int32_t> y(static_cast<size_t>(n));
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(hi - 1));
  for (auto& v : y) v = d(rng());
  return y;
}

TEST(LossesCpu, BceMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 37, k = 8;
  const double scale = 1.0 / 37;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF32 ? 1e-5 : 1e-12;
    const Tensor x = alloc_strided(dt, n, k, 1), g = alloc_strided(dt, n, k, 2);
    fill_uniform(x, -6, 6);
    const std::vector<int32_t> y = random_labels(n, 256);
    const Tensor loss = alloc(DType::kF64, {1});
    bce_multitask(ctx, x, labels_tensor(y), loss, g, scale);
    std::vector<long double> want;
    const long double sum = naive_bce(x, y, k, want);
    EXPECT_NEAR(get(loss, 0), static_cast<double>(sum * scale), tol * sum * scale);
    for (int64_t i = 0; i < n * k; ++i) {
      ASSERT_NEAR(get(g, i), static_cast<double>(want[i] * scale), tol) << i;
    }
    EXPECT_TRUE(padding_intact(g, 2));
  }
}

TEST(LossesCpu, CrossEntropyMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 29, c = 10;
  const double scale = 0.25;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF32 ? 1e-5 : 1e-12;
    const Tensor x = alloc_strided(dt, n, c, 1), g = alloc_strided(dt, n, c, 1);
    fill_uniform(x, -8, 8);
    const std::vector<int32_t> y = random_labels(n, c);
    const Tensor loss = alloc(DType::kF64, {1});
    cross_entropy(ctx, x, labels_tensor(y), loss, g, scale);
    std::vector<long double> want;
    const long double sum = naive_ce(x, y, c, want);
    EXPECT_NEAR(get(loss, 0), static_cast<double>(sum * scale), tol * sum * scale);
    for (int64_t i = 0; i < n * c; ++i) {
      ASSERT_NEAR(get(g, i), static_cast<double>(want[i] * scale), tol) << i;
    }
    EXPECT_TRUE(padding_intact(g, 1));
  }
}

TEST(LossesCpu, GradientsMatchFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 13, k = 5;
  const Tensor x = alloc(DType::kF64, {n, k}), g = alloc(DType::kF64, {n, k});
  const Tensor loss = alloc(DType::kF64, {1});
  fill_uniform(x, -4, 4);
  const Tensor yb = labels_tensor(random_labels(n, 32));
  const Tensor yc = labels_tensor(random_labels(n, k));
  const auto bce = [&] {
    bce_multitask(ctx, x, yb, loss, Tensor(), 0.3);
    return get(loss, 0);
  };
  bce_multitask(ctx, x, yb, loss, g, 0.3);
  expect_grad_matches_fd(bce, x, g, "bce dlogits", 65);
  const auto ce = [&] {
    cross_entropy(ctx, x, yc, loss, Tensor(), 0.3);
    return get(loss, 0);
  };
  cross_entropy(ctx, x, yc, loss, g, 0.3);
  expect_grad_matches_fd(ce, x, g, "ce dlogits", 65);
}

TEST(LossesCpu, StableAtExtremeLogits) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    // BCE, one task: (x, y) = (1000, 1) -> 0, (1000, 0) -> 1000, (-1000, 1) -> 1000, (-1000, 0) ->
    // 0.
    const Tensor x = alloc(dt, {4, 1}), g = alloc(dt, {4, 1}), loss = alloc(DType::kF64, {1});
    set(x, 0, 1000);
    set(x, 1, 1000);
    set(x, 2, -1000);
    set(x, 3, -1000);
    bce_multitask(ctx, x, labels_tensor({1, 0, 1, 0}), loss, g, 1.0);
    EXPECT_DOUBLE_EQ(get(loss, 0), 2000.0);
    const double want_g[] = {0, 1, -1, 0};
    for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(get(g, i), want_g[i]) << i;
    // CE: a row [1000, -1000, 0] labelled 0 costs 0, labelled 1 costs 2000.
    const Tensor xc = alloc(dt, {2, 3}), gc = alloc(dt, {2, 3});
    for (int r = 0; r < 2; ++r) {
      set(xc, r * 3 + 0, 1000);
      set(xc, r * 3 + 1, -1000);
      set(xc, r * 3 + 2, 0);
    }
    cross_entropy(ctx, xc, labels_tensor({0, 1}), loss, gc, 1.0);
    EXPECT_DOUBLE_EQ(get(loss, 0), 2000.0);
    for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(get(gc, i))) << i;
    EXPECT_DOUBLE_EQ(get(gc, 3), 1.0);   // row 1: softmax puts all mass on class 0
    EXPECT_DOUBLE_EQ(get(gc, 4), -1.0);  // and none on the label
  }
}

TEST(LossesCpu, BitmaskDecoding) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  // Two tasks, logits 0 (sigmoid 1/2): gradient = 1/2 - bit. Label 6 = bits 1, 2: task 0 off,
  // task 1 on, bit 2 beyond K ignored; label 1: task 0 on.
  const Tensor x = alloc(DType::kF64, {2, 2}), g = alloc(DType::kF64, {2, 2});
  const Tensor loss = alloc(DType::kF64, {1});
  fill_value(x, 0);
  bce_multitask(ctx, x, labels_tensor({6, 1}), loss, g, 1.0);
  const double want[] = {0.5, -0.5, -0.5, 0.5};
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(get(g, i), want[i]) << i;
  EXPECT_NEAR(get(loss, 0), 4 * std::log(2.0), 1e-15);
}

TEST(LossesCpu, IndependentOfThreadCount) {
  ArenaScope scope;
  const int64_t n = 5000, k = 8;
  const Tensor x = alloc(DType::kF32, {n, k});
  fill_uniform(x, -5, 5);
  const Tensor y = labels_tensor(random_labels(n, 256)), yc = labels_tensor(random_labels(n, k));
  double bce[2], ce[2];
  for (int i = 0; i < 2; ++i) {
    Ctx ctx = cpu_ctx();
    ctx.num_threads = i == 0 ? 1 : 4;
    const Tensor loss = alloc(DType::kF64, {1});
    bce_multitask(ctx, x, y, loss, Tensor(), 1.0 / n);
    bce[i] = get(loss, 0);
    cross_entropy(ctx, x, yc, loss, Tensor(), 1.0 / n);
    ce[i] = get(loss, 0);
  }
  EXPECT_EQ(bce[0], bce[1]);
  EXPECT_EQ(ce[0], ce[1]);
}

TEST(LossesCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor x = alloc(DType::kF32, {2, 3}), loss = alloc(DType::kF64, {1});
  EXPECT_THROW(bce_multitask(ctx, x, labels_tensor({1, -1}), loss, Tensor(), 1.0), Error);
  EXPECT_THROW(cross_entropy(ctx, x, labels_tensor({1, 3}), loss, Tensor(), 1.0), Error);
  EXPECT_THROW(cross_entropy(ctx, x, labels_tensor({1}), loss, Tensor(), 1.0), Error);
  EXPECT_THROW(cross_entropy(ctx, x, labels_tensor({1, 0}), alloc(DType::kF32, {1}), Tensor(), 1.0),
               Error);  // the loss is f64
  EXPECT_THROW(bce_multitask(ctx, x, labels_tensor({1, 0}), loss, alloc(DType::kF32, {3, 2}), 1.0),
               Error);  // dlogits shape
}

}  // namespace
}  // namespace hstu::test
