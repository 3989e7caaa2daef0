// popularity.h — the most-popular-item baseline, ranked with the model evaluation's protocol.
//
// Scores are training-split item counts. For an eval sample with target t and history items
// (its window, i.e. the last max_history_seqlen items before t), the rank is
//   1 + #{items j in 1..V-1 : j != t, j not in the history, and
//         count[j] > count[t], or count[j] == count[t] and j < t}
// — ties are broken by id (a smaller id ranks ahead), so every rank is an exact integer; the
// target itself is never filtered. Ranks above rank_cap become rank_cap + 1. Metric averaging
// lives in the evaluator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/dataset.h"
#include "data/splits.h"

namespace hstu {

// count[i] ([num_items]) = occurrences of item i in every user's events up to and including the
// training target (the full training prefix, not only the truncated history window).
std::vector<int64_t> popularity_counts(const SequenceDataset& ds, const Split& train);

// One rank per sample of `eval` ([eval.samples.size()]), 1..rank_cap+1.
std::vector<int32_t> popularity_ranks(const SequenceDataset& ds, const Split& eval,
                                      std::span<const int64_t> counts, int64_t rank_cap = 2500);

}  // namespace hstu
