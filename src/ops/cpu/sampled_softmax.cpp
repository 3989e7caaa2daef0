// cpu/sampled_softmax.cpp — CPU sampled-softmax retrieval loss with its fused backward.
//
// Item embeddings are L2-normalised without a [T, R, D] gather: e = x / n, n = max(||x||, eps).
// Each call first lists the distinct candidate rows (positives and non-colliding negatives of
// supervised tokens) in a compact slot map and computes 1/n once per row (list_candidate_rows).
// Phase 1 (forward, token_forward), parallel over tokens, computes the logits <q, x> / (n tau), a
// stable logsumexp, the loss, dq and the coefficients c_j / tau (c_j = loss_scale * (softmax_j -
// [j == 0])). Phase 2 (scatter_row_grads) accumulates the gradient wrt the normalised rows,
// g += (c_j / tau) q, over column slices, so repeated rows need no atomics and the result does
// not depend on the thread count. Phase 3 (backprop_row_norms) pushes each row's g through the
// normalisation once: dL/dx = (g - e <e, g>) / n, or g / eps where the norm is clamped. Buffers
// live in a per-thread scratch reused across calls.
#include "ops/cpu/sampled_softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

constexpr double kMaskedLogit = -5e4;  // logit of a negative that collides with the positive

// <a, b> over n elements, in double.
template <typename A, typename B>
double dot(const A* a, const B* b, int64_t n) {
  return detail::sum8(n, [&](int64_t c) { return double(a[c]) * double(b[c]); });
}

// Candidates ahead of the current one whose rows are prefetched: the rows are random accesses
// into tables that outgrow L2.
constexpr int64_t kPrefetchAhead = 8;

// Prefetches elements [c0, c1) of row p (every cache line they touch).
template <typename T>
void prefetch(const T* p, int64_t c0, int64_t c1) {
  const char* b = reinterpret_cast<const char*>(p + c0);
  const char* e = reinterpret_cast<const char*>(p + c1);
  for (; b < e; b += 64) __builtin_prefetch(b);
  __builtin_prefetch(e - 1);
}

// Per-call buffers of the calling thread, kept between calls (no allocation in steady state).
template <typename T>
struct Scratch {
  std::vector<int32_t> slot;       // [V] table row -> compact slot, -1 if not a candidate
  std::vector<int32_t> rows;       // [U] slot -> table row, in first-use order
  std::vector<double> inv_norm;    // [U] 1 / max(||x||, eps)
  std::vector<double> token_loss;  // [T]
  std::vector<T> coef;             // [T, R+1] dL/d<q, e_j> = c_j / tau
  std::vector<T> g;                // [U, D] dL/de of each listed row
};

// The views of one call and what follows from them: token i's candidates are its positive (j = 0)
// and its R negatives; tokens with target 0 are unsupervised.
template <typename T>
struct Problem {
  int64_t t, d, j_count, v;
  Rows<const T> qr, tab;
  const int32_t* tgt;
  Rows<const int32_t> neg;
  double inv_tau, eps, scale;

  Problem(const SampledSoftmaxSpec& spec, const Tensor& q, const Tensor& targets,
          const Tensor& neg_ids, const Tensor& table)
      : t(q.dim(0)),
        d(q.dim(1)),
        j_count(neg_ids.dim(1) + 1),
        v(table.dim(0)),
        qr(rows_of<const T>(q)),
        tab(rows_of<const T>(table)),
        tgt(targets.as<int32_t>()),
        neg(rows_of<const int32_t>(neg_ids)),
        inv_tau(1.0 / spec.temperature),
        eps(spec.eps),
        scale(spec.loss_scale) {}

  // Candidate j of token i: the positive (j = 0) or negative j - 1.
  int32_t cand(int64_t i, int64_t j) const { return j == 0 ? tgt[i] : neg[i][j - 1]; }
  bool masked(int64_t i, int64_t j) const { return j > 0 && neg[i][j - 1] == tgt[i]; }
};

