// test_sampled_softmax.cpp — CPU sampled-softmax retrieval loss (cosine / temperature) and its
// fused backward into q and the item table.
//
// Asserts:
//  - the loss matches a naive double implementation (L2-normalised items with the eps clamp,
//    logsumexp, collisions at -5e4, unsupervised tokens skipped, loss_scale), f32 and f64, with
//    and without gradients requested, strided q; unsupervised rows of dq are exactly 0;
//  - dq and the table gradient (accumulated into a random prefill, through the normalisation,
//    clamped rows included) match float64 finite differences of the loss;
//  - touched marks exactly the positives and non-colliding negatives of supervised tokens, and
//    rows not marked keep their gradient prefill bit for bit;
//  - a negative equal to the positive contributes nothing (all negatives colliding: loss 0,
//    no gradient); loss and gradients scale linearly with loss_scale;
//  - with a few rows drawn many times (several with clamped norms), dq and the table gradient
//    match a per-(token, candidate) double reference, bit-identically with 1 and 2 threads and
//    whatever calls (other table sizes, the other dtype) came before;
//  - results are bit-identical with 1 and 2 threads; bad arguments raise hstu::Error.
#include <cmath>
#include <set>

#include "common/harness.h"
#include "ops/sampled_softmax.h"

namespace hstu::test {
namespace {

// A random case: q [T, D] unit rows, targets [T] (about 1 in 5 unsupervised), negatives [T, R]
// in [0, V) with a few collisions, table [V, D] whose row 0 has a norm far below eps.
struct Case {
  Tensor q, targets, neg, table;
};
Case make_case(DType dt, int64_t t, int64_t r, int64_t v, int64_t d, double eps, int64_t q_pad) {
  Case c{q_pad ? alloc_strided(dt, t, d, q_pad) : alloc(dt, {t, d}), alloc(DType::kI32, {t}),
         alloc(DType::kI32, {t, r}), alloc(dt, {v, d})};
  fill_uniform(c.q, -1, 1);
  for (int64_t i = 0; i < t; ++i) {
    double n = 0;
    for (int64_t k = 0; k < d; ++k) n += get(c.q, i * d + k) * get(c.q, i * d + k);
    for (int64_t k = 0; k < d; ++k) set(c.q, i * d + k, get(c.q, i * d + k) / std::sqrt(n));
  }
  fill_int(c.targets, 1, v);
  fill_int(c.neg, 0, v);
  std::bernoulli_distribution coin(0.2);
  for (int64_t i = 0; i < t; ++i) {
    if (coin(rng())) set(c.targets, i, 0);
    if (coin(rng())) set(c.neg, i * r + i % r, get(c.targets, i));  // a collision
  }
  fill_uniform(c.table, -1, 1);
  for (int64_t k = 0; k < d; ++k) set(c.table, k, get(c.table, k) * eps * 1e-2 / std::sqrt(d));
  return c;
}

double naive_loss(const SampledSoftmaxSpec& s, const Case& c) {
  const int64_t t = c.q.dim(0), d = c.q.dim(1), r = c.neg.dim(1);
  const auto logit = [&](int64_t i, int64_t item) {
    double dot = 0, nn = 0;
    for (int64_t k = 0; k < d; ++k) {
      dot += get(c.q, i * d + k) * get(c.table, item * d + k);
      nn += get(c.table, item * d + k) * get(c.table, item * d + k);
    }
    return dot / std::max(std::sqrt(nn), double(s.eps)) / s.temperature;
  };
  double total = 0;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t tgt = int64_t(get(c.targets, i));
    if (tgt == 0) continue;
    std::vector<double> l{logit(i, tgt)};
    for (int64_t j = 0; j < r; ++j) {
      const int64_t id = int64_t(get(c.neg, i * r + j));
      l.push_back(id == tgt ? -5e4 : logit(i, id));
    }
    const double mx = *std::max_element(l.begin(), l.end());
    double se = 0;
    for (double x : l) se += std::exp(x - mx);
    total += mx + std::log(se) - l[0];
  }
  return s.loss_scale * total;
}

int64_t supervised(const Case& c) {
  int64_t n = 0;
  for (int64_t i = 0; i < c.targets.numel(); ++i) n += get(c.targets, i) != 0;
  return n;
}

TEST(SampledSoftmaxCpu, LossMatchesNaive) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 37, r = 11, v = 60, d = 16;
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    SampledSoftmaxSpec s;
    const Case c = make_case(dt, t, r, v, d, s.eps, 2);
    s.loss_scale = 1.0 / std::max<int64_t>(supervised(c), 1);
    const double want = naive_loss(s, c);
    const Tensor loss = alloc(DType::kF64, {1});
    poison(loss);
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, Tensor(), Tensor(), Tensor());
    EXPECT_NEAR(get(loss, 0), want, 1e-10 * std::fabs(want)) << "forward only";
    const Tensor dq = alloc(dt, {t, d}), d_table = alloc(dt, {v, d}),
                 touched = alloc(DType::kU8, {v});
    poison(dq);
    fill_value(d_table, 0);
    fill_value(touched, 0);
    poison(loss);
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, dq, d_table, touched);
    EXPECT_NEAR(get(loss, 0), want, 1e-10 * std::fabs(want)) << "with gradients";
    for (int64_t i = 0; i < t; ++i)
      for (int64_t k = 0; k < d; ++k) {
        const double g = get(dq, i * d + k);
        EXPECT_FALSE(std::isnan(g)) << "dq[" << i << "," << k << "] not written";
        if (get(c.targets, i) == 0) {
          EXPECT_EQ(g, 0.0) << "unsupervised token " << i;
        }
      }
  }
}

