// test_optimizer.cpp — CPU dense optimiser (Adam, AdamW, SGD) and sum of squares.
//
// Asserts:
//  - three steps of Adam (L2 through the gradient, bias correction at spec.step), AdamW
//    (decoupled decay p -= lr*wd*p) and SGD (L2), with weight decay and grad_scale, match a
//    hand-written double update, f32 and f64, on an odd-sized buffer, within the effect of the
//    decayed gradient's rounding (see the test); gradients are untouched;
//  - sum_squares matches a naive double sum (f32 and f64, odd size, empty buffer) and is
//    bit-identical with 1 and 2 threads;
//  - clipping from a squared norm (clip_norm + grad_sumsq, as the step applies it on the device)
//    equals scaling by clip / norm when the norm exceeds clip, and leaves gradients alone below;
//  - the skip_if_nonfinite guard: with finite guard values the update equals the unguarded one
//    bit for bit; with a NaN or Inf among them nothing is written (params, m, v unchanged);
//  - mismatched buffers and a 0 Adam step raise hstu::Error.
#include <array>
#include <cmath>

#include "common/harness.h"
#include "ops/optimizer.h"

namespace hstu::test {
namespace {

// The reference allows for the rounding of the decayed gradient gi = grad_scale g + wd p: where
// those two terms nearly cancel (Adam's L2 term), gi is a tiny number whose few last bits the
// implementation rounds differently (evaluation order, fused multiply-add), and Adam's update
// gi / (|gi| + eps) amplifies that by up to ~1 / eps. So besides the exact trajectory the test
// runs, per step t, one perturbed only by gi_t += delta_t (4 ulps of |grad_scale g| + |wd p|, in
// the storage type), and bounds each element by tol + the sum of those perturbations' effects
// (first-order error propagation, exact for this update's smooth dependence on gi).
TEST(DenseOptimizerCpu, StepsMatchReference) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 20011;
  constexpr int kSteps = 3;
  for (DType dt : {DType::kF32, DType::kF64})
    for (auto kind :
         {DenseOptimizerSpec::kAdam, DenseOptimizerSpec::kAdamW, DenseOptimizerSpec::kSgd}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " kind " << kind);
      const double tol = dt == DType::kF32 ? 1e-6 : 1e-14;  // f32 storage of p, m, v
      const double ulp = dt == DType::kF32 ? 0x1p-23 : 0x1p-52;
      DenseOptimizerSpec s;
      s.kind = kind;
      s.lr = 0.01f;
      s.weight_decay = 0.1f;
      s.grad_scale = 0.5f;
      const Tensor p = alloc(dt, {n}), g = alloc(dt, {n}), m = alloc(dt, {n}), v = alloc(dt, {n});
      fill_uniform(p, -1, 1);
      fill_value(m, 0);
      fill_value(v, 0);
      // Trajectory 0 exact, trajectory t (1..kSteps) with gi perturbed at step t only.
      struct Traj {
        std::vector<double> p, m, v;
      };
      std::vector<Traj> ref(kSteps + 1);
      for (Traj& r : ref) {
        r.p.resize(static_cast<size_t>(n));
        r.m.assign(r.p.size(), 0.0);
        r.v.assign(r.p.size(), 0.0);
        for (int64_t i = 0; i < n; ++i) r.p[static_cast<size_t>(i)] = get(p, i);
      }
      for (int64_t step = 1; step <= kSteps; ++step) {
        s.step = step;
        fill_uniform(g, -1, 1);
        const Tensor g0 = clone(g);
        const double lr = s.lr, wd = s.weight_decay, b1 = s.beta1, b2 = s.beta2;
        for (int t = 0; t <= kSteps; ++t) {
          Traj& r = ref[static_cast<size_t>(t)];
          for (int64_t i = 0; i < n; ++i) {
            const size_t k = static_cast<size_t>(i);
            const double gs = double(s.grad_scale) * get(g, i);
            double gi = gs;
            if (kind == DenseOptimizerSpec::kSgd) {
              const double delta =
                  t == step ? 4 * ulp * (std::fabs(gs) + std::fabs(wd * r.p[k])) : 0;
              r.p[k] -= lr * (gi + wd * r.p[k] + delta);
              continue;
            }
            if (kind == DenseOptimizerSpec::kAdamW) r.p[k] *= 1 - lr * wd;
            if (kind == DenseOptimizerSpec::kAdam) gi += wd * r.p[k];
            if (t == step) gi += 4 * ulp * (std::fabs(gs) + std::fabs(wd * r.p[k]));
            r.m[k] = b1 * r.m[k] + (1 - b1) * gi;
            r.v[k] = b2 * r.v[k] + (1 - b2) * gi * gi;
            const double mh = r.m[k] / (1 - std::pow(b1, step)),
                         vh = r.v[k] / (1 - std::pow(b2, step));
            r.p[k] -= lr * mh / (std::sqrt(vh) + s.eps);
          }
        }
        dense_optimizer_step(ctx, s, p, g, m, v);
        EXPECT_EQ(max_abs_diff(g, g0), 0.0) << "gradients must be left untouched";
        const Traj& exact = ref[0];
        int bad = 0;
        auto far = [&](double got, const std::vector<double> Traj::*field, size_t k) {
          double bound = tol;
          for (int t = 1; t <= step; ++t)
            bound += std::fabs((ref[static_cast<size_t>(t)].*field)[k] - (exact.*field)[k]);
          return !(std::fabs(got - (exact.*field)[k]) <= bound);
        };
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = static_cast<size_t>(i);
          bad += far(get(p, i), &Traj::p, k);
          if (kind != DenseOptimizerSpec::kSgd)
            bad += far(get(m, i), &Traj::m, k) + far(get(v, i), &Traj::v, k);
        }
        EXPECT_EQ(bad, 0) << "step " << step << " (seed " << test_seed() << ")";
      }
    }
}

