// synthetic.cpp — the synthetic generator (model documented in synthetic.h).
//
// Two passes over users: lengths first (to lay out the CSR offsets), then the events, in
// parallel, each user regenerating its own Philox stream from the start.
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hstu {

namespace {

constexpr int64_t kStartTime = 1000000000;      // 2001-09-09
constexpr uint32_t kStartSpread = 365 * 86400;  // users start within one year
constexpr double kMeanGapSeconds = 4 * 3600.0;  // mean time between two events of a user
constexpr int kRedraws = 16;                    // draws of an unseen item before scanning
constexpr int32_t kNumActions = 6;              // ratings 1..5
// Rating distributions (P(rating = 1..5)) of chain items and of noise items.
constexpr double kChainRating[5] = {0.0, 0.05, 0.15, 0.35, 0.45};
constexpr double kNoiseRating[5] = {0.30, 0.30, 0.25, 0.10, 0.05};

void check_args(const SyntheticArgs& a) {
  HSTU_CHECK(a.num_users >= 1, "SyntheticArgs.num_users = ", a.num_users, " (need >= 1)");
  HSTU_CHECK(a.num_items >= 2 && a.num_items < INT32_MAX, "SyntheticArgs.num_items = ", a.num_items,
             " (need 2 .. 2^31-2)");
  HSTU_CHECK(a.num_clusters >= 1 && a.num_clusters <= a.num_items,
             "SyntheticArgs.num_clusters = ", a.num_clusters, " (need 1 .. num_items)");
  HSTU_CHECK(a.clusters_per_user >= 1 && a.clusters_per_user <= a.num_clusters,
             "SyntheticArgs.clusters_per_user = ", a.clusters_per_user,
             " (need 1 .. num_clusters)");
  HSTU_CHECK(a.cluster_stickiness >= 0 && a.cluster_stickiness <= 1,
             "SyntheticArgs.cluster_stickiness = ", a.cluster_stickiness, " (need 0 .. 1)");
  HSTU_CHECK(a.transition_sharpness >= 0 && a.transition_sharpness <= 1,
             "SyntheticArgs.transition_sharpness = ", a.transition_sharpness, " (need 0 .. 1)");
  HSTU_CHECK(a.min_seqlen >= 1 && a.max_seqlen >= a.min_seqlen,
             "SyntheticArgs.min_seqlen = ", a.min_seqlen, ", max_seqlen = ", a.max_seqlen,
             " (need 1 <= min <= max)");
}

// Index drawn from the categorical distribution `p` (sums to 1).
int categorical(const double* p, int n, PhiloxStream& rng) {
  double u = rng.uniform();
  for (int i = 0; i + 1 < n; ++i) {
    if (u < p[i]) return i;
    u -= p[i];
  }
  return n - 1;
}

struct Structure {
  SyntheticTruth truth;
  std::vector<int32_t> members;        // [N] items grouped by cluster (a permutation of 1..N)
  std::vector<int64_t> cluster_start;  // [C+1] cluster c = members[cluster_start[c] ..)
  std::vector<double> weight;          // [C] popularity weight of each cluster
};

Structure make_structure(const SyntheticArgs& a) {
  const int64_t n = a.num_items, c_count = a.num_clusters;
  Structure s;
  s.members.resize(n);
  std::iota(s.members.begin(), s.members.end(), 1);
  PhiloxStream rng(static_cast<uint64_t>(a.seed), kSyntheticStream, 0);
  rng.shuffle(std::span<int32_t>(s.members));
  s.truth.cluster_of.assign(n + 1, -1);
  s.truth.successor.assign(n + 1, 0);
  for (int64_t c = 0; c <= c_count; ++c) s.cluster_start.push_back(c * n / c_count);
  for (int64_t c = 0; c < c_count; ++c) {
    const int64_t begin = s.cluster_start[c], end = s.cluster_start[c + 1];
    for (int64_t i = begin; i < end; ++i) {
      s.truth.cluster_of[s.members[i]] = static_cast<int32_t>(c);
      s.truth.successor[s.members[i]] = s.members[i + 1 < end ? i + 1 : begin];
    }
    s.weight.push_back(1.0 / static_cast<double>(c + 1));
  }
  return s;
}

// The first draws of user u's stream: its length.
int64_t user_length(const SyntheticArgs& a, PhiloxStream& rng) {
  const int64_t len = sample_distribution(a.seqlen_dist, a.min_seqlen, a.max_seqlen, rng);
  return std::min(len, a.num_items);
}

PhiloxStream user_stream(const SyntheticArgs& a, int64_t user) {
  return PhiloxStream(static_cast<uint64_t>(a.seed), kSyntheticStream,
                      static_cast<uint64_t>(user + 1) << 32);
}

// Generates one user's events into items/actions/timestamps ([len] each). `seen` is [N+1]
// scratch; seen[i] == stamp marks item i as already in this user's sequence.
void generate_user(const SyntheticArgs& a, const Structure& s, int64_t user, int32_t* items,
                   int32_t* actions, int64_t* timestamps, std::vector<int64_t>& seen) {
  PhiloxStream rng = user_stream(a, user);
  const int64_t len = user_length(a, rng);
  const int64_t n = a.num_items;
  const int64_t stamp = user + 1;

  // Preferred clusters, drawn by weight without replacement.
  std::vector<int32_t> preferred;
  std::vector<double> w = s.weight;
  for (int64_t k = 0; k < a.clusters_per_user; ++k) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    double r = rng.uniform() * total;
    int32_t pick = -1;
    for (size_t c = 0; c < w.size(); ++c) {
      if (w[c] <= 0) continue;
      pick = static_cast<int32_t>(c);
      if (r < w[c]) break;
      r -= w[c];
    }
    preferred.push_back(pick);
    w[pick] = 0;
  }
  auto is_preferred = [&](int32_t item) {
    return std::find(preferred.begin(), preferred.end(), s.truth.cluster_of[item]) !=
           preferred.end();
  };
  auto preferred_item = [&]() {
    const int32_t c = preferred[rng.below(static_cast<uint32_t>(preferred.size()))];
    const int64_t begin = s.cluster_start[c], size = s.cluster_start[c + 1] - begin;
    return s.members[begin + rng.below(static_cast<uint32_t>(size))];
  };
  auto catalogue_item = [&]() {
    return static_cast<int32_t>(1 + rng.below(static_cast<uint32_t>(n)));
  };
  // An unseen item from `draw`: redraws, then the next unseen id after the last draw.
  auto unseen = [&](auto&& draw) {
    int32_t item = draw();
    for (int t = 1; t < kRedraws && seen[item] == stamp; ++t) item = draw();
    while (seen[item] == stamp) item = static_cast<int32_t>(item % n + 1);
    return item;
  };

  int64_t t = kStartTime + rng.below(kStartSpread);
  int32_t chain = 0;  // last chain item (0 before the first)
  for (int64_t i = 0; i < len; ++i) {
    int32_t item;
    bool from_chain = true;
    if (chain == 0) {  // the first item
      item = unseen(preferred_item);
    } else if (rng.bernoulli(a.cluster_stickiness)) {
      if (rng.bernoulli(a.transition_sharpness)) {
        // Walk the planted cycle past items already seen.
        item = s.truth.successor[chain];
        const int64_t cluster_size = s.cluster_start[s.truth.cluster_of[chain] + 1] -
                                     s.cluster_start[s.truth.cluster_of[chain]];
        for (int64_t step = 0; step < cluster_size && seen[item] == stamp; ++step) {
          item = s.truth.successor[item];
        }
        if (seen[item] == stamp) item = unseen(preferred_item);
      } else {
        item = unseen(preferred_item);
      }
    } else {
      item = unseen(catalogue_item);
      from_chain = false;
    }
    from_chain = from_chain && is_preferred(item);
    if (from_chain) chain = item;
    seen[item] = stamp;
    items[i] = item;
    actions[i] = 1 + categorical(from_chain ? kChainRating : kNoiseRating, 5, rng);
    timestamps[i] = t;
    t += 1 + static_cast<int64_t>(std::floor(rng.exponential(kMeanGapSeconds)));
  }
}

}  // namespace

