// test_layernorm.cpp — CPU LayerNorm and the fused y = Dropout(u * LN(o)) of the HSTU layer.
//
// Asserts:
//  - layernorm_fwd matches a naive double LayerNorm (y, mean, rstd), affine and non-affine,
//    f32 and f64, odd width, strided x and y, poisoned outputs, nothing written outside views;
//  - layernorm_bwd matches float64 finite differences for dx (overwrite and accumulate into a
//    random prefill), dw and db (accumulated into random prefills), affine and non-affine;
//  - ln_mul_dropout_fwd matches a naive double reference whose mask is dropout_keep at the
//    logical index row * E + col (p = 0.3 and p = 0), affine and non-affine, strided u, f32/f64,
//    and equals LayerNorm -> multiply -> dropout_fwd run as separate ops;
//  - ln_mul_dropout_bwd matches finite differences for do and du (overwritten, poisoned before,
//    strided du) and dw, db (accumulated), with the fixed-seed dropout mask;
//  - dx, dw, db are bit-identical with 1 and 2 threads; bad arguments raise hstu::Error.
#include <cmath>

#include "common/harness.h"
#include "core/philox.h"
#include "ops/layernorm.h"

namespace hstu::test {
namespace {

// Naive LayerNorm of x [T, D] in double; w, b optional. Fills y [T, D], mean [T], rstd [T].
void naive_ln(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
              const Tensor& mean, const Tensor& rstd) {
  const int64_t t = x.dim(0), d = x.dim(1);
  for (int64_t r = 0; r < t; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < d; ++c) mu += get(x, r * d + c) / d;
    for (int64_t c = 0; c < d; ++c) var += std::pow(get(x, r * d + c) - mu, 2) / d;
    const double rs = 1 / std::sqrt(var + eps);
    set(mean, r, mu);
    set(rstd, r, rs);
    for (int64_t c = 0; c < d; ++c) {
      double v = (get(x, r * d + c) - mu) * rs;
      if (!w.empty()) v *= get(w, c);
      if (!b.empty()) v += get(b, c);
      set(y, r * d + c, v);
    }
  }
}

// w, b [D] random in [0.5, 1.5] / [-0.5, 0.5], or empty (non-affine).
void make_params(DType dt, int64_t d, bool affine, Tensor& w, Tensor& b) {
  w = b = Tensor();
  if (!affine) return;
  w = alloc(dt, {d});
  b = alloc(dt, {d});
  fill_uniform(w, 0.5, 1.5);
  fill_uniform(b, -0.5, 0.5);
}

// a - b element-wise into a new f64 tensor (the part an accumulating backward added).
Tensor minus(const Tensor& a, const Tensor& b) {
  Tensor out = clone(a);
  for (int64_t i = 0; i < a.numel(); ++i) set(out, i, get(a, i) - get(b, i));
  return out;
}

TEST(LayerNormCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 67, d = 45;
  for (DType dt : {DType::kF32, DType::kF64})
    for (bool affine : {true, false}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << (affine ? " affine" : " plain"));
      const double tol = dt == DType::kF32 ? 1e-5 : 1e-12;  // f32: output rounding of |y| < 8
      Tensor w, b;
      make_params(dt, d, affine, w, b);
      const Tensor x = alloc_strided(dt, t, d, 2), y = alloc_strided(dt, t, d, 1);
      fill_uniform(x, -2, 3);
      const Tensor mean = alloc(dt, {t}), rstd = alloc(dt, {t});
      poison(mean);
      poison(rstd);
      const Tensor wy = alloc(DType::kF64, {t, d}), wm = alloc(DType::kF64, {t}),
                   wr = alloc(DType::kF64, {t});
      naive_ln(x, w, b, 1e-5, wy, wm, wr);
      layernorm_fwd(ctx, x, w, b, 1e-5f, y, mean, rstd);
      expect_close(y, wy, tol, tol, "y");
      expect_close(mean, wm, tol, tol, "mean");
      expect_close(rstd, wr, tol, tol, "rstd");
      EXPECT_TRUE(padding_intact(y, 1));
    }
}

