// test_dropout.cpp — CPU plain dropout (input embeddings) and the Philox mask it shares with the
// fused LayerNorm path and the CUDA kernels.
//
// Asserts:
//  - y = x * keep / (1-p) with keep = dropout_keep(seed, offset, row * cols + col, p), for f32
//    and f64, strided 2-D views, a 3-D tensor (flat logical index), in place (y aliasing x);
//  - the mask depends on the logical index only (strided and contiguous give the same mask) and
//    follows the counter layout (offset + 1 shifts the stream by four elements);
//  - statistics: the keep rate is 1-p within 5 sigma over 2^20 elements (kept values are
//    x / (1-p), checked above);
//  - determinism: the same (seed, offset) gives the same mask, another seed a different one;
//  - p = 0 is the identity; p outside [0, 1) raises hstu::Error;
//  - dropout_bwd matches float64 finite differences of <g, dropout(x)> (fixed seed), in place too.
#include <cmath>

#include "common/harness.h"
#include "core/philox.h"
#include "ops/layernorm.h"

namespace hstu::test {
namespace {

// Naive dropout of x with the mask at flat logical index i.
Tensor naive_dropout(const Tensor& x, const DropoutSpec& drop) {
  Tensor y = alloc(DType::kF64, {x.numel()});
  for (int64_t i = 0; i < x.numel(); ++i)
    set(y, i,
        dropout_keep(drop.seed, drop.offset, static_cast<uint64_t>(i), drop.p)
            ? get(x, i) / (1.0 - drop.p)
            : 0.0);
  return y;
}

TEST(DropoutCpu, ForwardMatchesPhiloxMask) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF32 ? 1e-6 : 1e-15;  // one rounding of x / (1-p), |x| <= 1
    const DropoutSpec drop{0.25f, 0xDEADBEEFCAFEull, 12345};
    const Tensor x = alloc_strided(dt, 77, 33, 2), y = alloc_strided(dt, 77, 33, 1);
    fill_uniform(x, -1, 1);
    const Tensor want = naive_dropout(x, drop);
    dropout_fwd(ctx, x, drop, y);
    expect_close(y, want, tol, tol, "y");
    EXPECT_TRUE(padding_intact(y, 1));
    dropout_fwd(ctx, x, drop, x);  // in place
    expect_close(x, want, tol, tol, "y (in place)");
    const Tensor x3 = alloc(dt, {5, 3, 7}), y3 = alloc(dt, {5, 3, 7});  // flat index r * 21 + c
    fill_uniform(x3, -1, 1);
    dropout_fwd(ctx, x3, drop, y3);
    expect_close(y3, naive_dropout(x3, drop), tol, tol, "y (3-D)");
  }
}

// Keep mask (1/0) of dropout applied to ones [rows, cols].
std::vector<int> mask_of(Ctx& ctx, const DropoutSpec& drop, int64_t rows, int64_t cols) {
  const Tensor ones = alloc(DType::kF32, {rows, cols});
  fill_value(ones, 1);
  dropout_fwd(ctx, ones, drop, ones);
  std::vector<int> m(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) m[static_cast<size_t>(i)] = get(ones, i) != 0;
  return m;
}

TEST(DropoutCpu, MaskStatisticsAndDeterminism) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t rows = 1024, cols = 1024, n = rows * cols;
  const float p = 0.2f;
  const uint64_t seed = rng()();
  const std::vector<int> a = mask_of(ctx, {p, seed, 0}, rows, cols);
  double kept = 0;
  for (int v : a) kept += v;
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(kept / n, 1 - p, 5 * sigma) << "seed " << seed;
  // Determinism and sensitivity to the seed.
  EXPECT_EQ(a, mask_of(ctx, {p, seed, 0}, rows, cols));
  const std::vector<int> other = mask_of(ctx, {p, seed + 1, 0}, rows, cols);
  double differ = 0;
  for (int64_t i = 0; i < n; ++i)
    differ += a[static_cast<size_t>(i)] != other[static_cast<size_t>(i)];
  EXPECT_NEAR(differ / n, 2 * p * (1 - p), 10 * sigma);  // independent masks disagree 2p(1-p)
  // Counter layout: offset + 1 starts four elements further into the stream.
  const std::vector<int> shifted = mask_of(ctx, {p, seed, 1}, rows, cols);
  EXPECT_TRUE(std::equal(shifted.begin(), shifted.end() - 4, a.begin() + 4));
}

TEST(DropoutCpu, MaskUsesTheLogicalIndex) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DropoutSpec drop{0.5f, 42, 3};
  const Tensor xs = alloc_strided(DType::kF32, 31, 17, 5), xc = alloc(DType::kF32, {31, 17});
  fill_value(xs, 1);
  fill_value(xc, 1);
  dropout_fwd(ctx, xs, drop, xs);
  dropout_fwd(ctx, xc, drop, xc);
  EXPECT_EQ(max_abs_diff(xs, xc), 0.0);
}

TEST(DropoutCpu, ZeroRateIsIdentityAndBadRatesThrow) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor x = alloc(DType::kF32, {9, 11}), y = alloc(DType::kF32, {9, 11});
  fill_uniform(x, -1, 1);
  poison(y);
  dropout_fwd(ctx, x, {0.0f, 1, 2}, y);
  EXPECT_EQ(max_abs_diff(x, y), 0.0);
  EXPECT_THROW(dropout_fwd(ctx, x, {1.0f, 1, 2}, y), Error);
  EXPECT_THROW(dropout_fwd(ctx, x, {-0.1f, 1, 2}, y), Error);
  EXPECT_THROW(dropout_fwd(ctx, x, {0.1f, 1, 2}, alloc(DType::kF32, {9, 12})), Error);
}

TEST(DropoutCpu, BackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DropoutSpec drop{0.4f, 2024, 9};
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "separate dx");
    const Tensor x = alloc_strided(DType::kF64, 13, 10, 1), g = alloc(DType::kF64, {13, 10});
    const Tensor y = alloc(DType::kF64, {13, 10});
    fill_uniform(x, -1, 1);
    fill_uniform(g, -1, 1);
    const Tensor dy = clone(g);
    const Tensor dx = in_place ? dy : alloc_strided(DType::kF64, 13, 10, 2);
    dropout_bwd(ctx, dy, drop, dx);
    const auto loss = [&] {
      dropout_fwd(ctx, x, drop, y);
      return dot(g, y);
    };
    expect_grad_matches_fd(loss, x, dx, "dx", 130);
  }
}

}  // namespace
}  // namespace hstu::test
