// synthetic.cpp — the synthetic generator (model documented in synthetic.h).
//
// Two passes over users: lengths first (to lay out the CSR offsets), then the events, in
// parallel, each user regenerating its own Philox streams from the start. The label model's
// planted logits are computed in the same per-user pass, so the oracle
// (synthetic_label_probabilities) is that pass run again with the logits kept.
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

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
// Contexts and labels: a stream apart from the items' (kSyntheticStream), so enabling them moves
// no item, length or timestamp.
constexpr uint32_t kLabelStream = 0x53594e4cu;  // "SYNL"
constexpr int64_t kMaxTasks = 16;               // num_actions = 2^K rows of the action table

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
  HSTU_CHECK(a.num_contextual_features >= 0 && a.num_contextual_features <= 1024,
             "SyntheticArgs.num_contextual_features = ", a.num_contextual_features,
             " (need 0 .. 1024)");
  HSTU_CHECK(a.contextual_cardinality >= 1 && a.contextual_cardinality <= (1 << 24),
             "SyntheticArgs.contextual_cardinality = ", a.contextual_cardinality,
             " (need 1 .. 2^24)");
  HSTU_CHECK(a.contextual_noise >= 0 && a.contextual_noise <= 1,
             "SyntheticArgs.contextual_noise = ", a.contextual_noise, " (need 0 .. 1)");
  HSTU_CHECK(a.num_tasks >= 0 && a.num_tasks <= kMaxTasks,
             "SyntheticArgs.num_tasks = ", a.num_tasks, " (need 0 .. ", kMaxTasks, ")");
  HSTU_CHECK(a.label_signal >= 0 && std::isfinite(a.label_signal),
             "SyntheticArgs.label_signal = ", a.label_signal, " (need >= 0)");
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

// One task's planted coefficients (strength s_k and signs already folded in).
struct TaskCoef {
  double base = 0;  // a_k
  double item = 0, ctx = 0, pref = 0, seq = 0;
};

// The contexts' codes and the label model (synthetic.h), drawn once per dataset.
struct LabelModel {
  int64_t num_ctx = 0, card = 0, num_tasks = 0;
  int64_t pref_norm = 1;           // ceil(C / m): features naming one preferred cluster
  std::vector<int32_t> code;       // [C * G] code_c(g) at c * G + g
  std::vector<double> ctx_weight;  // [K * C * V] W_k[c][v] at (k * C + c) * V + v
  std::vector<double> item_bias;   // [(N + 1) * K] beta_k(j) at j * K + k
  std::vector<TaskCoef> task;      // [K]
};