TEST(LayerNormCpu, BackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 9, d = 19;
  const DType f64 = DType::kF64;
  for (bool affine : {true, false})
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message() << (affine ? "affine" : "plain")
                                      << (accumulate ? " accumulate dx" : " overwrite dx"));
      Tensor w, b;
      make_params(f64, d, affine, w, b);
      const Tensor x = alloc_strided(f64, t, d, 1), g = alloc(f64, {t, d});
      fill_uniform(x, -1, 1);
      fill_uniform(g, -1, 1);
      const Tensor y = alloc(f64, {t, d}), mean = alloc(f64, {t}), rstd = alloc(f64, {t});
      const auto loss = [&] {
        layernorm_fwd(ctx, x, w, b, 1e-5f, y, mean, rstd);
        return dot(g, y);
      };
      loss();  // saves mean, rstd at the unperturbed x
      const Tensor dx = alloc_strided(f64, t, d, 2);
      if (accumulate) fill_uniform(dx, -1, 1);
      const Tensor dx0 = clone(dx);
      Tensor dw, db, dw0, db0;
      if (affine) {
        dw = alloc(f64, {d});
        db = alloc(f64, {d});
        fill_uniform(dw, -1, 1);
        fill_uniform(db, -1, 1);
        dw0 = clone(dw);
        db0 = clone(db);
      }
      layernorm_bwd(ctx, x, w, mean, rstd, g, dx, accumulate, dw, db);
      EXPECT_TRUE(padding_intact(dx, 2));
      expect_grad_matches_fd(loss, x, accumulate ? minus(dx, dx0) : dx, "dx", 200);
      if (affine) {
        expect_grad_matches_fd(loss, w, minus(dw, dw0), "dw");
        expect_grad_matches_fd(loss, b, minus(db, db0), "db");
      }
    }
}

// Naive y = mask * u * LN(o) with mask from dropout_keep at index r * E + c.
Tensor naive_ln_mul_dropout(const Tensor& o, const Tensor& u, const Tensor& w, const Tensor& b,
                            const DropoutSpec& drop) {
  const int64_t t = o.dim(0), e = o.dim(1);
  const Tensor ln = alloc(DType::kF64, {t, e}), m = alloc(DType::kF64, {t}),
               r = alloc(DType::kF64, {t});
  naive_ln(o, w, b, 1e-6, ln, m, r);
  for (int64_t i = 0; i < t * e; ++i) {
    const bool keep = dropout_keep(drop.seed, drop.offset, static_cast<uint64_t>(i), drop.p);
    set(ln, i, keep ? get(u, i) * get(ln, i) / (1.0 - drop.p) : 0.0);
  }
  return ln;
}

TEST(LnMulDropoutCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 53, e = 35;
  for (DType dt : {DType::kF32, DType::kF64})
    for (bool affine : {true, false})
      for (float p : {0.3f, 0.0f}) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(dt) << (affine ? " affine" : " plain") << " p=" << p);
        const double tol = dt == DType::kF32 ? 3e-5 : 1e-12;  // f32: |y| < 20, a few roundings
        Tensor w, b;
        make_params(dt, e, affine, w, b);
        const Tensor o = alloc(dt, {t, e}), u = alloc_strided(dt, t, e, 3);
        fill_uniform(o, -2, 2);
        fill_uniform(u, -2, 2);
        const DropoutSpec drop{p, 1234567, 77};
        const Tensor y = alloc_strided(dt, t, e, 1), mean = alloc(dt, {t}), rstd = alloc(dt, {t});
        ln_mul_dropout_fwd(ctx, o, u, w, b, 1e-6f, drop, y, mean, rstd);
        expect_close(y, naive_ln_mul_dropout(o, u, w, b, drop), tol, tol, "y");
        EXPECT_TRUE(padding_intact(y, 1));
        // The same as the unfused ops: LayerNorm, multiply by u, dropout_fwd.
        const Tensor ln = alloc(dt, {t, e}), yy = alloc(dt, {t, e});
        layernorm_fwd(ctx, o, w, b, 1e-6f, ln, mean, rstd);
        for (int64_t i = 0; i < t * e; ++i) set(ln, i, get(ln, i) * get(u, i));
        dropout_fwd(ctx, ln, drop, yy);
        expect_close(y, yy, tol, tol, "fused vs unfused");
      }
}

