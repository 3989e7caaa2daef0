// test_gemm.cpp — CPU GEMM and bias gradient against plain double loops.
//
// Asserts:
//  - C = alpha op(A) op(B) + beta C (+ bias) matches a naive double product for all four
//    transpose combinations, f32 and f64, odd sizes, strided views of A, B and C, beta = 0 on a
//    poisoned C (never read), beta = 1 / 0.5 on a random C, with and without bias; nothing is
//    written outside the view of C;
//  - K = 0 gives C = beta C + bias; M = 0 is a no-op;
//  - the backward built from gemm calls (dA = dC B^T, dB = A^T dC, accumulating with beta = 1)
//    and bias_grad match float64 finite differences of <G, A B + bias>;
//  - bias_grad overwrites (poisoned output) or accumulates (random prefill), strided dy, and is
//    bit-identical with 1 and 2 threads;
//  - mismatched shapes and dtypes raise hstu::Error.
#include "common/harness.h"
#include "ops/gemm.h"

namespace hstu::test {
namespace {

// op(X)[i, j] of a stored 2-D tensor.
double op_at(const Tensor& x, bool trans, int64_t i, int64_t j) {
  return trans ? get(x, j * x.dim(1) + i) : get(x, i * x.dim(1) + j);
}

// alpha op(A) op(B) + beta C0 + bias, in double: [M, N] f64.
Tensor naive_gemm(const GemmDesc& g, const Tensor& a, const Tensor& b, const Tensor& c0,
                  const Tensor& bias, int64_t m, int64_t n, int64_t k) {
  Tensor out = alloc(DType::kF64, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += op_at(a, g.trans_a, i, p) * op_at(b, g.trans_b, p, j);
      double v = g.alpha * s + (g.beta == 0 ? 0.0 : g.beta * get(c0, i * n + j));
      if (!bias.empty()) v += get(bias, j);
      set(out, i * n + j, v);
    }
  return out;
}

TEST(GemmCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t m = 37, n = 29, k = 53;
  for (DType dt : {DType::kF32, DType::kF64}) {
    // f32: K = 53 products of magnitude <= 1 summed in f32 by BLAS.
    const double tol = dt == DType::kF32 ? 2e-5 : 1e-12;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 1.0, 0.5})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(testing::Message() << dtype_name(dt) << " ta=" << ta << " tb=" << tb
                                            << " beta=" << beta << " bias=" << with_bias);
            GemmDesc g;
            g.trans_a = ta;
            g.trans_b = tb;
            g.alpha = 0.7f;
            g.beta = static_cast<float>(beta);
            // Strided A, B (pad 3) and C (pad 2): column blocks of wider buffers.
            const Tensor a = ta ? alloc_strided(dt, k, m, 3) : alloc_strided(dt, m, k, 3);
            const Tensor b = tb ? alloc(dt, {n, k}) : alloc_strided(dt, k, n, 1);
            const Tensor c = alloc_strided(dt, m, n, 2);
            fill_uniform(a, -1, 1);
            fill_uniform(b, -1, 1);
            if (beta != 0) fill_uniform(c, -1, 1);  // else left poisoned: must not be read
            const Tensor c0 = clone(c);
            Tensor bias;
            if (with_bias) {
              bias = alloc(dt, {n});
              fill_uniform(bias, -1, 1);
            }
            const Tensor want = naive_gemm(g, a, b, c0, bias, m, n, k);
            gemm(ctx, g, a, b, c, bias);
            expect_close(c, want, tol, tol, "C");
            EXPECT_TRUE(padding_intact(c, 2)) << "gemm wrote outside the view of C";
          }
  }
}

TEST(GemmCpu, EmptyDims) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  GemmDesc g;
  g.beta = 0.5f;
  const Tensor a = alloc(DType::kF32, {3, 0}), b = alloc(DType::kF32, {0, 4});
  const Tensor c = alloc(DType::kF32, {3, 4}), bias = alloc(DType::kF32, {4});
  fill_uniform(c, -1, 1);
  fill_uniform(bias, -1, 1);
  const Tensor c0 = clone(c);
  gemm(ctx, g, a, b, c, bias);  // K = 0: C = 0.5 C + bias
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_FLOAT_EQ(get(c, i), static_cast<float>(0.5 * get(c0, i) + get(bias, i % 4)));
  g.beta = 0;
  poison(c);
  gemm(ctx, g, a, b, c, Tensor());  // K = 0, beta = 0: C = 0 even from NaN
  EXPECT_EQ(max_abs(c), 0.0);
  const Tensor a0 = alloc(DType::kF32, {0, 5}), b0 = alloc(DType::kF32, {5, 4});
  gemm(ctx, g, a0, b0, alloc(DType::kF32, {0, 4}), Tensor());  // M = 0: nothing to do
}