int64_t sample_distribution(const RandomDistribution& dist, int64_t min_value, int64_t max_value,
                            PhiloxStream& rng) {
  const double low = dist.low;
  const double high = dist.high == -1 ? static_cast<double>(max_value) + 1 : dist.high;
  HSTU_CHECK(high > low, "RandomDistribution: high (", high, ") must exceed low (", low, ")");
  const double mean = dist.mean == -1 ? (low + high) / 2 : dist.mean;
  double value = 0;
  if (dist.dist_type == "uniform") {
    const double span = std::floor(high - low);
    HSTU_CHECK(span >= 1 && span < 4294967296.0, "RandomDistribution(uniform): [", low, ", ", high,
               ") holds no integer or too many");
    value = low + rng.below(static_cast<uint32_t>(span));
  } else if (dist.dist_type == "normal") {
    const double std = dist.std == -1 ? (high - low) / 4 : dist.std;
    HSTU_CHECK(std > 0, "RandomDistribution(normal): std must be > 0, got ", std);
    value = std::round(std::clamp(mean + std * rng.normal(), low, high - 1));
  } else if (dist.dist_type == "lognormal") {
    HSTU_CHECK(mean > 0, "RandomDistribution(lognormal): mean must be > 0, got ", mean);
    const double std = dist.std == -1 ? mean / 2 : dist.std;
    HSTU_CHECK(std > 0, "RandomDistribution(lognormal): std must be > 0, got ", std);
    const double sigma2 = std::log(1.0 + (std / mean) * (std / mean));
    const double mu = std::log(mean) - sigma2 / 2;
    value = std::round(std::clamp(std::exp(mu + std::sqrt(sigma2) * rng.normal()), low, high - 1));
  } else if (dist.dist_type == "zipf") {
    HSTU_CHECK(dist.alpha > 1, "RandomDistribution(zipf): alpha must be > 1, got ", dist.alpha);
    const double k = static_cast<double>(rng.zipf(dist.alpha));
    value = std::clamp(k + low - 1, low, high - 1);
  } else {
    HSTU_THROW("RandomDistribution.dist_type \"", dist.dist_type,
               "\" is not one of uniform, normal, zipf, lognormal");
  }
  return std::clamp(static_cast<int64_t>(value), min_value, max_value);
}

