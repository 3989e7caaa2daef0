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
//
// Ranking extensions: contextual features (C = num_contextual_features) and multi-task labels
// (K = num_tasks). Both default to 0, and then the data are exactly the model above. Contexts
// and labels are drawn from a second per-user Philox stream (same counter block, stream
// kLabelStream) and the rating is always drawn, so items, lengths and timestamps never depend
// on C or K. With m = clusters_per_user, p_0 .. p_{m-1} user u's preferred clusters in draw order,
// V = contextual_cardinality:
//   - contextual feature c of user u: x_uc = code_c(p_{c mod m}) with probability
//     1 - contextual_noise, else uniform on [0, V); code_c: cluster -> [0, V) is a fixed random
//     map per feature (named "feature_<c>"). So a user's features say which clusters it watches.
//   - labels: the action of event i (user u, item j in cluster g) is a K-bit mask (num_actions
//     2^K) whose bit k ~ Bernoulli(sigmoid(z_k)), independently, with the planted logit
//       z_k = a_k + s_k [ w_k^item beta_k(j)                         item level
//                       + w_k^ctx  gamma_k(u)                        user level (contexts)
//                       + w_k^pref (2 pref(u, g) - 1)                contexts x item
//                       + w_k^seq  (2 chain_i - 1) ]                 sequence level
//     beta_k(j) ~ N(0, 1)                               a per-task item bias;
//     gamma_k(u) = sum_c W_k[c][x_uc] / sqrt(C)         W ~ N(0, 1): a propensity of each
//                                                       contextual value (0 when C = 0);
//     pref(u, g) = min(1, #{c : code_c(g) = x_uc} / ceil(C / m))
//                                                       the item's cluster is one the user's
//                                                       features name (term dropped when C = 0);
//     chain_i = 1 for a chain step (an item of the user's preferred clusters), 0 for a noise
//               item (uniform over the catalogue, even when it lands in a preferred cluster);
//     s_k = label_signal (1.5 - 0.9 k / (K - 1))        task strength: task 0 easiest, task K-1
//                                                       hardest (K = 1: 1.05 label_signal);
//     w_k^* ~ U(0.25, 1) per task and term; with probability 1/4 a task is a "dislike" task:
//     its pref and seq terms both flip sign (one sign for both, as they overlap and opposite
//     signs would cancel); a_k = logit(r_k), r_k ~ U(0.1, 0.5) (the base rate before the other
//     terms shift it).
//   code, W, beta and the tasks' (w, sign, r) are drawn once, each from its own stream
//   (seed, kLabelStream + 1..4), so a task's coefficients depend only on seed, K, label_signal
//   and whether C > 0.
//   synthetic_label_probabilities() gives sigmoid(z_k) per event: scoring candidates by it is
//   the oracle, whose AUC no model can beat in expectation (data/synthetic_oracle.h).
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

// Generates the dataset (name "synthetic", num_items = N + 1; num_actions 6 (ratings) or 2^K
// (label masks); C contextual features "feature_0" .. of cardinality V). Throws on invalid
// arguments.
SequenceDataset generate_synthetic(const SyntheticArgs& args);

// The planted probability sigmoid(z_k) of every event's label bit k: [E * K] row-major (event e,
// task k at e * K + k), for `ds` = generate_synthetic(args) (checked by its sizes and items).
// Regenerates every user; needs args.num_tasks > 0.
std::vector<float> synthetic_label_probabilities(const SyntheticArgs& args,
                                                 const SequenceDataset& ds);

// One draw of a RandomDistribution (recsys-examples semantics: uniform on [low, high); normal
// and lognormal (real-space mean/std) rounded and clamped to [low, high - 1]; zipf shifted to
// start at low and clamped), then clamped to [min_value, max_value]. high = -1 means
// max_value + 1; mean = -1 means (low + high) / 2; std = -1 means (high - low) / 4 (normal) or
// mean / 2 (lognormal).
int64_t sample_distribution(const RandomDistribution& dist, int64_t min_value, int64_t max_value,
                            PhiloxStream& rng);

}  // namespace hstu
