// ranking_baseline.h — the logistic-regression baseline of a ranking run, and the logistic fits
// it is made of.
//
// The baseline scores each candidate from two features plus an intercept, both computed only
// from what the model may see:
//   x0 = log(1 + count of the candidate's item among the events (histories and candidates) of
//        the TRAIN split's samples)                                  — item popularity
//   x1 = mean over the sample's own history events of the label value — the user's mean:
//        cross-entropy head: the class of the history event's action, mapped exactly as
//        RankingModel maps candidate labels (action, or action - 1 for MovieLens ratings), so
//        on MovieLens the user's mean rating in half-star classes;
//        BCE head, task t: bit t of the action (the user's rate of that engagement).
//        An empty history (never produced by make_ranking_splits, but handled) falls back to
//        the mean of the same value over all events of the train split's samples.
// Fits are on the TRAIN split's candidates, in double:
//   cross-entropy head (K classes): one multinomial logistic regression over the K classes;
//   BCE head (K tasks):             an independent binary logistic regression per task.
// The eval split's candidates are then scored by the same metric code as the model
// (RankingMetrics), so the numbers compare directly.
//
// The fit: Newton's method with a backtracking (Armijo) line search on
//   f(W) = (1/n) sum_i NLL_i(W x~_i) + (l2 / 2) |W|^2,   W [R, 1 + p],
// where x~ = (1, standardised features) (mean 0, sd 1 over the training rows), R = 1 (sigmoid)
// or K (softmax over all K score rows; the L2 term makes the over-parameterised softmax
// strictly convex and picks the solution whose score rows sum to zero). l2 = kLogisticL2 = 1e-6
// (intercepts included) moves well-determined coefficients by ~1e-6 relative, and keeps
// separable or near-separable data (or a class absent from training) finite: such coefficients
// settle where the vanishing likelihood gradient meets l2 * w, i.e. |w| of order log(1/l2) ~ 14
// instead of diverging. Every sum runs in row order on one thread, so a fit is deterministic.
// Coefficients are reported in the original feature units.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/ranking.h"
#include "train/metrics.h"

namespace hstu {

inline constexpr double kLogisticL2 = 1e-6;

struct LogisticFit {
  int64_t num_rows = 0;      // score rows R: 1 (binary) or K (multinomial)
  int64_t num_features = 0;  // p, without the intercept
  std::vector<double> coef;  // [R, 1 + p]: the intercept, then one weight per feature
  int iterations = 0;        // Newton steps taken
  bool converged = false;    // max |gradient| of f fell below 1e-9
  double objective = 0;      // f at the solution (standardised space)

  // The scores of one feature row x [p]: out [R] (the logit; or the K softmax logits).
  void scores(std::span<const double> x, std::span<double> out) const;
};

// Binary logistic regression of y [n] in {0, 1} on x [n, p] (row-major) plus an intercept.
LogisticFit fit_binary_logistic(std::span<const double> x, int64_t p, std::span<const uint8_t> y,
                                double l2 = kLogisticL2, int max_iters = 100);

// Multinomial logistic regression of y [n] in [0, num_classes) on x [n, p] plus an intercept.
LogisticFit fit_multinomial_logistic(std::span<const double> x, int64_t p,
                                     std::span<const int32_t> y, int64_t num_classes,
                                     double l2 = kLogisticL2, int max_iters = 100);

// The ranking head the baseline mirrors (RankingModel's binary(), num_outputs() and
// RankingShape::movielens_ratings).
struct RankingHeadSpec {
  bool binary = true;
  int64_t num_outputs = 1;
  bool movielens_ratings = false;
  // RankingArgs.eval_metrics: the extra metrics the evaluation reports (ranking_eval.h:
  // ranking_extra_metrics), so the baseline's row has the model's columns.
  std::vector<std::string> eval_metrics = {};
};

// The label of a candidate with this action, as RankingModel::labels() holds it: the bitmask
// (BCE head) or the class (cross-entropy head; throws when outside [0, num_outputs)).
int32_t ranking_label(int32_t action, const RankingHeadSpec& head);

// Occurrences of each item among the events of the split's samples (history and candidates):
// [ds.num_items].
std::vector<int64_t> ranking_item_counts(const SequenceDataset& ds, const RankingSplit& split);

// The baseline's inputs for the candidates of samples [0, num_samples) of `split`, in
// evaluation order (sample, then candidate).
struct RankingBaselineRows {
  int64_t num_values = 0;         // V: 1 (cross-entropy head) or K (one per BCE task)
  std::vector<double> log_pop;    // [N] x0
  std::vector<double> user_mean;  // [N, V] x1 of each task
  std::vector<int32_t> labels;    // [N] ranking_label of the candidates
};
// fallback [V]: the user mean of a sample with no history.
RankingBaselineRows ranking_baseline_rows(const SequenceDataset& ds, const RankingSplit& split,
                                          int64_t num_samples, std::span<const int64_t> item_counts,
                                          std::span<const double> fallback,
                                          const RankingHeadSpec& head);

struct RankingBaseline {
  std::vector<LogisticFit> fits;  // one multinomial fit, or one binary fit per task
  int64_t train_candidates = 0, eval_candidates = 0;
  NamedValues eval;    // RankingMetrics of the eval candidates (ranking_eval.h)
  double seconds = 0;  // features + fits + evaluation

  // One line per fit: iterations, convergence and the coefficients.
  std::string describe() const;
};

// Fits on splits.train and evaluates on the first max_eval_samples samples of splits.eval (all
// when < 0; pass ranking_eval_samples(...) to score exactly the model's eval candidates).
RankingBaseline ranking_baseline(const SequenceDataset& ds, const RankingSplits& splits,
                                 const RankingHeadSpec& head, int64_t max_eval_samples = -1);

}  // namespace hstu
