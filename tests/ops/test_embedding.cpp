// test_embedding.cpp — CPU embedding gather, gradient scatter, touched rows and the sparse
// row-wise optimisers.
//
// Asserts:
//  - embedding_fwd = table[ids] * scale (+ pos_table[positions]) against naive loops, f32 and
//    f64, repeated ids, strided poisoned output (nothing written outside it);
//  - embedding_bwd matches float64 finite differences of <g, out> wrt the table and the position
//    table, accumulating into random prefills; rows without ids keep their prefill bit for bit;
//    touched marks exactly the ids (and keeps earlier marks); the scatter is bit-identical with
//    1 and 2 threads;
//  - collect_touched_rows lists the marked rows ascending, writes their count, and clears the
//  marks;
//  - sparse Adam (bias correction at the global step), row-wise Adagrad (FBGEMM
//    EXACT_ROWWISE_ADAGRAD) and SGD match hand-written double updates over three steps, f32 and
//    f64; they touch only the listed rows (others keep table, state and gradient even when that
//    gradient is non-zero) and zero the listed rows' gradients;
//  - ids out of range, and rows that are unsorted, repeated or out of range, raise hstu::Error.
#include <array>
#include <cmath>
#include <set>

#include "common/harness.h"
#include "ops/embedding.h"

namespace hstu::test {
namespace {

Tensor make_ids(int64_t t, int64_t n) {
  Tensor ids = alloc(DType::kI32, {t});
  fill_int(ids, 0, n);
  return ids;
}

TEST(EmbeddingCpu, ForwardMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t v = 50, p = 30, d = 19, t = 111;
  const float scale = std::sqrt(float(d));
  for (DType dt : {DType::kF32, DType::kF64})
    for (bool with_pos : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << (with_pos ? " +pos" : ""));
      const double tol = dt == DType::kF32 ? 2e-6 : 1e-14;  // f32: one product and one sum
      const Tensor table = alloc(dt, {v, d}), ids = make_ids(t, v);
      fill_uniform(table, -1, 1);
      Tensor pos, positions;
      if (with_pos) {
        pos = alloc(dt, {p, d});
        fill_uniform(pos, -1, 1);
        positions = make_ids(t, p);
      }
      const Tensor out = alloc_strided(dt, t, d, 2);
      embedding_fwd(ctx, table, ids, scale, pos, positions, out);
      const Tensor want = alloc(DType::kF64, {t, d});
      for (int64_t i = 0; i < t; ++i)
        for (int64_t c = 0; c < d; ++c) {
          double x = get(table, int64_t(get(ids, i)) * d + c) * double(scale);
          if (with_pos) x += get(pos, int64_t(get(positions, i)) * d + c);
          set(want, i * d + c, x);
        }
      expect_close(out, want, tol, tol, "out");
      EXPECT_TRUE(padding_intact(out, 2));
    }
}

TEST(EmbeddingCpu, BackwardMatchesFdAndMarksTouchedRows) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DType f64 = DType::kF64;
  const int64_t v = 20, p = 10, d = 7, t = 33;
  const float scale = 2.5f;
  const Tensor table = alloc(f64, {v, d}), pos = alloc(f64, {p, d});
  const Tensor ids = make_ids(t, v - 2), positions = make_ids(t, p);  // rows v-2, v-1 unused
  const Tensor g = alloc(f64, {t, d}), out = alloc(f64, {t, d});
  for (const Tensor& x : {table, pos, g}) fill_uniform(x, -1, 1);
  const auto loss = [&] {
    embedding_fwd(ctx, table, ids, scale, pos, positions, out);
    return dot(g, out);
  };
  const Tensor d_table = alloc(f64, {v, d}), d_pos = alloc(f64, {p, d});
  fill_uniform(d_table, -1, 1);
  fill_uniform(d_pos, -1, 1);
  const Tensor d_table0 = clone(d_table), d_pos0 = clone(d_pos);
  const Tensor touched = alloc(DType::kU8, {v});
  fill_value(touched, 0);
  set(touched, v - 1, 1);  // an earlier mark stays
  const Tensor dout = alloc_strided(f64, t, d, 1);
  for (int64_t i = 0; i < g.numel(); ++i) set(dout, i, get(g, i));
  embedding_bwd(ctx, dout, ids, scale, d_table, touched, positions, d_pos);
  std::set<int64_t> used;
  for (int64_t i = 0; i < t; ++i) used.insert(int64_t(get(ids, i)));
  for (int64_t r = 0; r < v; ++r) {
    EXPECT_EQ(get(touched, r), used.count(r) || r == v - 1 ? 1 : 0) << "row " << r;
    if (used.count(r)) continue;
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(get(d_table, r * d + c), get(d_table0, r * d + c)) << "untouched row " << r;
  }
  for (int64_t i = 0; i < d_table.numel(); ++i) set(d_table, i, get(d_table, i) - get(d_table0, i));
  for (int64_t i = 0; i < d_pos.numel(); ++i) set(d_pos, i, get(d_pos, i) - get(d_pos0, i));
  expect_grad_matches_fd(loss, table, d_table, "d_table", 140);
  expect_grad_matches_fd(loss, pos, d_pos, "d_pos", 70);
}