SyntheticTruth synthetic_truth(const SyntheticArgs& args) {
  check_args(args);
  return make_structure(args).truth;
}

SequenceDataset generate_synthetic(const SyntheticArgs& args) {
  check_args(args);
  const Structure s = make_structure(args);
  const int64_t num_users = args.num_users;

  SequenceArrays a;
  a.user_offsets.assign(num_users + 1, 0);
  for (int64_t u = 0; u < num_users; ++u) {
    PhiloxStream rng = user_stream(args, u);
    a.user_offsets[u + 1] = a.user_offsets[u] + user_length(args, rng);
  }
  const int64_t num_events = a.user_offsets[num_users];
  a.items.resize(num_events);
  a.actions.resize(num_events);
  a.timestamps.resize(num_events);
#pragma omp parallel
  {
    std::vector<int64_t> seen(args.num_items + 1, 0);
#pragma omp for schedule(dynamic, 64)
    for (int64_t u = 0; u < num_users; ++u) {
      const int64_t o = a.user_offsets[u];
      generate_user(args, s, u, &a.items[o], &a.actions[o], &a.timestamps[o], seen);
    }
  }

  SequenceDataset ds;
  ds.name = "synthetic";
  ds.num_items = args.num_items + 1;
  ds.num_actions = kNumActions;
  attach_arrays(ds, std::move(a));
  validate_dataset(ds, "the synthetic generator");
  return ds;
}

}  // namespace hstu
