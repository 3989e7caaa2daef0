// ranking.h — generative-ranking samples over a SequenceDataset: which events of a user are the
// candidates (scored; their actions are the labels) and which precede them as history, the
// train / eval rules, the jagged SequenceBatch of a list of samples, and a seeded batcher.
//
// The shaping decision: the default split is time-consistent per user. With C =
// max_num_candidates, H = max_history_seqlen and a user's events e_0 .. e_{n-1}:
//   eval   candidates e_{n-C} .. e_{n-1},   history = the newest <= H events before them
//   train  candidates e_{n-2C} .. e_{n-C-1}, history = the newest <= H events before them
//          and, with args.ranking_train_windows = W > 1 (0: as many as have history), also
//          the windows e_{n-(k+1)C} .. e_{n-kC-1} for k = 2 .. W, each with its own history.
//          Train samples are ordered oldest window rank first (all users' k = W windows, then
//          k = W - 1, ..., then k = 1), users ascending within a rank, so an unshuffled epoch
//          mixes users in every batch and ends with the windows nearest the eval candidates.
// so for every user the model is trained only on events older than the ones it is evaluated
// on, and long sequences keep their newest events. (Across users the split is not a global time
// cut: one user's train window may be newer than another user's eval window.) A split needs at
// least one history event: eval needs n >= C + 1, train n >= 2C + 1; shorter users are skipped
// there and counted.
//
// recsys-examples' rule is the option split = "user_70_30": users with n <= C are dropped, the
// first int(0.7 N) (double arithmetic, as there) of the N others in user order train, the rest
// eval, one sample per user; with truncate = "oldest" (its behaviour) a sequence is first cut
// to its oldest H + C events, with "newest" to its newest. Candidates are the last C events of the
// (cut) sequence, history the events before them. truncate = "oldest" is refused with split =
// "time" (the train and eval windows of a long sequence would coincide).
// C = 0 is recsys-examples' "every item scored" (their labels are then the whole action
// sequence): every kept event of the sample (at most H) is a candidate and none is history
// (candidates == begin); the model scores each under the plain causal mask, so an item's score
// sees the earlier items and actions, never its own action (RankingModel's score-all layout).
// It needs split = "user_70_30" (the time split's windows are C events).
//
// Batch contents for sample b (history h_0 .. h_{m-1}, candidates c_0 .. c_{k-1}):
//   item_ids / actions / timestamps = those of h_0 .. h_{m-1}, c_0 .. c_{k-1}   (n_b = m + k)
//   num_candidates[b] = k; the labels are the candidates' actions (ranking_labels)
//   contextual[b*C' + c] = the user's contextual feature c; user_ids[b] = the user
//   target_ids = 0 (no retrieval supervision), eval_targets[b] = 0,
//   query_timestamps[i] = time of the next event of the sample (the last one: its own time).
// max_seqlen counts events (n_b), before any interleaving with action tokens.
// Raw-id datasets: item_keys holds the events' keys (the candidates' are each sample's last k),
// target_keys / eval_target_keys are kNoKey, item_ids zeros for the step to fill (batch.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/batch.h"
#include "data/batcher.h"
#include "data/dataset.h"

namespace hstu {

struct RankingSample {
  int32_t user;        // dense user index
  int64_t begin;       // first history event (global index)
  int64_t candidates;  // first candidate event, = one past the last history event (> begin;
                       // = begin when every event is scored: max_num_candidates = 0)
  int64_t end;         // one past the last candidate (> candidates)

  int64_t num_history() const { return candidates - begin; }
  int64_t num_candidates() const { return end - candidates; }
};

struct RankingSplit {
  std::vector<RankingSample> samples;  // in user order
  int64_t skipped_users = 0;           // users too short for this split (user_70_30: the
                                       // users dropped before splitting, counted in both)
};

struct RankingSplits {
  RankingSplit train;
  RankingSplit eval;
};

// The ranking samples of `ds` under args.max_history_seqlen (>= 1) and args.max_num_candidates
// (>= 1, or 0 with user_70_30). split: "time" (default) | "user_70_30"; truncate: "newest"
// (default) | "oldest".
RankingSplits make_ranking_splits(const SequenceDataset& ds, const DatasetArgs& args,
                                  const std::string& split = "time",
                                  const std::string& truncate = "newest");

// Fills `out` with the given samples (in this order) of `split`, as documented above. Reuses
// out's buffers.
void make_ranking_batch(const SequenceDataset& ds, const RankingSplit& split,
                        std::span<const int64_t> samples, SequenceBatch& out);

// The labels of a ranking batch: the actions of each sample's candidates, concatenated in
// sample order ([sum num_candidates] i32, the rows of gather_candidate_rows' output).
void ranking_labels(const SequenceBatch& batch, std::vector<int32_t>& labels);

// Batches of ranking samples: the same seeded per-epoch shuffle and resumable position as the
// retrieval batcher (make_ranking_batch per batch). `ds` and `split` must outlive it.
Batcher ranking_batcher(const SequenceDataset& ds, const RankingSplit& split, int64_t batch_size,
                        bool shuffle, uint64_t seed);

}  // namespace hstu
