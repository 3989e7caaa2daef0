// ranking_baseline.cpp — Newton fits of binary / multinomial logistic regression and the ranking
// baseline built from them (ranking_baseline.h).
#include "train/ranking_baseline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "train/ranking_eval.h"

namespace hstu {

namespace {

// Event e's label: the dataset's own labels when it has them (benchmark data), else its action.
int32_t event_label(const SequenceDataset& ds, int64_t e) {
  return ds.labels.empty() ? ds.actions[e] : ds.labels[e];
}

constexpr double kGradTol = 1e-9;  // convergence: max |df/dW|

// The design of a fit: standardised features with an intercept column, labels, the model type.
struct Problem {
  std::span<const double> x;  // [n, p] raw
  int64_t n = 0, p = 0, q = 0, rows = 0;
  std::vector<double> mean, sd;  // [p]
  std::span<const int32_t> y;    // [n]: 0/1 (binary) or class
  bool softmax = false;
  double l2 = 0;

  // x~_i = (1, (x_i - mean) / sd): out [q].
  void row(int64_t i, double* out) const {
    out[0] = 1;
    for (int64_t a = 0; a < p; ++a)
      out[1 + a] = (x[static_cast<size_t>(i * p + a)] - mean[static_cast<size_t>(a)]) /
                   sd[static_cast<size_t>(a)];
  }
};

double softplus(double z) {
  return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z)));
}

// Per-row loss; when g is given, also the derivatives w.r.t. the R scores: g [R], h [R, R].
// s [R] holds the scores on entry (overwritten with probabilities when g is given).
double row_loss(const Problem& pr, int32_t y, double* s, double* g, double* h) {
  if (!pr.softmax) {
    const double z = s[0];
    const double loss = softplus(z) - (y ? z : 0.0);
    if (g) {
      const double prob = 1 / (1 + std::exp(-z));
      g[0] = prob - y;
      h[0] = prob * (1 - prob);
    }
    return loss;
  }
  const int64_t r = pr.rows;
  double m = s[0];
  for (int64_t c = 1; c < r; ++c) m = std::max(m, s[c]);
  double sum = 0;
  for (int64_t c = 0; c < r; ++c) sum += std::exp(s[c] - m);
  const double lse = m + std::log(sum);
  const double loss = lse - s[y];
  if (g) {
    for (int64_t c = 0; c < r; ++c) s[c] = std::exp(s[c] - lse);
    for (int64_t c = 0; c < r; ++c) {
      g[c] = s[c] - (c == y ? 1.0 : 0.0);
      for (int64_t d = 0; d < r; ++d) h[c * r + d] = s[c] * ((c == d ? 1.0 : 0.0) - s[d]);
    }
  }
  return loss;
}

// f(W); with grad [R*q] and hess [R*q, R*q] given, also its gradient and Hessian.
double evaluate(const Problem& pr, const std::vector<double>& w, std::vector<double>* grad,
                std::vector<double>* hess) {
  const int64_t q = pr.q, r = pr.rows, m = r * q;
  std::vector<double> xt(static_cast<size_t>(q)), s(static_cast<size_t>(r)),
      g(static_cast<size_t>(r)), h(static_cast<size_t>(r * r));
  if (grad) {
    grad->assign(static_cast<size_t>(m), 0.0);
    hess->assign(static_cast<size_t>(m * m), 0.0);
  }
  double loss = 0;
  for (int64_t i = 0; i < pr.n; ++i) {
    pr.row(i, xt.data());
    for (int64_t c = 0; c < r; ++c) {
      double z = 0;
      for (int64_t a = 0; a < q; ++a)
        z += w[static_cast<size_t>(c * q + a)] * xt[static_cast<size_t>(a)];
      s[static_cast<size_t>(c)] = z;
    }
    const int32_t y = pr.y[static_cast<size_t>(i)];
    loss += row_loss(pr, y, s.data(), grad ? g.data() : nullptr, grad ? h.data() : nullptr);
    if (!grad) continue;
    for (int64_t c = 0; c < r; ++c)
      for (int64_t a = 0; a < q; ++a)
        (*grad)[static_cast<size_t>(c * q + a)] +=
            g[static_cast<size_t>(c)] * xt[static_cast<size_t>(a)];
    // Upper triangle of H[(c, a), (d, b)] += h[c, d] x~_a x~_b.
    for (int64_t c = 0; c < r; ++c)
      for (int64_t a = 0; a < q; ++a) {
        const int64_t row = c * q + a;
        for (int64_t d = c; d < r; ++d) {
          const double hcd = h[static_cast<size_t>(c * r + d)] * xt[static_cast<size_t>(a)];
          for (int64_t b = d == c ? a : 0; b < q; ++b)
            (*hess)[static_cast<size_t>(row * m + d * q + b)] += hcd * xt[static_cast<size_t>(b)];
        }
      }
  }
  const double inv_n = 1.0 / static_cast<double>(pr.n);
  double reg = 0;
  for (double v : w) reg += v * v;
  const double f = loss * inv_n + 0.5 * pr.l2 * reg;
  if (grad) {
    for (int64_t j = 0; j < m; ++j) {
      (*grad)[static_cast<size_t>(j)] =
          (*grad)[static_cast<size_t>(j)] * inv_n + pr.l2 * w[static_cast<size_t>(j)];
      for (int64_t k = j; k < m; ++k) {
        double& v = (*hess)[static_cast<size_t>(j * m + k)];
        v *= inv_n;
        if (k == j) v += pr.l2;
        (*hess)[static_cast<size_t>(k * m + j)] = v;
      }
    }
  }
  return f;
}

