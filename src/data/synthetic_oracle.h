// synthetic_oracle.h — the planted signal of synthetic ranking data as an evaluation yardstick:
// the oracle AUC per task (candidates scored by their true label probability, the ranking no
// model can beat in expectation) and the acceptance bar derived from it.
//
// The shaping decision: the data layer does not depend on the metrics (src/train/), so the
// caller passes its exact AUC (train/metrics.h roc_auc) in; the oracle and the model are then
// scored by the same function over the same candidates.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "data/ranking.h"

namespace hstu {

// A model trained on synthetic ranking data passes task k when its AUC reaches
//   0.5 + kOracleAucFraction * (oracle_k - 0.5),
// i.e. it recovers at least this fraction of the planted signal's margin over chance. The
// oracle knows what no model sees (whether an event was a chain step or noise, the exact
// coefficients a model can only estimate from finite labels), so 1 is out of reach; 0.5 asks
// for half of it (configs/synthetic-ranking.gin recovers 0.79 .. 0.90, docs/BENCHMARKS.md).
inline constexpr double kOracleAucFraction = 0.5;

// Exact ROC AUC of (scores, labels) (train/metrics.h roc_auc).
using AucFunction = double (*)(std::span<const float> scores, std::span<const uint8_t> labels);

struct SyntheticOracle {
  int64_t num_candidates = 0;
  std::vector<double> auc;            // [K] AUC of the true probabilities (NaN: one class only)
  std::vector<double> positive_rate;  // [K] share of candidates with label bit k set
  std::vector<double> mean_prob;      // [K] mean true probability (close to positive_rate)

  double bar(size_t k) const { return 0.5 + kOracleAucFraction * (auc[k] - 0.5); }
};

// The oracle over the candidates of split.samples[0 .. max_samples) (max_samples < 0: all; the
// samples an evaluation with max_eval_iters covers), for ds = generate_synthetic(args) with
// args.num_tasks > 0.
SyntheticOracle synthetic_oracle(const SyntheticArgs& args, const SequenceDataset& ds,
                                 const RankingSplit& split, int64_t max_samples, AucFunction auc);

// A table of model AUC ("AUC/task<k>" of `metrics`, the ranking evaluation's names), oracle AUC,
// the bar and whether the model reaches it, one row per task.
std::string synthetic_oracle_report(const SyntheticOracle& oracle,
                                    const std::vector<std::pair<std::string, double>>& metrics);

}  // namespace hstu