TEST(DenseOptimizerCpu, SumSquares) {
  ArenaScope scope;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = 1000003;
    const Tensor x = alloc(dt, {n});
    fill_uniform(x, -2, 2);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += get(x, i) * get(x, i);
    Ctx ctx = cpu_ctx();
    ctx.num_threads = 1;
    const double one = sum_squares(ctx, x);
    ctx.num_threads = 2;
    const double two = sum_squares(ctx, x);
    EXPECT_NEAR(one, want, 1e-10 * want);  // both sums in double; different orders
    EXPECT_EQ(one, two) << "fixed blocks: the same bits whatever the thread count";
    EXPECT_EQ(sum_squares(ctx, alloc(dt, {0})), 0.0);
  }
}

TEST(DenseOptimizerCpu, ClipFromSumOfSquaresMatchesGradScale) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 1001;
  const Tensor g = alloc(DType::kF32, {n}), sumsq = alloc(DType::kF64, {1});
  fill_uniform(g, -1, 1);
  sum_squares_into(ctx, g, sumsq);
  const double norm = std::sqrt(get(sumsq, 0));
  ASSERT_GT(norm, 0.0);
  for (double clip : {0.25 * norm, 4.0 * norm}) {
    SCOPED_TRACE(testing::Message() << "clip " << clip << ", norm " << norm);
    const Tensor pa = alloc(DType::kF32, {n}), ma = alloc(DType::kF32, {n}),
                 va = alloc(DType::kF32, {n});
    const Tensor pb = alloc(DType::kF32, {n}), mb = alloc(DType::kF32, {n}),
                 vb = alloc(DType::kF32, {n});
    fill_uniform(pa, -1, 1);
    copy_tensor(pb, pa);
    for (const Tensor& t : {ma, va, mb, vb}) fill_value(t, 0);
    DenseOptimizerSpec scaled;  // the host-side way: the factor computed here
    scaled.grad_scale = clip < norm ? static_cast<float>(clip / norm) : 1.0f;
    dense_optimizer_step(ctx, scaled, pa, g, ma, va);
    DenseOptimizerSpec clipped;  // the step's way: the factor read from the squared norm
    clipped.clip_norm = clip;
    clipped.grad_sumsq = sumsq;
    dense_optimizer_step(ctx, clipped, pb, g, mb, vb);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(get(pa, i), get(pb, i)) << "param " << i;
      ASSERT_EQ(get(ma, i), get(mb, i)) << "m " << i;
    }
  }
}

TEST(DenseOptimizerCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor p = alloc(DType::kF32, {10}), g = alloc(DType::kF32, {10});
  DenseOptimizerSpec s;
  EXPECT_THROW(dense_optimizer_step(ctx, s, p, g, alloc(DType::kF32, {9}), p), Error);
  EXPECT_THROW(dense_optimizer_step(ctx, s, p, alloc(DType::kF64, {10}), g, g), Error);
  s.step = 0;
  EXPECT_THROW(dense_optimizer_step(ctx, s, p, g, g, g), Error);
  EXPECT_THROW(sum_squares(ctx, alloc(DType::kF32, {4, 6}).cols(0, 3)), Error);
}

TEST(DenseOptimizerCpu, NonfiniteGuardSkipsTheWholeUpdate) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t n = 1037;
  for (auto kind :
       {DenseOptimizerSpec::kAdam, DenseOptimizerSpec::kAdamW, DenseOptimizerSpec::kSgd}) {
    SCOPED_TRACE(testing::Message() << "kind " << kind);
    DenseOptimizerSpec s;
    s.kind = kind;
    s.weight_decay = 0.1f;
    const Tensor g = alloc(DType::kF32, {n});
    fill_uniform(g, -1, 1);
    const Tensor p0 = alloc(DType::kF32, {n}), m0 = alloc(DType::kF32, {n}),
                 v0 = alloc(DType::kF32, {n});
    fill_uniform(p0, -1, 1);
    fill_uniform(m0, -1, 1);
    fill_uniform(v0, 0, 1);
    const Tensor guard = alloc(DType::kF64, {2});
    const auto run = [&](double a, double b, bool guarded) {
      const Tensor p = clone(p0), m = clone(m0), v = clone(v0);
      guard.as<double>()[0] = a;
      guard.as<double>()[1] = b;
      DenseOptimizerSpec t = s;
      if (guarded) t.skip_if_nonfinite = guard;
      dense_optimizer_step(ctx, t, p, g, m, v);
      return std::array<Tensor, 3>{p, m, v};
    };
    const auto plain = run(0, 0, false), finite = run(3.5, -2.0, true);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(max_abs_diff(plain[k], finite[k]), 0.0) << k;
    EXPECT_GT(max_abs_diff(plain[0], p0), 0.0);  // the update does move the weights
    for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
      const auto skipped = run(1.0, bad, true), skipped0 = run(bad, 1.0, true);
      const Tensor before[] = {p0, m0, v0};
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(max_abs_diff(skipped[k], before[k]), 0.0) << k << " " << bad;
        EXPECT_EQ(max_abs_diff(skipped0[k], before[k]), 0.0) << k << " " << bad;
      }
    }
  }
}

}  // namespace
}  // namespace hstu::test
