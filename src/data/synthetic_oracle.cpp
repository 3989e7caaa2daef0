// synthetic_oracle.cpp — oracle AUC of synthetic ranking data and its report (see
// synthetic_oracle.h).
#include "data/synthetic_oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/synthetic.h"

namespace hstu {

SyntheticOracle synthetic_oracle(const SyntheticArgs& args, const SequenceDataset& ds,
                                 const RankingSplit& split, int64_t max_samples, AucFunction auc) {
  const int64_t k_count = args.num_tasks;
  const std::vector<float> probs = synthetic_label_probabilities(args, ds);  // [E * K]
  const int64_t n = static_cast<int64_t>(split.samples.size());
  const int64_t used = max_samples < 0 ? n : std::min(n, max_samples);
  SyntheticOracle out;
  std::vector<std::vector<float>> scores(static_cast<size_t>(k_count));
  std::vector<std::vector<uint8_t>> labels(static_cast<size_t>(k_count));
  for (int64_t s = 0; s < used; ++s) {
    const RankingSample& sample = split.samples[static_cast<size_t>(s)];
    for (int64_t e = sample.candidates; e < sample.end; ++e) {
      for (int64_t k = 0; k < k_count; ++k) {
        scores[k].push_back(probs[static_cast<size_t>(e * k_count + k)]);
        labels[k].push_back(static_cast<uint8_t>((ds.actions[e] >> k) & 1));
      }
    }
    out.num_candidates += sample.num_candidates();
  }
  for (int64_t k = 0; k < k_count; ++k) {
    double positives = 0, prob_sum = 0;
    for (size_t i = 0; i < labels[k].size(); ++i) {
      positives += labels[k][i];
      prob_sum += scores[k][i];
    }
    const double count = std::max<double>(static_cast<double>(labels[k].size()), 1);
    const bool both = positives > 0 && positives < static_cast<double>(labels[k].size());
    out.auc.push_back(both ? auc(scores[k], labels[k]) : NAN);
    out.positive_rate.push_back(positives / count);
    out.mean_prob.push_back(prob_sum / count);
  }
  return out;
}

std::string synthetic_oracle_report(const SyntheticOracle& oracle,
                                    const std::vector<std::pair<std::string, double>>& metrics) {
  std::string out;
  char line[160];
  std::snprintf(
      line, sizeof line,
      "synthetic planted signal, %lld eval candidates (bar = 0.5 + %.2f (oracle - 0.5)):\n"
      "  task  positives  model AUC  oracle AUC    bar\n",
      static_cast<long long>(oracle.num_candidates), kOracleAucFraction);
  out += line;
  int passed = 0;
  for (size_t k = 0; k < oracle.auc.size(); ++k) {
    double model = NAN;
    for (const auto& [name, v] : metrics)
      if (name == "AUC/task" + std::to_string(k)) model = v;
    const bool ok = std::isfinite(model) && std::isfinite(oracle.auc[k]) && model >= oracle.bar(k);
    passed += ok;
    std::snprintf(line, sizeof line, "  %4zu  %9.3f  %9.4f  %10.4f  %.4f  %s\n", k,
                  oracle.positive_rate[k], model, oracle.auc[k], oracle.bar(k),
                  ok ? "ok" : "BELOW");
    out += line;
  }
  std::snprintf(line, sizeof line, "  %d of %zu tasks reach the bar\n", passed, oracle.auc.size());
  out += line;
  return out;
}

}  // namespace hstu