TEST(EmbeddingCpu, ScatterIndependentOfThreadCount) {
  ArenaScope scope;
  const int64_t v = 100, d = 64, t = 4096;
  const Tensor ids = make_ids(t, v), dout = alloc(DType::kF32, {t, d});
  fill_uniform(dout, -1, 1);
  Tensor result[2];
  for (int nt = 1; nt <= 2; ++nt) {
    Ctx ctx = cpu_ctx();
    ctx.num_threads = nt;
    result[nt - 1] = alloc(DType::kF32, {v, d});
    fill_value(result[nt - 1], 0);
    const Tensor touched = alloc(DType::kU8, {v});
    embedding_bwd(ctx, dout, ids, 0.5f, result[nt - 1], touched, Tensor(), Tensor());
  }
  EXPECT_EQ(max_abs_diff(result[0], result[1]), 0.0);
}

TEST(EmbeddingCpu, CollectTouchedRows) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t v = 1000;
  const Tensor touched = alloc(DType::kU8, {v}), rows = alloc(DType::kI32, {v});
  std::vector<int32_t> want;
  std::bernoulli_distribution coin(0.1);
  for (int64_t r = 0; r < v; ++r) {
    const bool on = coin(rng());
    set(touched, r, on);
    if (on) want.push_back(static_cast<int32_t>(r));
  }
  fill_value(rows, -1);
  const Tensor count = alloc(DType::kI32, {1});
  collect_touched_rows(ctx, touched, rows, count);
  const int64_t n = *count.as<int32_t>();
  ASSERT_EQ(n, static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(get(rows, i), want[static_cast<size_t>(i)]);
  EXPECT_EQ(max_abs(touched), 0.0) << "touched must be cleared";
  collect_touched_rows(ctx, touched, rows, count);
  EXPECT_EQ(*count.as<int32_t>(), 0);
  EXPECT_THROW(collect_touched_rows(ctx, touched, alloc(DType::kI32, {v - 1}), count), Error);
  EXPECT_THROW(collect_touched_rows(ctx, touched, rows, alloc(DType::kI64, {1})), Error);
}

// One reference step of `kind` on row r of a double table copy, with state in m/v (double).
void reference_step(const SparseOptimizerSpec& s, std::vector<double>& w, std::vector<double>& m,
                    std::vector<double>& v, const std::vector<double>& g, int64_t r, int64_t d) {
  const size_t o = static_cast<size_t>(r * d);
  if (s.kind == SparseOptimizerSpec::kAdam) {
    const double bc1 = 1 - std::pow(double(s.beta1), double(s.step));
    const double bc2 = 1 - std::pow(double(s.beta2), double(s.step));
    for (int64_t c = 0; c < d; ++c) {
      const size_t i = o + static_cast<size_t>(c);
      m[i] = s.beta1 * m[i] + (1 - double(s.beta1)) * g[i];
      v[i] = s.beta2 * v[i] + (1 - double(s.beta2)) * g[i] * g[i];
      w[i] -= s.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + s.eps);
    }
  } else if (s.kind == SparseOptimizerSpec::kRowWiseAdagrad) {
    double mean_sq = 0;
    for (int64_t c = 0; c < d; ++c) mean_sq += g[o + c] * g[o + c] / double(d);
    m[static_cast<size_t>(r)] += mean_sq;
    for (int64_t c = 0; c < d; ++c)
      w[o + c] -= s.lr * g[o + c] / (std::sqrt(m[static_cast<size_t>(r)]) + s.eps);
  } else {
    for (int64_t c = 0; c < d; ++c) w[o + c] -= s.lr * g[o + c];
  }
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = get(t, i);
  return out;
}

