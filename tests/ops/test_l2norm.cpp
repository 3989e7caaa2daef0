// test_l2norm.cpp — CPU row-wise L2 normalisation y = x / max(||x||, eps).
//
// Asserts:
//  - the forward matches naive double loops for y and the saved clamped norms, f32 and f64,
//    strided x and y (poisoned, nothing written outside), including an all-zero row and rows
//    whose norm is below eps (clamped: y = x / eps);
//  - the backward matches float64 finite differences of <g, y(x)> for normal and clamped rows,
//    overwriting (poisoned dx) and accumulating (random prefill);
//  - bad shapes and eps <= 0 raise hstu::Error.
#include <cmath>

#include "common/harness.h"
#include "ops/l2norm.h"

namespace hstu::test {
namespace {

constexpr float kEps = 1e-3f;

// Rows of x uniform in [-1, 1], except row 0 all zero and every third row scaled to a norm far
// below kEps (the clamped branch, also under finite-difference perturbations).
void fill_rows(const Tensor& x) {
  const int64_t d = x.dim(1);
  fill_uniform(x, -1, 1);
  for (int64_t r = 0; r < x.dim(0); ++r)
    for (int64_t c = 0; c < d; ++c) {
      if (r == 0) set(x, c, 0);
      if (r % 3 == 2) set(x, r * d + c, get(x, r * d + c) * 1e-5);
    }
}

TEST(L2NormCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 41, d = 23;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF32 ? 1e-6 : 1e-14;  // f32: |y| <= 1, a couple of roundings
    const Tensor x = alloc_strided(dt, t, d, 1), y = alloc_strided(dt, t, d, 2);
    const Tensor norms = alloc(dt, {t});
    poison(norms);
    fill_rows(x);
    const Tensor wy = alloc(DType::kF64, {t, d}), wn = alloc(DType::kF64, {t});
    for (int64_t r = 0; r < t; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < d; ++c) ss += get(x, r * d + c) * get(x, r * d + c);
      const double n = std::max(std::sqrt(ss), double(kEps));
      set(wn, r, n);
      for (int64_t c = 0; c < d; ++c) set(wy, r * d + c, get(x, r * d + c) / n);
    }
    l2norm_fwd(ctx, x, kEps, y, norms);
    expect_close(y, wy, tol, tol, "y");
    expect_close(norms, wn, tol, tol, "norms");
    EXPECT_TRUE(padding_intact(y, 2));
    EXPECT_EQ(get(norms, 0), double(kEps)) << "a zero row saves the clamp eps as its norm";
  }
}

TEST(L2NormCpu, BackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 12, d = 9;
  const DType f64 = DType::kF64;
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    const Tensor x = alloc(f64, {t, d}), g = alloc(f64, {t, d});
    fill_rows(x);
    fill_uniform(g, -1, 1);
    const Tensor y = alloc_strided(f64, t, d, 1), norms = alloc(f64, {t});
    const auto loss = [&] {
      l2norm_fwd(ctx, x, kEps, y, norms);
      return dot(g, y);
    };
    loss();
    const Tensor dy = alloc_strided(f64, t, d, 3);
    for (int64_t i = 0; i < g.numel(); ++i) set(dy, i, get(g, i));
    const Tensor dx = alloc(f64, {t, d});
    if (accumulate) fill_uniform(dx, -1, 1);
    const Tensor dx0 = clone(dx);
    l2norm_bwd(ctx, y, norms, kEps, dy, dx, accumulate);
    if (accumulate)
      for (int64_t i = 0; i < dx.numel(); ++i) set(dx, i, get(dx, i) - get(dx0, i));
    // Clamped rows have gradients ~ 1/eps = 1000: compare relative to that scale.
    expect_grad_matches_fd(loss, x, dx, "dx", 108, 1e-7, 1e-5, 1e-6);
  }
}

TEST(L2NormCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor x = alloc(DType::kF32, {4, 8}), y = alloc(DType::kF32, {4, 8});
  EXPECT_THROW(l2norm_fwd(ctx, x, 1e-6f, y, alloc(DType::kF32, {5})), Error);
  EXPECT_THROW(l2norm_fwd(ctx, x, 0.0f, y, alloc(DType::kF32, {4})), Error);
  EXPECT_THROW(
      l2norm_bwd(ctx, y, alloc(DType::kF32, {4}), 1e-6f, y, alloc(DType::kF32, {4, 7}), false),
      Error);
}

}  // namespace
}  // namespace hstu::test