// Lists the candidate rows of supervised tokens in s.slot / s.rows and computes their 1 / n.
template <typename T>
void list_candidate_rows(Ctx& ctx, const Problem<T>& p, Scratch<T>& s) {
  s.slot.assign(static_cast<size_t>(p.v), -1);
  int32_t* slot = s.slot.data();
  s.rows.clear();
  for (int64_t i = 0; i < p.t; ++i) {
    if (p.tgt[i] == 0) continue;
    for (int64_t j = 0; j < p.j_count; ++j) {
      const int32_t id = p.cand(i, j);
      if (p.masked(i, j) || slot[id] >= 0) continue;
      slot[id] = static_cast<int32_t>(s.rows.size());
      s.rows.push_back(id);
    }
  }
  const int64_t u = static_cast<int64_t>(s.rows.size()), d = p.d;
  const int32_t* rows = s.rows.data();
  s.inv_norm.resize(static_cast<size_t>(u));
  double* inv_norm = s.inv_norm.data();
#pragma omp parallel for schedule(static) num_threads(detail::threads_for(ctx, 2 * u * d))
  for (int64_t k = 0; k < u; ++k) {
    const T* x = p.tab[rows[k]];
    inv_norm[k] = 1.0 / std::max(std::sqrt(dot(x, x, d)), p.eps);
  }
}

// Per-thread buffers of one token's forward: per candidate the logit, exp(logit - max) and dq
// coefficient; q and the dq accumulator [D].
struct TokenBuffers {
  std::vector<double> logit, ex, b, qd, dqa;
};

// Phase 1 for supervised token i: its logits and stable logsumexp; with `grad`, its coefficients
// c_j / tau (into s.coef) and dq (into `dq_row`). Returns the token's loss.
template <typename T>
double token_forward(const Problem<T>& p, Scratch<T>& s, TokenBuffers& buf, int64_t i, bool grad,
                     T* dq_row) {
  const int64_t d = p.d, j_count = p.j_count;
  const int32_t* slot = s.slot.data();
  const double* inv_norm = s.inv_norm.data();
  double *logit = buf.logit.data(), *ex = buf.ex.data(), *b = buf.b.data();
  double *qd = buf.qd.data(), *dqa = buf.dqa.data();
  for (int64_t c = 0; c < d; ++c) qd[c] = p.qr[i][c];
  double mx = -INFINITY;
  for (int64_t j = 0; j < j_count; ++j) {
    if (j + kPrefetchAhead < j_count) prefetch(p.tab[p.cand(i, j + kPrefetchAhead)], 0, d);
    const int32_t id = p.cand(i, j);
    logit[j] =
        p.masked(i, j) ? kMaskedLogit : dot(qd, p.tab[id], d) * inv_norm[slot[id]] * p.inv_tau;
    mx = std::max(mx, logit[j]);
  }
  double se = 0;
  for (int64_t j = 0; j < j_count; ++j) {
    ex[j] = std::exp(logit[j] - mx);
    se += ex[j];
  }
  const double token_loss = mx + std::log(se) - logit[0];
  if (!grad) return token_loss;
  // dq = sum_j b_j x_j with b_j = (c_j / tau) / n_j; a masked logit is a constant: b_j = 0
  // (phase 2 skips it). Four candidates per pass over dq.
  T* cf = s.coef.data() + i * j_count;
  for (int64_t j = 0; j < j_count; ++j) {
    if (p.masked(i, j)) {
      b[j] = 0;
      continue;
    }
    const double a = p.scale * (ex[j] / se - (j == 0 ? 1.0 : 0.0)) * p.inv_tau;
    cf[j] = static_cast<T>(a);
    b[j] = a * inv_norm[slot[p.cand(i, j)]];
  }
  std::fill(dqa, dqa + d, 0.0);
  int64_t j = 0;
  for (; j + 4 <= j_count; j += 4) {
    const T *x0 = p.tab[p.cand(i, j)], *x1 = p.tab[p.cand(i, j + 1)], *x2 = p.tab[p.cand(i, j + 2)],
            *x3 = p.tab[p.cand(i, j + 3)];
    for (int64_t c = 0; c < d; ++c)
      dqa[c] += (b[j] * x0[c] + b[j + 1] * x1[c]) + (b[j + 2] * x2[c] + b[j + 3] * x3[c]);
  }
  for (; j < j_count; ++j) {
    const T* x = p.tab[p.cand(i, j)];
    for (int64_t c = 0; c < d; ++c) dqa[c] += b[j] * x[c];
  }
  for (int64_t c = 0; c < d; ++c) dq_row[c] = static_cast<T>(dqa[c]);
  return token_loss;
}