TEST(SampledSoftmaxCpu, GradientsMatchFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DType f64 = DType::kF64;
  const int64_t t = 23, r = 9, v = 30, d = 8;
  SampledSoftmaxSpec s;  // default temperature 0.05
  s.eps = 1e-2f;         // row 0 sits well inside the clamp even under perturbation
  const Case c = make_case(f64, t, r, v, d, s.eps, 1);
  s.loss_scale = 1.0 / std::max<int64_t>(supervised(c), 1);
  const Tensor loss = alloc(f64, {1});
  const auto f = [&] {
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, Tensor(), Tensor(), Tensor());
    return get(loss, 0);
  };
  const Tensor dq = alloc_strided(f64, t, d, 1), d_table = alloc(f64, {v, d});
  const Tensor touched = alloc(DType::kU8, {v});
  fill_uniform(d_table, -1, 1);
  fill_value(touched, 0);
  const Tensor d_table0 = clone(d_table);
  sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, dq, d_table, touched);
  EXPECT_TRUE(padding_intact(dq, 1));
  // Expected marks: positives and non-colliding negatives of supervised tokens.
  std::set<int64_t> want;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t tgt = int64_t(get(c.targets, i));
    if (tgt == 0) continue;
    want.insert(tgt);
    for (int64_t j = 0; j < r; ++j)
      if (get(c.neg, i * r + j) != tgt) want.insert(int64_t(get(c.neg, i * r + j)));
  }
  for (int64_t row = 0; row < v; ++row) {
    EXPECT_EQ(get(touched, row), want.count(row) ? 1 : 0) << "touched[" << row << "]";
    if (want.count(row)) continue;
    for (int64_t k = 0; k < d; ++k)
      EXPECT_EQ(get(d_table, row * d + k), get(d_table0, row * d + k)) << "row " << row;
  }
  for (int64_t i = 0; i < d_table.numel(); ++i) set(d_table, i, get(d_table, i) - get(d_table0, i));
  expect_grad_matches_fd(f, c.q, dq, "dq", 184);
  expect_grad_matches_fd(f, c.table, d_table, "d_table", 240);
}

TEST(SampledSoftmaxCpu, CollisionsAreMaskedOut) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const DType f64 = DType::kF64;
  const int64_t v = 12, d = 5, r = 4;
  SampledSoftmaxSpec s;
  s.temperature = 0.5f;
  Case c = make_case(f64, 2, r, v, d, s.eps, 0);
  // Token 0: negatives {target, a, target, b}; token 1: every negative is the target.
  set(c.targets, 0, 3);
  set(c.targets, 1, 5);
  const int32_t negs[2][4] = {{3, 7, 3, 9}, {5, 5, 5, 5}};
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < r; ++j) set(c.neg, i * r + j, negs[i][j]);
  const Tensor loss = alloc(f64, {1}), dq = alloc(f64, {2, d}), d_table = alloc(f64, {v, d});
  const Tensor touched = alloc(DType::kU8, {v});
  fill_value(d_table, 0);
  fill_value(touched, 0);
  sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, dq, d_table, touched);
  // Expected: token 0 as if its negatives were only {7, 9}; token 1 contributes 0.
  const auto l = [&](int64_t i, int64_t item) {
    double dot = 0, nn = 0;
    for (int64_t k = 0; k < d; ++k) {
      dot += get(c.q, i * d + k) * get(c.table, item * d + k);
      nn += std::pow(get(c.table, item * d + k), 2);
    }
    return dot / std::sqrt(nn) / s.temperature;
  };
  const double l0 = l(0, 3), l7 = l(0, 7), l9 = l(0, 9);
  const double want = std::log(std::exp(l0) + std::exp(l7) + std::exp(l9)) - l0;
  EXPECT_NEAR(get(loss, 0), want, 1e-12);
  for (int64_t k = 0; k < d; ++k) EXPECT_EQ(get(dq, d + k), 0.0) << "all-collision token";
  EXPECT_EQ(get(touched, 5), 1) << "its positive is still marked (with a zero gradient)";
  for (int64_t k = 0; k < d; ++k) EXPECT_EQ(get(d_table, 5 * d + k), 0.0);
  for (int64_t row : {3, 7, 9}) EXPECT_EQ(get(touched, row), 1);
}