// Solves A x = b for symmetric positive definite A [m, m] (Cholesky; A is overwritten).
std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, int64_t m) {
  for (int64_t j = 0; j < m; ++j) {
    double d = a[static_cast<size_t>(j * m + j)];
    for (int64_t k = 0; k < j; ++k)
      d -= a[static_cast<size_t>(j * m + k)] * a[static_cast<size_t>(j * m + k)];
    HSTU_CHECK(d > 0, "logistic fit: the Hessian is not positive definite (pivot ", d, ")");
    const double l = std::sqrt(d);
    a[static_cast<size_t>(j * m + j)] = l;
    for (int64_t i = j + 1; i < m; ++i) {
      double v = a[static_cast<size_t>(i * m + j)];
      for (int64_t k = 0; k < j; ++k)
        v -= a[static_cast<size_t>(i * m + k)] * a[static_cast<size_t>(j * m + k)];
      a[static_cast<size_t>(i * m + j)] = v / l;
    }
  }
  for (int64_t i = 0; i < m; ++i) {  // L y = b
    double v = b[static_cast<size_t>(i)];
    for (int64_t k = 0; k < i; ++k)
      v -= a[static_cast<size_t>(i * m + k)] * b[static_cast<size_t>(k)];
    b[static_cast<size_t>(i)] = v / a[static_cast<size_t>(i * m + i)];
  }
  for (int64_t i = m - 1; i >= 0; --i) {  // L^T x = y
    double v = b[static_cast<size_t>(i)];
    for (int64_t k = i + 1; k < m; ++k)
      v -= a[static_cast<size_t>(k * m + i)] * b[static_cast<size_t>(k)];
    b[static_cast<size_t>(i)] = v / a[static_cast<size_t>(i * m + i)];
  }
  return b;
}

