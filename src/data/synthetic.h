// synthetic.h — the synthetic dataset: items in clusters with a planted successor chain, users
// who prefer a few clusters, deterministic by SyntheticArgs.seed.
//
// The shaping decision: every user is generated from its own Philox stream (counter block
// (user + 1) << 32), so the data does not depend on thread count or generation order, and any
// one user can be regenerated alone.
//
// Model of one user (catalogue items 1..N, N = num_items, in num_clusters clusters):
//   - clusters: a seeded permutation of 1..N cut into num_clusters contiguous runs; inside a
//     run the permutation order is a cycle, and succ(item) = the next item of that cycle;
//   - popularity: cluster c has weight 1 / (c + 1) (Zipf, exponent 1); the user draws
//     clusters_per_user distinct clusters by weight;
//   - length: from seqlen_dist (RandomDistribution semantics of recsys-examples: high = -1 means
//     max_seqlen + 1), clamped to [min_seqlen, max_seqlen];
//   - first item: a uniform item of a uniform preferred cluster; then each step is, with
//     probability cluster_stickiness, a chain step — succ(last chain item) with probability
//     transition_sharpness, else a uniform item of a uniform preferred cluster — and otherwise
//     a noise item, uniform over the catalogue (noise does not move the chain);
//   - no repeats: a user never gets an item twice (the paper's evaluation filters history items,
//     so a repeated target could never be ranked). A chain step walks on along the cycle past
//     items already seen; a drawn item already seen is redrawn (16 tries, then the next unseen
//     id). Lengths are capped at N.
//   - timestamps: start uniform in [1e9, 1e9 + 1 year), gaps 1 + floor(Exp(mean 4 h)) seconds;
//   - action: a 1..5 rating, mostly 4-5 for chain items, mostly 1-3 for noise (num_actions 6).
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "data/random_stream.h"

namespace hstu {

// The planted structure (for tests and diagnostics).
struct SyntheticTruth {
  std::vector<int32_t> cluster_of;  // [N+1] cluster of each item (entry 0 unused, -1)
  std::vector<int32_t> successor;   // [N+1] planted next item of each item (entry 0 unused, 0)
};

SyntheticTruth synthetic_truth(const SyntheticArgs& args);

// Generates the dataset (name "synthetic", num_items = N + 1, num_actions 6, no contextual
// features). Throws on invalid arguments.
SequenceDataset generate_synthetic(const SyntheticArgs& args);

// One draw of a RandomDistribution (recsys-examples semantics: uniform on [low, high); normal
// and lognormal (real-space mean/std) rounded and clamped to [low, high - 1]; zipf shifted to
// start at low and clamped), then clamped to [min_value, max_value]. high = -1 means
// max_value + 1; mean = -1 means (low + high) / 2; std = -1 means (high - low) / 4 (normal) or
// mean / 2 (lognormal).
int64_t sample_distribution(const RandomDistribution& dist, int64_t min_value, int64_t max_value,
                            PhiloxStream& rng);

}  // namespace hstu