TEST(SampledSoftmaxCpu, LossScaleScalesEverything) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t t = 19, r = 7, v = 25, d = 6;
  SampledSoftmaxSpec s;
  const Case c = make_case(DType::kF64, t, r, v, d, s.eps, 0);
  Tensor loss[2], dq[2], dt[2];
  const double scales[2] = {1.0, 0.25};
  for (int k = 0; k < 2; ++k) {
    s.loss_scale = scales[k];
    loss[k] = alloc(DType::kF64, {1});
    dq[k] = alloc(DType::kF64, {t, d});
    dt[k] = alloc(DType::kF64, {v, d});
    fill_value(dt[k], 0);
    const Tensor touched = alloc(DType::kU8, {v});
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss[k], dq[k], dt[k], touched);
  }
  EXPECT_NEAR(get(loss[1], 0), 0.25 * get(loss[0], 0), 1e-12 * std::fabs(get(loss[0], 0)));
  for (int64_t i = 0; i < dq[0].numel(); ++i)
    EXPECT_NEAR(get(dq[1], i), 0.25 * get(dq[0], i), 1e-12);
  for (int64_t i = 0; i < dt[0].numel(); ++i)
    EXPECT_NEAR(get(dt[1], i), 0.25 * get(dt[0], i), 1e-12);
}

TEST(SampledSoftmaxCpu, IndependentOfThreadCount) {
  ArenaScope scope;
  const int64_t t = 512, r = 64, v = 200, d = 64;
  SampledSoftmaxSpec s;
  const Case c = make_case(DType::kF32, t, r, v, d, s.eps, 0);
  Tensor loss[2], dq[2], dt[2];
  for (int nt = 1; nt <= 2; ++nt) {
    Ctx ctx = cpu_ctx();
    ctx.num_threads = nt;
    loss[nt - 1] = alloc(DType::kF64, {1});
    dq[nt - 1] = alloc(DType::kF32, {t, d});
    dt[nt - 1] = alloc(DType::kF32, {v, d});
    fill_value(dt[nt - 1], 0);
    const Tensor touched = alloc(DType::kU8, {v});
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss[nt - 1], dq[nt - 1], dt[nt - 1],
                    touched);
  }
  EXPECT_EQ(get(loss[0], 0), get(loss[1], 0));
  EXPECT_EQ(max_abs_diff(dq[0], dq[1]), 0.0);
  EXPECT_EQ(max_abs_diff(dt[0], dt[1]), 0.0);
}

// dq and the table gradient, pair by pair in double: for candidate j of token i with
// c = loss_scale * (softmax_j - [j == 0]) / tau, dq += c e_j and
// d_table[j] += c (q - e_j <e_j, q>) / n_j, or c q / eps where the norm is clamped.
void naive_grads(const SampledSoftmaxSpec& s, const Case& c, std::vector<double>& dq,
                 std::vector<double>& dt) {
  const int64_t t = c.q.dim(0), d = c.q.dim(1), r = c.neg.dim(1), v = c.table.dim(0);
  dq.assign(static_cast<size_t>(t * d), 0.0);
  dt.assign(static_cast<size_t>(v * d), 0.0);
  const auto row = [&](int64_t item, std::vector<double>& e) {  // returns the clamped norm
    double nn = 0;
    for (int64_t k = 0; k < d; ++k) nn += std::pow(get(c.table, item * d + k), 2);
    const double n = std::max(std::sqrt(nn), double(s.eps));
    for (int64_t k = 0; k < d; ++k) e[k] = get(c.table, item * d + k) / n;
    return n;
  };
  std::vector<double> e(static_cast<size_t>(d));
  for (int64_t i = 0; i < t; ++i) {
    const int64_t tgt = int64_t(get(c.targets, i));
    if (tgt == 0) continue;
    std::vector<int64_t> ids{tgt};
    for (int64_t j = 0; j < r; ++j) ids.push_back(int64_t(get(c.neg, i * r + j)));
    std::vector<double> l(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) {
      row(ids[j], e);
      double dot = 0;
      for (int64_t k = 0; k < d; ++k) dot += get(c.q, i * d + k) * e[k];
      l[j] = j > 0 && ids[j] == tgt ? -5e4 : dot / s.temperature;
    }
    const double mx = *std::max_element(l.begin(), l.end());
    double se = 0;
    for (double x : l) se += std::exp(x - mx);
    for (size_t j = 0; j < ids.size(); ++j) {
      if (j > 0 && ids[j] == tgt) continue;
      const double cj =
          s.loss_scale * (std::exp(l[j] - mx) / se - (j == 0 ? 1.0 : 0.0)) / s.temperature;
      const double n = row(ids[j], e);
      double eq = 0;
      for (int64_t k = 0; k < d; ++k) eq += e[k] * get(c.q, i * d + k);
      for (int64_t k = 0; k < d; ++k) {
        const double qk = get(c.q, i * d + k);
        dq[static_cast<size_t>(i * d + k)] += cj * e[k];
        dt[static_cast<size_t>(ids[j] * d + k)] +=
            n > s.eps ? cj * (qk - e[k] * eq) / n : cj * qk / s.eps;
      }
    }
  }
}

