// ranking.cpp — ranking splits (time-consistent per user, or recsys-examples' 70/30 user split),
// ranking batches and their seeded batcher.
//
// A sample is three event indices into the dataset, never a copy; a batch is filled with
// resize(), so a loop reusing one SequenceBatch stops allocating once the largest batch is seen.
#include "data/ranking.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "core/error.h"
#include "data/key_hash.h"
#include "data/random_stream.h"

namespace hstu {

namespace {

// The sample whose candidates are the C events ending at `end` (global index) of user u, with
// the newest <= H events before them (not before `first`, the user's first usable event). False
// when no history event is left.
bool window(int32_t u, int64_t first, int64_t end, int64_t h, int64_t c, RankingSample& s) {
  const int64_t cand = end - c;
  if (cand - first < 1) return false;
  s = {u, std::max(first, cand - h), cand, end};
  return true;
}

}  // namespace

RankingSplits make_ranking_splits(const SequenceDataset& ds, const DatasetArgs& args,
                                  const std::string& split, const std::string& truncate) {
  const int64_t h = args.max_history_seqlen, c = args.max_num_candidates;
  HSTU_CHECK(h >= 1, "DatasetArgs.max_history_seqlen = ", h, " (ranking needs >= 1)");
  HSTU_CHECK(c >= 0, "DatasetArgs.max_num_candidates = ", c, " (ranking needs >= 0)");
  HSTU_CHECK(split == "time" || split == "user_70_30", "ranking split \"", split,
             "\" (expected time or user_70_30)");
  HSTU_CHECK(c >= 1 || split == "user_70_30",
             "DatasetArgs.max_num_candidates = 0 scores every event of a sample (recsys-examples' "
             "semantics), which needs DatasetArgs.ranking_split = \"user_70_30\" (their split: "
             "whole users train or eval); the \"time\" split cuts each user's train and eval "
             "windows of max_num_candidates events, none when it is 0");
  HSTU_CHECK(truncate == "newest" || truncate == "oldest", "ranking truncate \"", truncate,
             "\" (expected newest or oldest)");
  HSTU_CHECK(!(split == "time" && truncate == "oldest"),
             "ranking truncate = oldest needs split = user_70_30 (with the time split the train "
             "and eval windows of a long sequence would coincide)");
  HSTU_CHECK(!ds.actions.empty(), ds.name, ": ranking needs actions (the labels)");
  HSTU_CHECK(ds.num_users() < INT32_MAX, ds.name, ": too many users");

  RankingSplits out;
  RankingSample s{};
  if (split == "time") {
    const int64_t max_windows = args.ranking_train_windows;
    HSTU_CHECK(max_windows >= 0, "DatasetArgs.ranking_train_windows = ", max_windows,
               " (>= 0; 0 = every window)");
    std::vector<std::vector<RankingSample>> by_rank;  // [k-1]: every user's k-th newest window
    for (int64_t u = 0; u < ds.num_users(); ++u) {
      const int32_t user = static_cast<int32_t>(u);
      const int64_t first = ds.user_offsets[u], end = ds.user_offsets[u + 1];
      if (window(user, first, end, h, c, s)) {
        out.eval.samples.push_back(s);
      } else {
        ++out.eval.skipped_users;
      }
      int64_t k = 1;
      for (; max_windows == 0 || k <= max_windows; ++k) {
        if (!window(user, first, end - k * c, h, c, s)) break;
        if (by_rank.size() < static_cast<size_t>(k)) by_rank.emplace_back();
        by_rank[static_cast<size_t>(k - 1)].push_back(s);
      }
      if (k == 1) ++out.train.skipped_users;
    }
    for (size_t k = by_rank.size(); k-- > 0;)
      out.train.samples.insert(out.train.samples.end(), by_rank[k].begin(), by_rank[k].end());
    return out;
  }

  // user_70_30: drop users with n <= C, then split the rest 70/30 in user order (C = 0: every
  // user with an event).
  std::vector<int32_t> eligible;
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    if (ds.seq_len(u) > c) eligible.push_back(static_cast<int32_t>(u));
  }
  const int64_t dropped = ds.num_users() - static_cast<int64_t>(eligible.size());
  // int(N * 0.7) in double arithmetic, exactly as recsys-examples (62 train users of 90).
  const size_t num_train = static_cast<size_t>(static_cast<double>(eligible.size()) * 0.7);
  for (size_t i = 0; i < eligible.size(); ++i) {
    const int32_t u = eligible[i];
    const int64_t first = ds.user_offsets[u], n = ds.seq_len(u);
    const int64_t keep = std::min(n, h + c);
    const int64_t begin = truncate == "oldest" ? first : first + n - keep;
    if (c == 0) {
      s = {u, begin, begin, begin + keep};  // every kept event scored, no history before them
    } else {
      window(u, begin, begin + keep, h, c, s);  // keep > c, so a history event exists
    }
    (i < num_train ? out.train : out.eval).samples.push_back(s);
  }
  // A dropped user would have landed in either split; count it in both (it is in neither).
  out.train.skipped_users = out.eval.skipped_users = dropped;
  return out;
}