// L(A, B, bias) = <G, A B + bias>; its gradients through the gemm calls a layer's backward uses.
TEST(GemmCpu, BackwardComposesToFdGradients) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t m = 11, n = 7, k = 9;
  const DType f64 = DType::kF64;
  const Tensor a = alloc(f64, {m, k}), b = alloc_strided(f64, k, n, 2), bias = alloc(f64, {n});
  const Tensor g = alloc(f64, {m, n}), y = alloc(f64, {m, n});
  for (const Tensor& t : {a, b, bias, g}) fill_uniform(t, -1, 1);
  const auto loss = [&] {
    gemm(ctx, GemmDesc{}, a, b, y, bias);
    return dot(g, y);
  };
  // Accumulating gradients: start from random values, subtract them afterwards.
  const Tensor da = alloc(f64, {m, k}), db = alloc(f64, {k, n}), dbias = alloc(f64, {n});
  for (const Tensor& t : {da, db, dbias}) fill_uniform(t, -1, 1);
  const Tensor da0 = clone(da), db0 = clone(db), dbias0 = clone(dbias);
  GemmDesc acc_bt{false, true, 1.0f, 1.0f}, acc_at{true, false, 1.0f, 1.0f};
  gemm(ctx, acc_bt, g, b, da, Tensor());  // dA += G B^T
  gemm(ctx, acc_at, a, g, db, Tensor());  // dB += A^T G
  bias_grad(ctx, g, dbias, true);         // dbias += colsum(G)
  for (int64_t i = 0; i < da.numel(); ++i) set(da, i, get(da, i) - get(da0, i));
  for (int64_t i = 0; i < db.numel(); ++i) set(db, i, get(db, i) - get(db0, i));
  for (int64_t i = 0; i < n; ++i) set(dbias, i, get(dbias, i) - get(dbias0, i));
  expect_grad_matches_fd(loss, a, da, "dA");
  expect_grad_matches_fd(loss, b, db, "dB");
  expect_grad_matches_fd(loss, bias, dbias, "dbias");
}

TEST(GemmCpu, BiasGradOverwriteAccumulateAndDeterminism) {
  ArenaScope scope;
  for (DType dt : {DType::kF32, DType::kF64}) {
    Ctx ctx = cpu_ctx();
    const int64_t m = 2049, n = 67;
    const Tensor dy = alloc_strided(dt, m, n, 1);
    fill_uniform(dy, -1, 1);
    const Tensor want = alloc(DType::kF64, {n});
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < m; ++i) s += get(dy, i * n + j);
      set(want, j, s);
    }
    const double tol = dt == DType::kF32 ? 1e-4 : 1e-11;  // f32: one rounding of a sum ~ 40
    const Tensor db = alloc(dt, {n});
    poison(db);
    bias_grad(ctx, dy, db, false);
    expect_close(db, want, tol, tol, "db (overwrite)");
    fill_uniform(db, -1, 1);
    const Tensor db0 = clone(db);
    bias_grad(ctx, dy, db, true);
    for (int64_t j = 0; j < n; ++j) set(want, j, get(want, j) + get(db0, j));
    expect_close(db, want, tol, tol, "db (accumulate)");
    // Column-sliced reduction: the same bits whatever the thread count.
    const Tensor d1 = alloc(dt, {n}), d2 = alloc(dt, {n});
    ctx.num_threads = 1;
    bias_grad(ctx, dy, d1, false);
    ctx.num_threads = 2;
    bias_grad(ctx, dy, d2, false);
    EXPECT_EQ(max_abs_diff(d1, d2), 0.0);
  }
}

TEST(GemmCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor a = alloc(DType::kF32, {4, 5}), b = alloc(DType::kF32, {6, 3});
  const Tensor c = alloc(DType::kF32, {4, 3});
  EXPECT_THROW(gemm(ctx, GemmDesc{}, a, b, c, Tensor()), Error);  // K mismatch
  const Tensor b64 = alloc(DType::kF64, {5, 3});
  EXPECT_THROW(gemm(ctx, GemmDesc{}, a, b64, c, Tensor()), Error);  // dtype mismatch
  EXPECT_THROW(gemm(ctx, GemmDesc{}, a, alloc(DType::kF32, {5, 3}), c, alloc(DType::kF32, {4})),
               Error);  // bias of the wrong length
  EXPECT_THROW(bias_grad(ctx, c, alloc(DType::kF32, {4}), false), Error);
}

}  // namespace
}  // namespace hstu::test