TEST(SampledSoftmaxCpu, RepeatedAndClampedRowsMatchPairReference) {
  ArenaScope scope;
  const int64_t t = 300, r = 40, v = 7, d = 21;  // every row is drawn about 1700 times
  for (DType dt : {DType::kF64, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    SampledSoftmaxSpec s;
    s.eps = 1e-2f;
    Case c = make_case(dt, t, r, v, d, s.eps, 1);
    for (int64_t k = 0; k < d; ++k) {  // clamped norms: rows 0, 1 far below eps, row 2 at 0.9 eps
      set(c.table, 1 * d + k, get(c.table, 1 * d + k) * 1e-4);
      set(c.table, 2 * d + k, k == 0 ? 0.9 * s.eps : 0.0);
    }
    s.loss_scale = 1.0 / std::max<int64_t>(supervised(c), 1);
    std::vector<double> want_dq, want_dt;
    naive_grads(s, c, want_dq, want_dt);
    const double tol = dt == DType::kF64 ? 1e-12 : 2e-5;
    double dq_max = 0, dt_max = 0;
    for (double x : want_dq) dq_max = std::max(dq_max, std::fabs(x));
    for (double x : want_dt) dt_max = std::max(dt_max, std::fabs(x));
    Tensor dq[2], dtab[2];
    for (int nt = 1; nt <= 2; ++nt) {
      Ctx ctx = cpu_ctx();
      ctx.num_threads = nt;
      // Calls with a larger table and with the other dtype first: per-call buffers are reused.
      const Case other =
          make_case(dt == DType::kF64 ? DType::kF32 : DType::kF64, 50, 9, 40, d + 3, s.eps, 0);
      const Tensor loss = alloc(DType::kF64, {1});
      sampled_softmax(ctx, s, other.q, other.targets, other.neg, other.table, loss,
                      alloc(other.q.dtype, {50, d + 3}), alloc(other.q.dtype, {40, d + 3}),
                      alloc(DType::kU8, {40}));
      dq[nt - 1] = alloc(dt, {t, d});
      dtab[nt - 1] = alloc(dt, {v, d});
      fill_value(dtab[nt - 1], 0);
      const Tensor touched = alloc(DType::kU8, {v});
      sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, dq[nt - 1], dtab[nt - 1],
                      touched);
      for (int64_t i = 0; i < t * d; ++i)
        ASSERT_NEAR(get(dq[nt - 1], i), want_dq[static_cast<size_t>(i)], tol * dq_max)
            << "dq[" << i / d << "," << i % d << "], " << nt << " threads";
      for (int64_t i = 0; i < v * d; ++i)
        ASSERT_NEAR(get(dtab[nt - 1], i), want_dt[static_cast<size_t>(i)], tol * dt_max)
            << "d_table[" << i / d << "," << i % d << "], " << nt << " threads";
    }
    EXPECT_EQ(max_abs_diff(dq[0], dq[1]), 0.0);
    EXPECT_EQ(max_abs_diff(dtab[0], dtab[1]), 0.0);
  }
}

TEST(SampledSoftmaxCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  SampledSoftmaxSpec s;
  const Case c = make_case(DType::kF32, 4, 3, 10, 8, s.eps, 0);
  const Tensor loss = alloc(DType::kF64, {1});
  const auto run = [&](const Tensor& lo) {
    sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, lo, Tensor(), Tensor(), Tensor());
  };
  EXPECT_THROW(run(alloc(DType::kF32, {1})), Error);  // loss must be f64
  set(c.neg, 5, 10);
  EXPECT_THROW(run(loss), Error);  // negative id out of range
  set(c.neg, 5, 1);
  s.temperature = 0;
  EXPECT_THROW(run(loss), Error);
  s.temperature = 0.05f;
  EXPECT_THROW(
      sampled_softmax(ctx, s, c.q, c.targets, c.neg, c.table, loss, alloc(DType::kF32, {4, 8}),
                      alloc(DType::kF32, {9, 8}), alloc(DType::kU8, {10})),
      Error);  // d_table of the wrong size
}

}  // namespace
}  // namespace hstu::test