LogisticFit fit(Problem pr, int max_iters) {
  HSTU_CHECK(pr.n >= 1, "logistic fit: no rows");
  HSTU_CHECK(pr.p >= 0 && static_cast<int64_t>(pr.x.size()) == pr.n * pr.p,
             "logistic fit: ", pr.x.size(), " feature values for ", pr.n, " rows of ", pr.p);
  HSTU_CHECK(pr.l2 > 0, "logistic fit: l2 = ", pr.l2, " (must be > 0)");
  pr.q = 1 + pr.p;
  pr.mean.assign(static_cast<size_t>(pr.p), 0.0);
  pr.sd.assign(static_cast<size_t>(pr.p), 1.0);
  for (int64_t a = 0; a < pr.p; ++a) {
    double sum = 0, lo = pr.x[static_cast<size_t>(a)], hi = lo;
    for (int64_t i = 0; i < pr.n; ++i) {
      const double v = pr.x[static_cast<size_t>(i * pr.p + a)];
      HSTU_CHECK(std::isfinite(v), "logistic fit: feature ", a, " of row ", i, " is ", v);
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const double mean = sum / static_cast<double>(pr.n);
    double ss = 0;
    for (int64_t i = 0; i < pr.n; ++i) {
      const double d = pr.x[static_cast<size_t>(i * pr.p + a)] - mean;
      ss += d * d;
    }
    const double sd = std::sqrt(ss / static_cast<double>(pr.n));
    // A constant feature (judged by its range: over many rows the rounding of `mean` alone gives
    // an sd that a relative threshold takes for variation, and a column of +-1 beside the
    // intercept) is centred on its own value, so its column is exactly 0 and the L2 term holds
    // its weight at 0. (Benchmark data scored whole has no history: the user mean is constant.)
    const bool constant = !(hi - lo > 1e-12 * std::max(1.0, std::abs(mean)));
    pr.mean[static_cast<size_t>(a)] = constant ? lo : mean;
    pr.sd[static_cast<size_t>(a)] = constant ? 1.0 : sd;
  }
  const int64_t m = pr.rows * pr.q;
  std::vector<double> w(static_cast<size_t>(m), 0.0), grad, hess, trial(static_cast<size_t>(m));
  LogisticFit out;
  out.num_rows = pr.rows;
  out.num_features = pr.p;
  double f = 0;  // f(w), set at the top of each iteration
  for (int it = 0; it <= max_iters; ++it) {
    f = evaluate(pr, w, &grad, &hess);
    double gmax = 0;
    for (double g : grad) gmax = std::max(gmax, std::abs(g));
    if (gmax < kGradTol) {
      out.converged = true;
      break;
    }
    if (it == max_iters) break;
    std::vector<double> neg(grad);
    for (double& v : neg) v = -v;
    const std::vector<double> step = solve_spd(hess, neg, m);
    double slope = 0;  // g . step (< 0)
    for (int64_t j = 0; j < m; ++j)
      slope += grad[static_cast<size_t>(j)] * step[static_cast<size_t>(j)];
    double t = 1;
    bool accepted = false;
    for (int halvings = 0; halvings < 60; ++halvings, t *= 0.5) {
      for (int64_t j = 0; j < m; ++j)
        trial[static_cast<size_t>(j)] =
            w[static_cast<size_t>(j)] + t * step[static_cast<size_t>(j)];
      const double ft = evaluate(pr, trial, nullptr, nullptr);
      if (ft <= f + 1e-4 * t * slope) {
        accepted = true;
        break;
      }
    }
    if (!accepted) break;  // no decrease left at double precision: as converged as it gets
    w.swap(trial);
    out.iterations = it + 1;
  }
  out.objective = f;
  // Back to the original feature units.
  out.coef.assign(static_cast<size_t>(m), 0.0);
  for (int64_t c = 0; c < pr.rows; ++c) {
    double intercept = w[static_cast<size_t>(c * pr.q)];
    for (int64_t a = 0; a < pr.p; ++a) {
      const double wa = w[static_cast<size_t>(c * pr.q + 1 + a)] / pr.sd[static_cast<size_t>(a)];
      out.coef[static_cast<size_t>(c * pr.q + 1 + a)] = wa;
      intercept -= wa * pr.mean[static_cast<size_t>(a)];
    }
    out.coef[static_cast<size_t>(c * pr.q)] = intercept;
  }
  return out;
}

// The value whose history mean is feature x1 of value slot v (see the header).
double action_value(int32_t action, const RankingHeadSpec& head, int64_t v) {
  if (head.binary) return static_cast<double>((action >> v) & 1);
  return static_cast<double>(action - (head.movielens_ratings ? 1 : 0));
}

}  // namespace

void LogisticFit::scores(std::span<const double> x, std::span<double> out) const {
  HSTU_CHECK(static_cast<int64_t>(x.size()) == num_features &&
                 static_cast<int64_t>(out.size()) == num_rows,
             "logistic scores: ", x.size(), " features / ", out.size(), " outputs for a fit of ",
             num_features, " / ", num_rows);
  const int64_t q = 1 + num_features;
  for (int64_t c = 0; c < num_rows; ++c) {
    double z = coef[static_cast<size_t>(c * q)];
    for (int64_t a = 0; a < num_features; ++a)
      z += coef[static_cast<size_t>(c * q + 1 + a)] * x[static_cast<size_t>(a)];
    out[static_cast<size_t>(c)] = z;
  }
}