TEST(SparseOptimizerCpu, StepsMatchReferenceOnListedRowsOnly) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t v = 40, d = 6;
  for (DType dt : {DType::kF32, DType::kF64})
    for (auto kind : {SparseOptimizerSpec::kAdam, SparseOptimizerSpec::kRowWiseAdagrad,
                      SparseOptimizerSpec::kSgd}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " kind " << kind);
      const double tol = dt == DType::kF32 ? 2e-6 : 1e-13;  // f32 storage of w and state
      SparseOptimizerSpec spec;
      spec.kind = kind;
      spec.lr = 0.05f;
      const Tensor table = alloc(dt, {v, d}), grad = alloc(dt, {v, d});
      const bool adam = kind == SparseOptimizerSpec::kAdam;
      const Tensor m = adam ? alloc(dt, {v, d}) : alloc(dt, {v}), vv = alloc(dt, {v, d});
      fill_uniform(table, -1, 1);
      fill_value(m, 0);
      fill_value(vv, 0);
      std::vector<double> w = values(table), rm = values(m), rv = values(vv);
      const Tensor touched = alloc(DType::kU8, {v}), rows = alloc(DType::kI32, {v});
      const Tensor count = alloc(DType::kI32, {1});
      for (int64_t step = 1; step <= 3; ++step) {
        spec.step = step;
        fill_value(touched, 0);
        fill_value(grad, 0);
        std::bernoulli_distribution coin(0.3);
        for (int64_t r = 0; r < v; ++r) {
          if (coin(rng())) set(touched, r, 1);
          if (get(touched, r) || r == v - 1)  // row v-1: a gradient but never listed
            for (int64_t c = 0; c < d; ++c)
              set(grad, r * d + c, std::uniform_real_distribution<double>(-1, 1)(rng()));
        }
        set(touched, v - 1, 0);
        const std::vector<double> g = values(grad);
        collect_touched_rows(ctx, touched, rows, count);
        const int64_t n = *count.as<int32_t>();
        for (int64_t i = 0; i < n; ++i)
          reference_step(spec, w, rm, rv, g, int64_t(get(rows, i)), d);
        sparse_optimizer_step(ctx, spec, table, grad, rows, count, m, adam ? vv : Tensor());
        for (int64_t r = 0; r < v; ++r)
          for (int64_t c = 0; c < d; ++c) {
            const size_t i = static_cast<size_t>(r * d + c);
            EXPECT_NEAR(get(table, r * d + c), w[i], tol) << "step " << step << " row " << r;
            const bool listed =
                std::find(static_cast<int32_t*>(rows.data), static_cast<int32_t*>(rows.data) + n,
                          r) != static_cast<int32_t*>(rows.data) + n;
            EXPECT_EQ(get(grad, r * d + c), listed ? 0.0 : g[i]) << "gradient of row " << r;
            if (adam) {
              EXPECT_NEAR(get(m, r * d + c), rm[i], tol);
              EXPECT_NEAR(get(vv, r * d + c), rv[i], tol);
            }
          }
        if (kind == SparseOptimizerSpec::kRowWiseAdagrad) {
          for (int64_t r = 0; r < v; ++r)
            EXPECT_NEAR(get(m, r), rm[static_cast<size_t>(r)], tol) << "state of row " << r;
        }
      }
    }
}

