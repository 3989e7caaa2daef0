// batch.h — one jagged batch as the model consumes it (host memory; the trainer copies it to the
// device). No padding: all tokens of all samples are concatenated, with int32 offsets[B+1].
//
// Retrieval: each sample is a history of n items; position i is supervised with the next item
// (target_ids[i]); the last position's label is the sample's held-out target. Ranking: the last
// num_candidates[b] items of a sample are candidates whose actions are the labels.
//
// Raw-id datasets (DatasetArgs.raw_ids, SequenceDataset::raw_ids()): the int64 key arrays below
// carry the raw item keys (>= 0) where the dense arrays carry ids, and kNoKey (-1, key_hash.h)
// where a dense array holds 0 ("none": ranking's targets, a sample without an eval target). A
// raw key is never -1, so "none" cannot be confused with an item. item_ids, target_ids and
// eval_targets then hold each key's catalogue index (data/dataset.h item_index: 1 + its position
// among the sorted catalogue keys; for numeric ids exactly the dense id), so negatives,
// evaluation and baselines work in catalogue space while a dynamic item table is keyed by the
// raw keys (train/dynamic_item_table.h). Ranking candidates are the last num_candidates[b]
// entries of each sample's item_keys. Dense datasets leave the keys empty.
#pragma once

#include <cstdint>
#include <vector>

namespace hstu {

struct SequenceBatch {
  int32_t batch_size = 0;  // B, samples in this batch (may be < configured for the last batch)
  int32_t max_seqlen = 0;  // longest sample in tokens (items only, before interleaving)
  std::vector<int32_t> offsets;     // [B+1] token offsets, offsets[0] = 0
  std::vector<int32_t> item_ids;    // [T] dense item ids of the history (and candidates)
  std::vector<int32_t> actions;     // [T] action values (empty if the dataset has none)
  std::vector<int64_t> timestamps;  // [T] event time (seconds)
  // Retrieval supervision (training): the next item for every history position; 0 = none.
  std::vector<int32_t> target_ids;  // [T]
  // Timestamp of the item each position predicts (ts[i+1]; the target's time for the last one).
  std::vector<int64_t> query_timestamps;  // [T]
  // Evaluation: the held-out item of each sample (retrieval), 0 if none.
  std::vector<int32_t> eval_targets;  // [B]
  std::vector<int32_t> user_ids;      // [B] dense user index of each sample
  // Ranking.
  std::vector<int32_t> num_candidates;  // [B] candidates at the end of each sample (0 = none)
  std::vector<int32_t> contextual;      // [B*C] contextual feature values per sample
  // [T] the events' labels when the dataset draws them apart from the actions (benchmark data);
  // empty: the candidates' actions are their labels.
  std::vector<int32_t> labels;

  // Raw-id mode only (else empty).
  std::vector<int64_t> item_keys;         // [T] keys of item_ids' events
  std::vector<int64_t> target_keys;       // [T] keys of target_ids (kNoKey = none)
  std::vector<int64_t> eval_target_keys;  // [B] keys of eval_targets (kNoKey = none)

  int32_t num_tokens() const { return offsets.empty() ? 0 : offsets.back(); }
};

}  // namespace hstu
