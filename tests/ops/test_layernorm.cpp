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
//  - the fused op's kept dropout decisions are dropout_keep's as bits, and its backward reading
//    them equals the one drawing them again, bit for bit;
//  - dx, dw, db are bit-identical with 1 and 2 threads; bad arguments raise hstu::Error.
#include <cmath>
#include <string>

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
        ln_mul_dropout_fwd(ctx, o, u, w, b, 1e-6f, drop, Tensor(), y, mean, rstd);
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
        ln_mul_dropout_fwd(ctx, o, u, w, b, 1e-6f, drop, Tensor(), y, mean, rstd);
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
      ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, Tensor(), g, do_, du, dw, db);
      EXPECT_TRUE(padding_intact(du, 1));
      expect_grad_matches_fd(loss, o, do_, "do", 168);
      expect_grad_matches_fd(loss, u, du, "du", 168);
      if (affine) {
        expect_grad_matches_fd(loss, w, minus(dw, dw0), "dw");
        expect_grad_matches_fd(loss, b, minus(db, db0), "db");
      }
    }
}

// f32 inputs of the fused op's tests: affine parameters, o, u and the output gradient g uniform
// in [-range, range], the statistics' buffers.
struct FusedInputs {
  Tensor w, b, o, u, g, mean, rstd;
  FusedInputs(int64_t t, int64_t e, double range) {
    const DType f32 = DType::kF32;
    make_params(f32, e, true, w, b);
    o = alloc(f32, {t, e}), u = alloc(f32, {t, e}), g = alloc(f32, {t, e});
    for (const Tensor* x : {&o, &u, &g}) fill_uniform(*x, -range, range);
    mean = alloc(f32, {t}), rstd = alloc(f32, {t});
  }
  // ln_mul_dropout_bwd into r = {do, du, dw, db} (dw, db accumulated from 0).
  void backward(Ctx& ctx, const DropoutSpec& drop, const Tensor& keep, Tensor (&r)[4]) const {
    const int64_t t = o.dim(0), e = o.dim(1);
    r[0] = alloc(DType::kF32, {t, e});
    r[1] = alloc(DType::kF32, {t, e});
    r[2] = alloc(DType::kF32, {e});
    r[3] = alloc(DType::kF32, {e});
    fill_value(r[2], 0);
    fill_value(r[3], 0);
    ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, keep, g, r[0], r[1], r[2], r[3]);
  }
};

// The forward's kept decisions (ops/layernorm.h): bit c % 32 of word c / 32 is dropout_keep of
// element r * E + c (the words' spare bits 0), y unchanged by keeping them, the backward that reads
// them bit-identical to the one that draws them again, and the bits are what it reads (one
// flipped bit changes that element's gradients). With p = 0 nothing is written.
TEST(LnMulDropoutCpu, KeptDecisionsAreDropoutKeepsAndGiveTheSameBackward) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 37, e = 70, words = dropout_keep_words(e);  // 3 words, the last partial
  ASSERT_EQ(words, 3);
  const FusedInputs in(t, e, 2.0);
  const auto poisoned_keep = [&] {
    const Tensor k = alloc(DType::kI32, {t, words});
    for (int64_t i = 0; i < t * words; ++i) k.as<int32_t>()[i] = static_cast<int32_t>(0xA5A5A5A5u);
    return k;
  };
  const DropoutSpec drop{0.3f, 4242, 17};
  const Tensor y0 = alloc(DType::kF32, {t, e}), y1 = alloc(DType::kF32, {t, e});
  const Tensor keep = poisoned_keep();
  ln_mul_dropout_fwd(ctx, in.o, in.u, in.w, in.b, 1e-5f, drop, Tensor(), y0, in.mean, in.rstd);
  ln_mul_dropout_fwd(ctx, in.o, in.u, in.w, in.b, 1e-5f, drop, keep, y1, in.mean, in.rstd);
  EXPECT_EQ(max_abs_diff(y0, y1), 0.0);
  int64_t kept = 0;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < 32 * words; ++c) {
      const uint32_t word = static_cast<uint32_t>(keep.as<int32_t>()[r * words + c / 32]);
      const bool bit = (word >> (c % 32)) & 1u;
      const bool want = c < e && dropout_keep(drop.seed, drop.offset, r * e + c, drop.p);
      ASSERT_EQ(bit, want) << "row " << r << " column " << c;
      kept += bit;
    }
  EXPECT_GT(kept, t * e / 2);  // p = 0.3: most elements kept, some dropped
  EXPECT_LT(kept, t * e);
  Tensor drawn[4], read[4], flipped[4];
  in.backward(ctx, drop, Tensor(), drawn);
  in.backward(ctx, drop, keep, read);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(max_abs_diff(drawn[k], read[k]), 0.0) << "output " << k;
  keep.as<int32_t>()[5 * words + 1] ^= 1 << 3;  // row 5, column 35
  in.backward(ctx, drop, keep, flipped);
  EXPECT_NE(get(flipped[1], 5 * e + 35), get(read[1], 5 * e + 35));  // du of that element
  EXPECT_EQ(get(flipped[1], 6 * e + 35), get(read[1], 6 * e + 35));  // another row's: the same
  // p = 0: the forward writes no bits.
  const Tensor untouched = poisoned_keep();
  ln_mul_dropout_fwd(ctx, in.o, in.u, in.w, in.b, 1e-5f, DropoutSpec{0.0f, 1, 0}, untouched, y1,
                     in.mean, in.rstd);
  for (int64_t i = 0; i < t * words; ++i)
    ASSERT_EQ(untouched.as<int32_t>()[i], static_cast<int32_t>(0xA5A5A5A5u));
}

TEST(LayerNormCpu, ParameterGradientsIndependentOfThreadCount) {
  ArenaScope scope;
  const int64_t t = 1000, d = 64;
  const FusedInputs in(t, d, 1.0);
  const Tensor y = alloc(DType::kF32, {t, d});
  const DropoutSpec drop{0.2f, 7, 0};
  Ctx ctx = cpu_ctx();
  ln_mul_dropout_fwd(ctx, in.o, in.u, in.w, in.b, 1e-5f, drop, Tensor(), y, in.mean, in.rstd);
  Tensor out[2][4];
  for (int nt = 1; nt <= 2; ++nt) {
    ctx.num_threads = nt;
    in.backward(ctx, drop, Tensor(), out[nt - 1]);
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
  EXPECT_THROW(
      ln_mul_dropout_fwd(ctx, x, x, Tensor(), Tensor(), 1e-5f, bad, Tensor(), y, mean, rstd),
      Error);
  const DropoutSpec drop{0.2f, 1, 0};
  for (const Tensor& keep : {alloc(DType::kI32, {4, 2}), alloc(DType::kF32, {4, 1}),
                             alloc(DType::kI32, {3, 1})}) {  // [4, 1] i32 is the shape
    SCOPED_TRACE(keep.str());
    try {
      ln_mul_dropout_fwd(ctx, x, x, Tensor(), Tensor(), 1e-5f, drop, keep, y, mean, rstd);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ln_mul_dropout_fwd: keep must be i32 [4, 1]"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace hstu::test
