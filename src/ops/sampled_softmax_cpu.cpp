// sampled_softmax_cpu.cpp — CPU sampled-softmax retrieval loss with its fused backward.
//
// Item embeddings are L2-normalised on the fly (no [T, R, D] gather). Phase 1, parallel over
// tokens, computes the logits, a stable logsumexp, the loss and dq, and keeps two coefficients
// per (token, candidate j) for the table gradient through the normalisation
// e = x / n,  n = max(||x||, eps):
//   dL/dx_j += A_j q - B_j x_j,   A_j = c_j / (n_j tau),   B_j = c_j <q, x_j> / (n_j^3 tau)
// (B_j = 0 where the norm is clamped), with c_j = loss_scale * (softmax_j - [j == 0]).
// Phase 2 scatters them into d_table over column slices, so repeated rows need no atomics and
// the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ops_cpu_common.h"
#include "ops/sampled_softmax.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

constexpr double kMaskedLogit = -5e4;  // logit of a negative that collides with the positive

template <typename T>
void sampled_softmax_impl(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                          const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                          const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                          const Tensor& touched) {
  const int64_t t = q.dim(0), d = q.dim(1), r = neg_ids.dim(1), j_count = r + 1;
  const Rows<const T> qr = rows_of<const T>(q), tab = rows_of<const T>(table);
  const int32_t* tgt = targets.as<int32_t>();
  const Rows<const int32_t> neg = rows_of<const int32_t>(neg_ids);
  const bool grad = !dq.empty();
  const double tau = spec.temperature, eps = spec.eps, scale = spec.loss_scale;
  // Candidate j of token i: the positive (j = 0) or negative j - 1.
  const auto cand = [&](int64_t i, int64_t j) { return j == 0 ? tgt[i] : neg[i][j - 1]; };
  const auto masked = [&](int64_t i, int64_t j) { return j > 0 && neg[i][j - 1] == tgt[i]; };

  std::vector<double> token_loss(static_cast<size_t>(t), 0.0);  // [T]
  // Table-gradient coefficients (A, B) per (token, candidate): [T, R+1, 2].
  std::vector<T> coef(grad ? static_cast<size_t>(t * j_count * 2) : 0);
  const Rows<T> dqr = grad ? rows_of<T>(dq) : Rows<T>{};
#pragma omp parallel num_threads(detail::threads_for(ctx, 2 * t * j_count * d))
  {
    // Per candidate: logit, <q, x>, clamped norm; and the dq accumulator [D].
    std::vector<double> logit(static_cast<size_t>(j_count)), dot(logit.size()), nrm(logit.size());
    std::vector<double> dqa(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < t; ++i) {
      if (tgt[i] == 0) {  // unsupervised token: no loss, no gradient
        if (grad)
          for (int64_t c = 0; c < d; ++c) dqr[i][c] = T(0);
        continue;
      }
      double mx = -INFINITY;
      for (int64_t j = 0; j < j_count; ++j) {
        if (masked(i, j)) {
          logit[j] = kMaskedLogit;
        } else {
          const T* x = tab[cand(i, j)];
          double s = 0, ss = 0;
          for (int64_t c = 0; c < d; ++c) {
            s += double(qr[i][c]) * x[c];
            ss += double(x[c]) * x[c];
          }
          dot[j] = s;
          nrm[j] = std::max(std::sqrt(ss), eps);
          logit[j] = s / (nrm[j] * tau);
        }
        mx = std::max(mx, logit[j]);
      }
      double se = 0;
      for (int64_t j = 0; j < j_count; ++j) se += std::exp(logit[j] - mx);
      const double lse = mx + std::log(se);
      token_loss[i] = lse - logit[0];
      if (!grad) continue;
      std::fill(dqa.begin(), dqa.end(), 0.0);
      T* cf = &coef[static_cast<size_t>(i * j_count * 2)];
      for (int64_t j = 0; j < j_count; ++j) {
        if (masked(i, j)) continue;  // a constant logit: no gradient (phase 2 skips it too)
        const double cj = scale * (std::exp(logit[j] - lse) - (j == 0 ? 1.0 : 0.0));
        const double a = cj / (nrm[j] * tau);
        const bool clamped = !(nrm[j] > eps);
        cf[2 * j] = static_cast<T>(a);
        cf[2 * j + 1] = static_cast<T>(clamped ? 0.0 : a * dot[j] / (nrm[j] * nrm[j]));
        const T* x = tab[cand(i, j)];
        for (int64_t c = 0; c < d; ++c) dqa[c] += a * x[c];
      }
      for (int64_t c = 0; c < d; ++c) dqr[i][c] = static_cast<T>(dqa[c]);
    }
  }
  double total = 0;
  for (double l : token_loss) total += l;
  loss.as<double>()[0] = scale * total;
  if (!grad) return;

  const Rows<T> dt = rows_of<T>(d_table);
  detail::for_column_slices(ctx, d, 2 * t * j_count * d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < t; ++i) {
      if (tgt[i] == 0) continue;
      const T* cf = &coef[static_cast<size_t>(i * j_count * 2)];
      for (int64_t j = 0; j < j_count; ++j) {
        if (masked(i, j)) continue;
        const int32_t id = cand(i, j);
        const T a = cf[2 * j], b = cf[2 * j + 1];
        const T* x = tab[id];
        T* g = dt[id];
        for (int64_t c = c0; c < c1; ++c) g[c] += a * qr[i][c] - b * x[c];
      }
    }
  });
  uint8_t* mark = touched.as<uint8_t>();
  for (int64_t i = 0; i < t; ++i) {
    if (tgt[i] == 0) continue;
    for (int64_t j = 0; j < j_count; ++j)
      if (!masked(i, j)) mark[cand(i, j)] = 1;
  }
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
