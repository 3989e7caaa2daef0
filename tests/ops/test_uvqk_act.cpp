// test_uvqk_act.cpp — the CPU fused SiLU of the HSTU layer's projection (ops/uvqk_act.h) and the
// CPU gemm_residual.
//
// Asserts:
//  - uvqk_silu_fwd equals the two generic activation calls it replaces (u as one block, the 3H
//    heads into their padded places) exactly, and leaves the padding columns untouched (NaN);
//  - uvqk_silu_bwd's d_z equals activation_bwd over the same layout exactly, and its db equals
//    bias_grad of that d_z exactly (the same per-column order), for = and +=, and in place with
//    a dense layout;
//  - the layout's column map (UvqkLayout::column) sends dense columns to the padded heads;
//  - gemm_residual equals copy + gemm with beta = 1 exactly and leaves the residual unchanged;
//  - bad shapes and dtypes raise hstu::Error naming the op.
#include <cmath>

#include "common/harness.h"
#include "ops/activation.h"
#include "ops/gemm.h"
#include "ops/uvqk_act.h"

namespace hstu::test {
namespace {

void expect_equal(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get(a, i), y = get(b, i);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) ++bad;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ (seed " << test_seed() << ")";
}

TEST(UvqkLayoutCpu, ColumnMapPadsHeads) {
  const UvqkLayout l{2, 25};
  EXPECT_EQ(l.column(0), 0);
  EXPECT_EQ(l.column(49), 49);              // last u column
  EXPECT_EQ(l.column(50), 56);              // v head 0 starts at round8(50)
  EXPECT_EQ(l.column(75), 88);              // v head 1 at 56 + 32
  EXPECT_EQ(l.column(100), 120);            // q head 0
  EXPECT_EQ(l.column(199), l.width() - 8);  // last k column: 7 padding columns after it
  EXPECT_FALSE(l.dense());
  const UvqkLayout d{4, 32};
  for (int64_t c = 0; c < 4 * 128; ++c) EXPECT_EQ(d.column(c), c);
  EXPECT_TRUE(d.dense());
}

class UvqkActCpu : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(UvqkActCpu, EqualsTheSeparatePasses) {
  ArenaScope scope;
  const auto [heads, d] = GetParam();
  const UvqkLayout l{heads, d};
  const int64_t t = 37, hd = heads * d, n = 4 * hd, w = l.width();
  Ctx ctx = cpu_ctx();
  Tensor z = alloc(DType::kF32, {t, n});
  fill_uniform(z, -5, 5);
  // Forward: the fused pass against activation_fwd on u and on the 3H heads.
  Tensor fused = alloc(DType::kF32, {t, w}), ref = alloc(DType::kF32, {t, w});
  poison(fused);
  poison(ref);
  uvqk_silu_fwd(ctx, l, z, fused);
  activation_fwd(ctx, Activation::kSilu, z.cols(0, hd), ref.cols(0, hd));
  activation_fwd(ctx, Activation::kSilu, z.cols(hd, n), ref.cols(l.v0(), w), {3 * heads, d});
  expect_equal(fused, ref, "uvqk");
  // Backward: d_z against activation_bwd, db against bias_grad of that d_z.
  Tensor g = alloc(DType::kF32, {t, w});
  fill_uniform(g, -1, 1);
  Tensor dz = alloc(DType::kF32, {t, n}), dz_ref = alloc(DType::kF32, {t, n});
  activation_bwd(ctx, Activation::kSilu, z.cols(0, hd), g.cols(0, hd), dz_ref.cols(0, hd));
  activation_bwd(ctx, Activation::kSilu, z.cols(hd, n), g.cols(l.v0(), w), dz_ref.cols(hd, n),
                 {3 * heads, d});
  for (bool acc : {false, true}) {
    Tensor db = alloc(DType::kF32, {n}), db_ref = alloc(DType::kF32, {n});
    fill_uniform(db, -1, 1);
    copy_tensor(db_ref, db);
    uvqk_silu_bwd(ctx, l, z, g, dz, db, acc);
    bias_grad(ctx, dz_ref, db_ref, acc);
    expect_equal(dz, dz_ref, "d_z");
    expect_equal(db, db_ref, acc ? "db (+=)" : "db (=)");
  }
  if (!l.dense()) return;
  Tensor gi = clone(g);  // in place: d_z is d_uvqk
  uvqk_silu_bwd(ctx, l, z, gi, gi, Tensor(), false);
  expect_equal(gi, dz_ref, "d_z in place");
}

INSTANTIATE_TEST_SUITE_P(Layouts, UvqkActCpu,
                         ::testing::Values(std::make_tuple(int64_t{2}, int64_t{25}),
                                           std::make_tuple(int64_t{1}, int64_t{50}),
                                           std::make_tuple(int64_t{3}, int64_t{12}),
                                           std::make_tuple(int64_t{4}, int64_t{32})));

TEST(UvqkActCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const UvqkLayout l{2, 25};
  Tensor z = alloc(DType::kF32, {4, 200}), y = alloc(DType::kF32, {4, 248});
  EXPECT_THROW(uvqk_silu_fwd(ctx, l, alloc(DType::kF32, {4, 199}), y), Error);
  EXPECT_THROW(uvqk_silu_fwd(ctx, l, z, alloc(DType::kF32, {4, 200})), Error);
  EXPECT_THROW(uvqk_silu_fwd(ctx, l, z, alloc(DType::kF64, {4, 248})), Error);
  // d_z in place is only allowed with a dense layout.
  Tensor g = alloc(DType::kF32, {4, 248});
  EXPECT_THROW(uvqk_silu_bwd(ctx, l, z, g, g.cols(0, 200), Tensor(), false), Error);
  EXPECT_THROW(uvqk_silu_bwd(ctx, l, z, g, z, alloc(DType::kF32, {199}), false), Error);
  try {
    uvqk_silu_fwd(ctx, l, z, alloc(DType::kF32, {4, 200}));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uvqk_silu_fwd"), std::string::npos) << e.what();
  }
}

TEST(GemmResidualCpu, EqualsCopyAndAccumulate) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  Tensor a = alloc(DType::kF32, {30, 20}), b = alloc(DType::kF32, {20, 12});
  Tensor r = alloc(DType::kF32, {30, 12}), bias = alloc(DType::kF32, {12});
  fill_uniform(a, -1, 1);
  fill_uniform(b, -1, 1);
  fill_uniform(r, -1, 1);
  fill_uniform(bias, -1, 1);
  const Tensor r0 = clone(r);
  Tensor d = alloc(DType::kF32, {30, 12}), ref = clone(r);
  gemm_residual(ctx, GemmDesc{}, a, b, r, d, bias);
  gemm(ctx, GemmDesc{false, false, 1.0f, 1.0f}, a, b, ref, bias);
  expect_equal(d, ref, "D");
  expect_equal(r, r0, "residual unchanged");
  gemm_residual(ctx, GemmDesc{}, a, b, r, r, bias);  // in place
  expect_equal(r, ref, "D in place");
  EXPECT_THROW(gemm_residual(ctx, GemmDesc{}, a, b, alloc(DType::kF32, {30, 11}), d), Error);
}

}  // namespace
}  // namespace hstu::test
