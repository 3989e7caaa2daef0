// test_activation.cpp — CPU SiLU / ReLU / GELU forward and backward.
//
// Asserts:
//  - the forward matches plain double formulas (GELU = tanh approximation, pinned at two values)
//    for f32 and f64, on strided views of odd width with a poisoned output (and nothing written
//    outside the view), and in place (y aliasing x);
//  - the backward (from the forward input x) matches float64 finite differences of <g, act(x)>,
//    on strided views, including dx aliasing dy (ReLU inputs kept away from the kink at 0);
//  - with a head structure (ActHeads), each head's first `width` columns match the plain call on
//    dense copies and the head padding is neither read (NaN there) nor written;
//  - mismatched shapes raise hstu::Error.
#include <cmath>

#include "common/harness.h"
#include "ops/activation.h"

namespace hstu::test {
namespace {

double naive_act(Activation act, double x) {
  switch (act) {
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kGelu:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return NAN;
}

const char* act_name(Activation a) {
  return a == Activation::kSilu ? "silu" : a == Activation::kRelu ? "relu" : "gelu";
}

// Uniform in [-4, 4], with |x| >= 0.01 so finite differences never straddle ReLU's kink.
void fill_away_from_zero(const Tensor& x) {
  fill_uniform(x, -4, 4);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(get(x, i)) < 0.01) set(x, i, 0.5);
}

TEST(ActivationCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (DType dt : {DType::kF32, DType::kF64})
    for (Activation act : {Activation::kSilu, Activation::kRelu, Activation::kGelu}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << act_name(act));
      const double tol = dt == DType::kF32 ? 2e-6 : 1e-14;  // f32: a few ulps of exp/tanh
      const int64_t rows = 129, cols = 37;
      const Tensor x = alloc_strided(dt, rows, cols, 2), y = alloc_strided(dt, rows, cols, 3);
      fill_uniform(x, -6, 6);
      const Tensor want = alloc(DType::kF64, {rows, cols});
      for (int64_t i = 0; i < x.numel(); ++i) set(want, i, naive_act(act, get(x, i)));
      activation_fwd(ctx, act, x, y);
      expect_close(y, want, tol, tol, "y");
      EXPECT_TRUE(padding_intact(y, 3));
      activation_fwd(ctx, act, x, x);  // in place
      expect_close(x, want, tol, tol, "y (in place)");
    }
}

TEST(ActivationCpu, GeluIsTheTanhApproximation) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor x = alloc(DType::kF64, {1, 2}), y = alloc(DType::kF64, {1, 2});
  set(x, 0, 1.0);
  set(x, 1, -0.5);
  activation_fwd(ctx, Activation::kGelu, x, y);
  EXPECT_NEAR(get(y, 0), 0.8411919906082768, 1e-15);  // the erf form gives 0.8413447460685429
  EXPECT_NEAR(get(y, 1), -0.15428599017485606, 1e-15);
}

TEST(ActivationCpu, BackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  for (Activation act : {Activation::kSilu, Activation::kRelu, Activation::kGelu})
    for (bool alias : {false, true}) {
      SCOPED_TRACE(testing::Message() << act_name(act) << (alias ? " dx aliases dy" : ""));
      const int64_t rows = 17, cols = 13;
      const Tensor x = alloc_strided(DType::kF64, rows, cols, 1);
      const Tensor g = alloc(DType::kF64, {rows, cols}), y = alloc(DType::kF64, {rows, cols});
      fill_away_from_zero(x);
      fill_uniform(g, -1, 1);
      const Tensor dy = alloc_strided(DType::kF64, rows, cols, 2);
      for (int64_t i = 0; i < g.numel(); ++i) set(dy, i, get(g, i));
      const Tensor dx = alias ? dy : alloc_strided(DType::kF64, rows, cols, 1);
      activation_bwd(ctx, act, x, dy, dx);
      EXPECT_TRUE(padding_intact(dx, 1));
      const auto loss = [&] {
        activation_fwd(ctx, act, x, y);
        return dot(g, y);
      };
      expect_grad_matches_fd(loss, x, dx, "dx", 256);
    }
}

TEST(ActivationCpu, HeadStructureMatchesDenseCalls) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t rows = 11, heads = 3, w = 5, stride = 8;
  const Tensor x = alloc(DType::kF64, {rows, heads * w});  // dense heads
  fill_uniform(x, -4, 4);
  const Tensor y = alloc(DType::kF64, {rows, heads * stride});  // padded heads
  poison(y);
  activation_fwd(ctx, Activation::kSilu, x, y, {heads, w});
  const Tensor want = alloc(DType::kF64, {rows, heads * w});
  activation_fwd(ctx, Activation::kSilu, x, want);
  expect_close(unpad_heads(y, heads, w, "y"), want, 0, 0, "y");
  // Backward: dy padded (NaN padding: must not be read), x and dx dense.
  const Tensor dy = alloc(DType::kF64, {rows, heads * stride}),
               g = alloc(DType::kF64, {rows, heads * w});
  poison(dy);
  fill_uniform(g, -1, 1);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < heads * w; ++i)
      set(dy, t * heads * stride + (i / w) * stride + i % w, get(g, t * heads * w + i));
  const Tensor dx = alloc(DType::kF64, {rows, heads * w}),
               dx_want = alloc(DType::kF64, {rows, heads * w});
  activation_bwd(ctx, Activation::kSilu, x, dy, dx, {heads, w});
  activation_bwd(ctx, Activation::kSilu, x, g, dx_want);
  expect_close(dx, dx_want, 0, 0, "dx");
  EXPECT_THROW(activation_fwd(ctx, Activation::kSilu, x, y, {heads, stride + 1}), Error);
  EXPECT_THROW(activation_fwd(ctx, Activation::kSilu, x, y, {4, w}), Error);
}

TEST(ActivationCpu, RejectsMismatchedShapes) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor x = alloc(DType::kF32, {4, 5});
  EXPECT_THROW(activation_fwd(ctx, Activation::kSilu, x, alloc(DType::kF32, {4, 6})), Error);
  EXPECT_THROW(activation_fwd(ctx, Activation::kSilu, x, alloc(DType::kF64, {4, 5})), Error);
  EXPECT_THROW(activation_bwd(ctx, Activation::kRelu, x, x, alloc(DType::kF32, {5, 5})), Error);
}

}  // namespace
}  // namespace hstu::test