// Phase 1: every token's loss (into s.token_loss), coefficients and dq (zero for unsupervised
// tokens); returns the summed loss, unscaled.
template <typename T>
double forward(Ctx& ctx, const Problem<T>& p, Scratch<T>& s, const Tensor& dq) {
  const int64_t t = p.t, d = p.d, j_count = p.j_count;
  const bool grad = !dq.empty();
  s.token_loss.assign(static_cast<size_t>(t), 0.0);
  double* token_loss = s.token_loss.data();
  s.coef.resize(grad ? static_cast<size_t>(t * j_count) : 0);
  const Rows<T> dqr = grad ? rows_of<T>(dq) : Rows<T>{};
#pragma omp parallel num_threads(detail::threads_for(ctx, 2 * t * j_count * d))
  {
    thread_local TokenBuffers buf;
    buf.logit.resize(static_cast<size_t>(j_count));
    buf.ex.resize(buf.logit.size());
    buf.b.resize(buf.logit.size());
    buf.qd.resize(static_cast<size_t>(d));
    buf.dqa.resize(buf.qd.size());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < t; ++i) {
      if (p.tgt[i] == 0) {  // unsupervised token: no loss, no gradient
        if (grad)
          for (int64_t c = 0; c < d; ++c) dqr[i][c] = T(0);
        continue;
      }
      token_loss[i] = token_forward(p, s, buf, i, grad, grad ? dqr[i] : nullptr);
    }
  }
  double total = 0;
  for (int64_t i = 0; i < t; ++i) total += token_loss[i];
  return total;
}

// Phase 2: g of each listed row (into s.g), summed over its (token, candidate) pairs in order.
template <typename T>
void scatter_row_grads(Ctx& ctx, const Problem<T>& p, Scratch<T>& s) {
  const int64_t d = p.d, j_count = p.j_count;
  const int32_t* slot = s.slot.data();
  const T* coef = s.coef.data();
  s.g.assign(s.rows.size() * static_cast<size_t>(d), T(0));
  T* g = s.g.data();
  detail::for_column_slices(ctx, d, p.t * j_count * d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < p.t; ++i) {
      if (p.tgt[i] == 0) continue;
      const T* cf = coef + i * j_count;
      const T* qi = p.qr[i];
      for (int64_t j = 0; j < j_count; ++j) {
        if (p.masked(i, j)) continue;
        if (j + kPrefetchAhead < j_count)
          prefetch(g + slot[p.cand(i, j + kPrefetchAhead)] * d, c0, c1);
        const T a = cf[j];
        T* gr = g + slot[p.cand(i, j)] * d;
        for (int64_t c = c0; c < c1; ++c) gr[c] += a * qi[c];
      }
    }
  });
}