void make_ranking_batch(const SequenceDataset& ds, const RankingSplit& split,
                        std::span<const int64_t> samples, SequenceBatch& out) {
  const int64_t batch = static_cast<int64_t>(samples.size());
  const int64_t num_ctx = static_cast<int64_t>(ds.contextual_cardinalities.size());
  out.batch_size = static_cast<int32_t>(batch);
  out.offsets.resize(batch + 1);
  out.offsets[0] = 0;
  out.max_seqlen = 0;
  int64_t tokens = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const RankingSample& s = split.samples.at(samples[b]);
    const int64_t n = s.end - s.begin;
    tokens += n;
    HSTU_CHECK(tokens <= INT32_MAX / 2, "a ranking batch of more than 2^30 events");
    out.offsets[b + 1] = static_cast<int32_t>(tokens);
    out.max_seqlen = std::max(out.max_seqlen, static_cast<int32_t>(n));
  }
  out.item_ids.resize(tokens);
  out.actions.resize(tokens);
  out.labels.resize(ds.labels.empty() ? 0 : tokens);
  out.timestamps.resize(tokens);
  out.target_ids.assign(tokens, 0);
  out.query_timestamps.resize(tokens);
  out.eval_targets.assign(batch, 0);
  out.user_ids.resize(batch);
  out.num_candidates.resize(batch);
  out.contextual.resize(batch * num_ctx);
  const bool raw = ds.raw_ids();  // keys, and their catalogue indices as the dense ids (batch.h)
  out.item_keys.resize(raw ? tokens : 0);
  out.target_keys.assign(raw ? tokens : 0, kNoKey);
  out.eval_target_keys.assign(raw ? batch : 0, kNoKey);
  for (int64_t b = 0; b < batch; ++b) {
    const RankingSample& s = split.samples[samples[b]];
    const int64_t o = out.offsets[b], n = s.end - s.begin;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = s.begin + i;
      out.item_ids[o + i] = item_index(ds, e);
      if (raw) out.item_keys[o + i] = ds.item_keys[e];
      out.actions[o + i] = ds.actions[e];
      if (!ds.labels.empty()) out.labels[o + i] = ds.labels[e];
      out.timestamps[o + i] = ds.timestamps[e];
      out.query_timestamps[o + i] = ds.timestamps[i + 1 < n ? e + 1 : e];
    }
    out.num_candidates[b] = static_cast<int32_t>(s.num_candidates());
    out.user_ids[b] = s.user;
    for (int64_t c = 0; c < num_ctx; ++c) {
      out.contextual[b * num_ctx + c] = ds.contextual_values[s.user * num_ctx + c];
    }
  }
}

void ranking_labels(const SequenceBatch& batch, std::vector<int32_t>& labels) {
  labels.clear();
  HSTU_CHECK(
      static_cast<int32_t>(batch.actions.size()) == batch.num_tokens() &&
          (batch.labels.empty() || static_cast<int32_t>(batch.labels.size()) == batch.num_tokens()),
      "ranking labels need the batch's actions (or labels) for every event");
  for (int32_t b = 0; b < batch.batch_size; ++b) {
    const int32_t end = batch.offsets[b + 1], nc = batch.num_candidates[b];
    HSTU_CHECK(nc >= 0 && nc <= end - batch.offsets[b], "sample ", b, " has ", nc,
               " candidates in ", end - batch.offsets[b], " events");
    const std::vector<int32_t>& src = batch.labels.empty() ? batch.actions : batch.labels;
    labels.insert(labels.end(), src.begin() + (end - nc), src.begin() + end);
  }
}

Batcher ranking_batcher(const SequenceDataset& ds, const RankingSplit& split, int64_t batch_size,
                        bool shuffle, uint64_t seed) {
  return Batcher(static_cast<int64_t>(split.samples.size()), batch_size, shuffle, seed,
                 [&ds, &split](std::span<const int64_t> samples, SequenceBatch& out) {
                   make_ranking_batch(ds, split, samples, out);
                 });
}

}  // namespace hstu