LogisticFit fit_binary_logistic(std::span<const double> x, int64_t p, std::span<const uint8_t> y,
                                double l2, int max_iters) {
  std::vector<int32_t> labels(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    HSTU_CHECK(y[i] <= 1, "binary logistic fit: label ", i, " is ", int(y[i]), ", not 0 or 1");
    labels[i] = y[i];
  }
  Problem pr;
  pr.x = x;
  pr.n = static_cast<int64_t>(y.size());
  pr.p = p;
  pr.rows = 1;
  pr.y = labels;
  pr.l2 = l2;
  return fit(pr, max_iters);
}

LogisticFit fit_multinomial_logistic(std::span<const double> x, int64_t p,
                                     std::span<const int32_t> y, int64_t num_classes, double l2,
                                     int max_iters) {
  HSTU_CHECK(num_classes >= 2, "multinomial logistic fit needs >= 2 classes, got ", num_classes);
  for (size_t i = 0; i < y.size(); ++i)
    HSTU_CHECK(y[i] >= 0 && y[i] < num_classes, "multinomial logistic fit: label ", i, " is ", y[i],
               ", outside [0, ", num_classes, ")");
  Problem pr;
  pr.x = x;
  pr.n = static_cast<int64_t>(y.size());
  pr.p = p;
  pr.rows = num_classes;
  pr.y = y;
  pr.softmax = true;
  pr.l2 = l2;
  return fit(pr, max_iters);
}

int32_t ranking_label(int32_t action, const RankingHeadSpec& head) {
  if (head.binary) return action;
  const int32_t c = action - (head.movielens_ratings ? 1 : 0);
  HSTU_CHECK(c >= 0 && c < head.num_outputs, "ranking label ", action, " is outside the ",
             head.num_outputs, " classes of prediction_head_arch");
  return c;
}

std::vector<int64_t> ranking_item_counts(const SequenceDataset& ds, const RankingSplit& split) {
  std::vector<int64_t> counts(static_cast<size_t>(ds.num_items), 0);
  for (const RankingSample& s : split.samples)
    for (int64_t e = s.begin; e < s.end; ++e) ++counts[static_cast<size_t>(ds.items[e])];
  return counts;
}

RankingBaselineRows ranking_baseline_rows(const SequenceDataset& ds, const RankingSplit& split,
                                          int64_t num_samples, std::span<const int64_t> item_counts,
                                          std::span<const double> fallback,
                                          const RankingHeadSpec& head) {
  RankingBaselineRows out;
  out.num_values = head.binary ? head.num_outputs : 1;
  const auto nv = static_cast<size_t>(out.num_values);
  HSTU_CHECK(fallback.size() == nv, "ranking baseline: ", fallback.size(), " fallback values for ",
             nv, " tasks");
  HSTU_CHECK(static_cast<int64_t>(item_counts.size()) == ds.num_items,
             "ranking baseline: item counts for ", item_counts.size(), " items, dataset has ",
             ds.num_items);
  num_samples = std::min<int64_t>(num_samples, static_cast<int64_t>(split.samples.size()));
  std::vector<double> mean(nv);
  for (int64_t i = 0; i < num_samples; ++i) {
    const RankingSample& s = split.samples[static_cast<size_t>(i)];
    for (size_t v = 0; v < nv; ++v) {
      double sum = 0;
      for (int64_t e = s.begin; e < s.candidates; ++e)
        sum += action_value(event_label(ds, e), head, static_cast<int64_t>(v));
      mean[v] = s.num_history() > 0 ? sum / static_cast<double>(s.num_history()) : fallback[v];
    }
    for (int64_t e = s.candidates; e < s.end; ++e) {
      out.log_pop.push_back(std::log1p(static_cast<double>(item_counts[ds.items[e]])));
      out.user_mean.insert(out.user_mean.end(), mean.begin(), mean.end());
      out.labels.push_back(ranking_label(event_label(ds, e), head));
    }
  }
  return out;
}