// Phase 3: each listed row's g through the normalisation, added to d_table; marks the row.
template <typename T>
void backprop_row_norms(Ctx& ctx, const Problem<T>& p, const Scratch<T>& s, const Tensor& d_table,
                        const Tensor& touched) {
  const int64_t u = static_cast<int64_t>(s.rows.size()), d = p.d;
  const Rows<T> dt = rows_of<T>(d_table);
  uint8_t* mark = touched.as<uint8_t>();
#pragma omp parallel for schedule(static) num_threads(detail::threads_for(ctx, 4 * u * d))
  for (int64_t k = 0; k < u; ++k) {
    const int32_t id = s.rows[k];
    const T* x = p.tab[id];
    const T* gr = s.g.data() + k * d;
    T* out = dt[id];
    const double in = s.inv_norm[k];
    // Through e = x / n: (g - e <e, g>) / n; a clamped norm is a constant, so just g / eps.
    const double eg = std::sqrt(dot(x, x, d)) > p.eps ? dot(x, gr, d) * in : 0.0;
    for (int64_t c = 0; c < d; ++c) out[c] += static_cast<T>((gr[c] - x[c] * in * eg) * in);
    mark[id] = 1;
  }
}

template <typename T>
void sampled_softmax_impl(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                          const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                          const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                          const Tensor& touched) {
  const Problem<T> p(spec, q, targets, neg_ids, table);
  thread_local Scratch<T> s;
  list_candidate_rows(ctx, p, s);
  loss.as<double>()[0] = p.scale * forward(ctx, p, s, dq);
  if (dq.empty()) return;
  scatter_row_grads(ctx, p, s);
  backprop_row_norms(ctx, p, s, d_table, touched);
}

}  // namespace

void sampled_softmax(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                     const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                     const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                     const Tensor& touched) {
  check_shape(q, {-1, -1}, "sampled_softmax q");
  detail::check_cpu(q, "sampled_softmax q");
  const int64_t t = q.dim(0), d = q.dim(1);
  check_shape(table, {-1, d}, "sampled_softmax table");
  detail::check_dtype(table, q.dtype, "sampled_softmax table");
  const int64_t v = table.dim(0);
  check_shape(targets, {t}, "sampled_softmax targets");
  detail::check_dtype(targets, DType::kI32, "sampled_softmax targets");
  check_shape(neg_ids, {t, -1}, "sampled_softmax neg_ids");
  detail::check_dtype(neg_ids, DType::kI32, "sampled_softmax neg_ids");
  check_shape(loss, {1}, "sampled_softmax loss");
  detail::check_dtype(loss, DType::kF64, "sampled_softmax loss");
  HSTU_CHECK(spec.temperature > 0, "sampled_softmax: temperature must be positive, got ",
             spec.temperature);
  HSTU_CHECK(spec.eps > 0, "sampled_softmax: eps must be positive, got ", spec.eps);
  const int32_t* tgt = targets.as<int32_t>();
  const Rows<const int32_t> neg = rows_of<const int32_t>(neg_ids);
  for (int64_t i = 0; i < t; ++i) {
    HSTU_CHECK(tgt[i] >= 0 && tgt[i] < v, "sampled_softmax: targets[", i, "] = ", tgt[i],
               " is outside the table [0, ", v, ")");
    for (int64_t j = 0; j < neg_ids.dim(1); ++j)
      HSTU_CHECK(neg[i][j] >= 0 && neg[i][j] < v, "sampled_softmax: neg_ids[", i, ",", j,
                 "] = ", neg[i][j], " is outside the table [0, ", v, ")");
  }
  if (!dq.empty()) {
    check_shape(dq, {t, d}, "sampled_softmax dq");
    detail::check_dtype(dq, q.dtype, "sampled_softmax dq");
    check_shape(d_table, {v, d}, "sampled_softmax d_table");
    detail::check_dtype(d_table, table.dtype, "sampled_softmax d_table");
    check_shape(touched, {v}, "sampled_softmax touched");
    detail::check_dtype(touched, DType::kU8, "sampled_softmax touched");
  }
  detail::dispatch_float(q, "sampled_softmax", [&]<typename T>(T) {
    sampled_softmax_impl<T>(ctx, spec, q, targets, neg_ids, table, loss, dq, d_table, touched);
  });
}

}  // namespace hstu::cpu