TEST(LnMulDropoutCpu, BackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 8, e = 21;
  const DType f64 = DType::kF64;
  for (bool affine : {true, false})
    for (float p : {0.3f, 0.0f}) {
      SCOPED_TRACE(testing::Message() << (affine ? "affine" : "plain") << " p=" << p);
      Tensor w, b;
      make_params(f64, e, affine, w, b);
      const Tensor o = alloc(f64, {t, e}), u = alloc_strided(f64, t, e, 2), g = alloc(f64, {t, e});
      fill_uniform(o, -1, 1);
      fill_uniform(u, -1, 1);
      fill_uniform(g, -1, 1);
      const DropoutSpec drop{p, 99, 5};
      const Tensor y = alloc(f64, {t, e}), mean = alloc(f64, {t}), rstd = alloc(f64, {t});
      const auto loss = [&] {
        ln_mul_dropout_fwd(ctx, o, u, w, b, 1e-6f, drop, y, mean, rstd);
        return dot(g, y);
      };
      loss();
      const Tensor do_ = alloc(f64, {t, e}), du = alloc_strided(f64, t, e, 1);
      poison(do_);
      Tensor dw, db, dw0, db0;
      if (affine) {
        dw = alloc(f64, {e});
        db = alloc(f64, {e});
        fill_uniform(dw, -1, 1);
        fill_uniform(db, -1, 1);
        dw0 = clone(dw);
        db0 = clone(db);
      }
      ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, g, do_, du, dw, db);
      EXPECT_TRUE(padding_intact(du, 1));
      expect_grad_matches_fd(loss, o, do_, "do", 168);
      expect_grad_matches_fd(loss, u, du, "du", 168);
      if (affine) {
        expect_grad_matches_fd(loss, w, minus(dw, dw0), "dw");
        expect_grad_matches_fd(loss, b, minus(db, db0), "db");
      }
    }
}

TEST(LayerNormCpu, ParameterGradientsIndependentOfThreadCount) {
  ArenaScope scope;
  const int64_t t = 1000, d = 64;
  const DType f32 = DType::kF32;
  Tensor w, b;
  make_params(f32, d, true, w, b);
  const Tensor o = alloc(f32, {t, d}), u = alloc(f32, {t, d}), g = alloc(f32, {t, d});
  fill_uniform(o, -1, 1);
  fill_uniform(u, -1, 1);
  fill_uniform(g, -1, 1);
  const Tensor y = alloc(f32, {t, d}), mean = alloc(f32, {t}), rstd = alloc(f32, {t});
  const DropoutSpec drop{0.2f, 7, 0};
  Ctx ctx = cpu_ctx();
  ln_mul_dropout_fwd(ctx, o, u, w, b, 1e-5f, drop, y, mean, rstd);
  Tensor out[2][4];
  for (int nt = 1; nt <= 2; ++nt) {
    ctx.num_threads = nt;
    Tensor* r = out[nt - 1];
    r[0] = alloc(f32, {t, d});
    r[1] = alloc(f32, {t, d});
    r[2] = alloc(f32, {d});
    r[3] = alloc(f32, {d});
    fill_value(r[2], 0);
    fill_value(r[3], 0);
    ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, g, r[0], r[1], r[2], r[3]);
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(max_abs_diff(out[0][k], out[1][k]), 0.0) << "output " << k;
}

TEST(LayerNormCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DType f32 = DType::kF32;
  const Tensor x = alloc(f32, {4, 8}), y = alloc(f32, {4, 8});
  const Tensor mean = alloc(f32, {4}), rstd = alloc(f32, {4});
  EXPECT_THROW(layernorm_fwd(ctx, x, alloc(f32, {7}), Tensor(), 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(layernorm_fwd(ctx, x, Tensor(), Tensor(), 1e-5f, y, alloc(DType::kF64, {4}), rstd),
               Error);
  EXPECT_THROW(layernorm_bwd(ctx, x, Tensor(), mean, rstd, y, y, false, alloc(f32, {8}), Tensor()),
               Error);  // dw for a LayerNorm without weight
  const DropoutSpec bad{1.0f, 0, 0};
  EXPECT_THROW(ln_mul_dropout_fwd(ctx, x, x, Tensor(), Tensor(), 1e-5f, bad, y, mean, rstd), Error);
}

}  // namespace
}  // namespace hstu::test