std::string RankingBaseline::describe() const {
  std::ostringstream os;
  char buf[64];
  for (size_t f = 0; f < fits.size(); ++f) {
    const LogisticFit& fit = fits[f];
    os << "  ";
    if (fits.size() > 1) {
      os << "task " << f;
    } else {
      os << (fit.num_rows > 1 ? "multinomial" : "binary");
    }
    os << ": " << fit.iterations << " Newton steps" << (fit.converged ? "" : " (not converged)")
       << ", [intercept, log-popularity, user mean] per " << (fit.num_rows > 1 ? "class" : "logit")
       << ":";
    const int64_t q = 1 + fit.num_features;
    for (int64_t c = 0; c < fit.num_rows; ++c) {
      os << ' ';
      if (fit.num_rows > 1) os << c << ':';
      os << '[';
      for (int64_t a = 0; a < q; ++a) {
        std::snprintf(buf, sizeof buf, "%s%.3f", a ? " " : "",
                      fit.coef[static_cast<size_t>(c * q + a)]);
        os << buf;
      }
      os << ']';
    }
    os << '\n';
  }
  return os.str();
}

RankingBaseline ranking_baseline(const SequenceDataset& ds, const RankingSplits& splits,
                                 const RankingHeadSpec& head, int64_t max_eval_samples) {
  const auto t0 = std::chrono::steady_clock::now();
  HSTU_CHECK(!ds.actions.empty(), ds.name, ": the ranking baseline needs actions (the labels)");
  const std::vector<int64_t> counts = ranking_item_counts(ds, splits.train);
  const int64_t nv = head.binary ? head.num_outputs : 1;
  // Fallback user mean: each value's mean over the train split's events.
  std::vector<double> fallback(static_cast<size_t>(nv), 0.0);
  int64_t events = 0;
  for (const RankingSample& s : splits.train.samples)
    for (int64_t e = s.begin; e < s.end; ++e, ++events)
      for (int64_t v = 0; v < nv; ++v)
        fallback[static_cast<size_t>(v)] += action_value(event_label(ds, e), head, v);
  for (double& f : fallback) f = events > 0 ? f / static_cast<double>(events) : 0.0;

  const int64_t n_eval =
      max_eval_samples < 0 ? static_cast<int64_t>(splits.eval.samples.size()) : max_eval_samples;
  const RankingBaselineRows train = ranking_baseline_rows(
      ds, splits.train, static_cast<int64_t>(splits.train.samples.size()), counts, fallback, head);
  const RankingBaselineRows eval =
      ranking_baseline_rows(ds, splits.eval, n_eval, counts, fallback, head);
  RankingBaseline out;
  out.train_candidates = static_cast<int64_t>(train.labels.size());
  out.eval_candidates = static_cast<int64_t>(eval.labels.size());
  HSTU_CHECK(out.train_candidates > 0, "ranking baseline: no training candidates");

  // Features of value slot v: [N, 2] = (x0, x1).
  auto features = [&](const RankingBaselineRows& rows, int64_t v) {
    const size_t n = rows.labels.size();
    std::vector<double> x(2 * n);
    for (size_t i = 0; i < n; ++i) {
      x[2 * i] = rows.log_pop[i];
      x[2 * i + 1] = rows.user_mean[i * static_cast<size_t>(nv) + static_cast<size_t>(v)];
    }
    return x;
  };
  if (head.binary) {
    for (int64_t t = 0; t < head.num_outputs; ++t) {
      std::vector<uint8_t> y(train.labels.size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<uint8_t>((train.labels[i] >> t) & 1);
      out.fits.push_back(fit_binary_logistic(features(train, t), 2, y));
    }
  } else {
    out.fits.push_back(
        fit_multinomial_logistic(features(train, 0), 2, train.labels, head.num_outputs));
  }

  RankingMetrics metrics(head.binary, head.num_outputs, ranking_extra_metrics(head.eval_metrics));
  std::vector<double> x(2), s(static_cast<size_t>(head.num_outputs));
  std::vector<float> logits(static_cast<size_t>(head.num_outputs));  // [K] of one candidate
  for (size_t i = 0; i < eval.labels.size(); ++i) {
    x[0] = eval.log_pop[i];
    if (head.binary) {
      for (int64_t t = 0; t < head.num_outputs; ++t) {
        x[1] = eval.user_mean[i * static_cast<size_t>(nv) + static_cast<size_t>(t)];
        out.fits[static_cast<size_t>(t)].scores(x,
                                                std::span<double>(&s[static_cast<size_t>(t)], 1));
      }
    } else {
      x[1] = eval.user_mean[i];
      out.fits[0].scores(x, s);
    }
    for (size_t c = 0; c < s.size(); ++c) logits[c] = static_cast<float>(s[c]);
    metrics.add(logits, eval.labels[i]);
  }
  out.eval = metrics.values();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace hstu