TEST(SparseOptimizerCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t v = 10, d = 4;
  const Tensor table = alloc(DType::kF32, {v, d}), grad = alloc(DType::kF32, {v, d});
  const Tensor m = alloc(DType::kF32, {v, d}), vv = alloc(DType::kF32, {v, d});
  const Tensor rows = alloc(DType::kI32, {3}), count = alloc(DType::kI32, {1});
  *count.as<int32_t>() = 3;
  SparseOptimizerSpec spec;
  const auto step_with = [&](std::initializer_list<int32_t> r) {
    int64_t i = 0;
    for (int32_t x : r) set(rows, i++, x);
    sparse_optimizer_step(ctx, spec, table, grad, rows, count, m, vv);
  };
  EXPECT_THROW(step_with({3, 1, 5}), Error);   // not ascending
  EXPECT_THROW(step_with({1, 1, 5}), Error);   // repeated
  EXPECT_THROW(step_with({1, 2, 10}), Error);  // out of range
  spec.kind = SparseOptimizerSpec::kRowWiseAdagrad;
  EXPECT_THROW(step_with({1, 2, 3}), Error);  // Adagrad state must be [V]
  const Tensor bad_ids = alloc(DType::kI32, {2});
  set(bad_ids, 0, 0);
  set(bad_ids, 1, int32_t(v));
  const Tensor out = alloc(DType::kF32, {2, d});
  EXPECT_THROW(embedding_fwd(ctx, table, bad_ids, 1.0f, Tensor(), Tensor(), out), Error);
}

// The skip_if_nonfinite guard: a NaN / Inf guard value leaves weights and state unchanged but
// still zeroes the listed rows' gradients; a finite one gives the unguarded update exactly.
TEST(SparseOptimizerCpu, NonfiniteGuardSkipsUpdateButClearsGradients) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t v = 12, d = 5;
  for (auto kind : {SparseOptimizerSpec::kAdam, SparseOptimizerSpec::kRowWiseAdagrad,
                    SparseOptimizerSpec::kSgd}) {
    SCOPED_TRACE(testing::Message() << "kind " << kind);
    const bool ada = kind == SparseOptimizerSpec::kRowWiseAdagrad;
    const Tensor w0 = alloc(DType::kF32, {v, d}), g0 = alloc(DType::kF32, {v, d});
    const Tensor m0 = ada ? alloc(DType::kF32, {v}) : alloc(DType::kF32, {v, d});
    const Tensor v0 = alloc(DType::kF32, {v, d});
    fill_uniform(w0, -1, 1);
    fill_uniform(g0, -1, 1);
    fill_uniform(m0, 0, 1);
    fill_uniform(v0, 0, 1);
    const Tensor rows = alloc(DType::kI32, {3}), count = alloc(DType::kI32, {1});
    set(rows, 0, int32_t(1));
    set(rows, 1, int32_t(4));
    set(rows, 2, int32_t(9));
    *count.as<int32_t>() = 3;
    const Tensor guard = alloc(DType::kF64, {2});
    const auto run = [&](double bad, bool guarded) {
      const Tensor w = clone(w0), g = clone(g0), m = clone(m0), vv = clone(v0);
      guard.as<double>()[0] = 1.0;
      guard.as<double>()[1] = bad;
      SparseOptimizerSpec spec;
      spec.kind = kind;
      if (guarded) spec.skip_if_nonfinite = guard;
      sparse_optimizer_step(ctx, spec, w, g, rows, count, m,
                            kind == SparseOptimizerSpec::kAdam ? vv : Tensor());
      return std::array<Tensor, 4>{w, g, m, vv};
    };
    const auto plain = run(0, false), finite = run(2.0, true);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(max_abs_diff(plain[k], finite[k]), 0.0) << k;
    EXPECT_GT(max_abs_diff(plain[0], w0), 0.0);
    const auto skipped = run(std::nan(""), true);
    EXPECT_EQ(max_abs_diff(skipped[0], w0), 0.0) << "weights";
    EXPECT_EQ(max_abs_diff(skipped[2], m0), 0.0) << "state";
    EXPECT_EQ(max_abs_diff(skipped[3], v0), 0.0) << "state v";
    EXPECT_EQ(max_abs_diff(skipped[1], plain[1]), 0.0) << "gradients cleared as usual";
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(get(skipped[1], 4 * d + c), 0.0);
  }
}

}  // namespace
}  // namespace hstu::test