LabelModel make_label_model(const SyntheticArgs& a) {
  LabelModel m;
  m.num_ctx = a.num_contextual_features;
  m.card = a.contextual_cardinality;
  m.num_tasks = a.num_tasks;
  const int64_t c_count = m.num_ctx, g_count = a.num_clusters, k_count = m.num_tasks;
  m.pref_norm = (c_count + a.clusters_per_user - 1) / a.clusters_per_user;
  // Each part from its own stream, so e.g. the tasks' coefficients do not move with the
  // catalogue size.
  const uint64_t seed = static_cast<uint64_t>(a.seed);
  PhiloxStream coef_rng(seed, kLabelStream + 1), code_rng(seed, kLabelStream + 2),
      weight_rng(seed, kLabelStream + 3), bias_rng(seed, kLabelStream + 4);
  m.code.resize(static_cast<size_t>(c_count * g_count));
  for (int32_t& v : m.code) v = static_cast<int32_t>(code_rng.below(static_cast<uint32_t>(m.card)));
  m.ctx_weight.resize(static_cast<size_t>(k_count * c_count * m.card));
  for (double& w : m.ctx_weight) w = weight_rng.normal();
  m.item_bias.resize(static_cast<size_t>(k_count > 0 ? (a.num_items + 1) * k_count : 0));
  for (double& b : m.item_bias) b = bias_rng.normal();
  for (int64_t k = 0; k < k_count; ++k) {
    const double t = k_count == 1 ? 0.5 : static_cast<double>(k) / static_cast<double>(k_count - 1);
    const double strength = a.label_signal * (1.5 - 0.9 * t);
    auto weight = [&] { return strength * (0.25 + 0.75 * coef_rng.uniform()); };
    auto sign = [&] { return coef_rng.bernoulli(0.25) ? -1.0 : 1.0; };
    TaskCoef coef;
    const double rate = 0.1 + 0.4 * coef_rng.uniform();
    coef.base = std::log(rate / (1 - rate));
    coef.item = weight();
    coef.ctx = weight();
    coef.pref = weight();
    coef.seq = weight();
    // One sign for both "the item suits the user" terms (they overlap; opposite signs would
    // cancel): a negative task (think "hate") fires on what the user does not usually watch.
    const double dislike = sign();
    coef.pref *= dislike;
    coef.seq *= dislike;
    if (c_count == 0) coef.ctx = coef.pref = 0;  // no contexts: no user-level or pref term
    m.task.push_back(coef);
  }
  return m;
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

// Generates one user's events into items/actions/timestamps ([len] each) and its contextual
// values into ctx ([C]); when `probs` is not null, also the planted label probabilities
// ([len * K]). `seen` is [N+1] scratch; seen[i] == stamp marks item i as already in this user's
// sequence.
void generate_user(const SyntheticArgs& a, const Structure& s, const LabelModel& lm, int64_t user,
                   int32_t* items, int32_t* actions, int64_t* timestamps, int32_t* ctx,
                   float* probs, std::vector<int64_t>& seen) {
  PhiloxStream rng = user_stream(a, user);
  PhiloxStream label_rng(static_cast<uint64_t>(a.seed), kLabelStream,
                         static_cast<uint64_t>(user + 1) << 32);
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

  // Contextual values: each names one preferred cluster through its code, or is noise.
  const int64_t c_count = lm.num_ctx, k_count = lm.num_tasks, g_count = a.num_clusters;
  for (int64_t c = 0; c < c_count; ++c) {
    const int32_t named = preferred[static_cast<size_t>(c) % preferred.size()];
    const bool noise = label_rng.bernoulli(a.contextual_noise);
    const int32_t random = static_cast<int32_t>(label_rng.below(static_cast<uint32_t>(lm.card)));
    ctx[c] = noise ? random : lm.code[c * g_count + named];
  }
  // The user-level term gamma_k(u) of each task.
  std::vector<double> gamma(static_cast<size_t>(k_count), 0.0);
  for (int64_t k = 0; k < k_count && c_count > 0; ++k) {
    for (int64_t c = 0; c < c_count; ++c)
      gamma[k] += lm.ctx_weight[(k * c_count + c) * lm.card + ctx[c]];
    gamma[k] /= std::sqrt(static_cast<double>(c_count));
  }
  // The label mask of an event (item, chain step or not), and its probabilities into p ([K]).
  auto label_mask = [&](int32_t item, bool from_chain, float* p) {
    const int32_t g = s.truth.cluster_of[item];
    double pref = 0;
    if (c_count > 0) {
      int64_t named = 0;
      for (int64_t c = 0; c < c_count; ++c) named += lm.code[c * g_count + g] == ctx[c];
      pref = std::min(1.0, static_cast<double>(named) / static_cast<double>(lm.pref_norm));
    }
    int32_t mask = 0;
    for (int64_t k = 0; k < k_count; ++k) {
      const TaskCoef& w = lm.task[k];
      const double z = w.base + w.item * lm.item_bias[item * k_count + k] + w.ctx * gamma[k] +
                       w.pref * (2 * pref - 1) + w.seq * (from_chain ? 1.0 : -1.0);
      const double prob = 1 / (1 + std::exp(-z));
      if (label_rng.bernoulli(prob)) mask |= 1 << k;
      if (p != nullptr) p[k] = static_cast<float>(prob);
    }
    return mask;
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
    // The rating is drawn even when labels replace it, so the items never depend on K.
    actions[i] = 1 + categorical(from_chain ? kChainRating : kNoiseRating, 5, rng);
    if (k_count > 0) {
      actions[i] = label_mask(item, from_chain, probs != nullptr ? probs + i * k_count : nullptr);
    }
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

namespace {

// Generates every user into `a` (and, when probs is not null, the label probabilities [E * K]).
void generate_all(const SyntheticArgs& args, SequenceArrays& a, std::vector<float>* probs) {
  const Structure s = make_structure(args);
  const LabelModel lm = make_label_model(args);
  const int64_t num_users = args.num_users, c_count = args.num_contextual_features;
  a.user_offsets.assign(num_users + 1, 0);
  for (int64_t u = 0; u < num_users; ++u) {
    PhiloxStream rng = user_stream(args, u);
    a.user_offsets[u + 1] = a.user_offsets[u] + user_length(args, rng);
  }
  const int64_t num_events = a.user_offsets[num_users];
  a.items.resize(num_events);
  a.actions.resize(num_events);
  a.timestamps.resize(num_events);
  a.contextual_values.resize(num_users * c_count);
  if (probs != nullptr) probs->assign(static_cast<size_t>(num_events * args.num_tasks), 0.0f);
#pragma omp parallel
  {
    std::vector<int64_t> seen(args.num_items + 1, 0);
#pragma omp for schedule(dynamic, 64)
    for (int64_t u = 0; u < num_users; ++u) {
      const int64_t o = a.user_offsets[u];
      generate_user(args, s, lm, u, &a.items[o], &a.actions[o], &a.timestamps[o],
                    a.contextual_values.data() + u * c_count,
                    probs != nullptr ? probs->data() + o * args.num_tasks : nullptr, seen);
    }
  }
}

}  // namespace

SequenceDataset generate_synthetic(const SyntheticArgs& args) {
  check_args(args);
  SequenceArrays a;
  generate_all(args, a, nullptr);

  SequenceDataset ds;
  ds.name = "synthetic";
  ds.num_items = args.num_items + 1;
  ds.num_actions = args.num_tasks > 0 ? int32_t{1} << args.num_tasks : kNumActions;
  for (int64_t c = 0; c < args.num_contextual_features; ++c) {
    ds.contextual_names.push_back("feature_" + std::to_string(c));
    ds.contextual_cardinalities.push_back(static_cast<int32_t>(args.contextual_cardinality));
  }
  attach_arrays(ds, std::move(a));
  validate_dataset(ds, "the synthetic generator");
  return ds;
}

std::vector<float> synthetic_label_probabilities(const SyntheticArgs& args,
                                                 const SequenceDataset& ds) {
  check_args(args);
  HSTU_CHECK(args.num_tasks > 0, "synthetic label probabilities need SyntheticArgs.num_tasks > 0");
  SequenceArrays a;
  std::vector<float> probs;
  generate_all(args, a, &probs);
  HSTU_CHECK(ds.num_users() == args.num_users &&
                 ds.num_events() == static_cast<int64_t>(a.items.size()) &&
                 std::equal(ds.items.begin(), ds.items.end(), a.items.begin()) &&
                 std::equal(ds.actions.begin(), ds.actions.end(), a.actions.begin()),
             "synthetic label probabilities: dataset '", ds.name,
             "' is not the one these SyntheticArgs generate");
  return probs;
}

}  // namespace hstu
