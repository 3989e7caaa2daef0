// batcher.cpp — seeded epoch orders and the jagged concatenation of samples into a batch.
//
// Batches are written into the caller's SequenceBatch with resize(), so a training loop that
// reuses one batch object stops allocating once the largest batch has been seen.
#include "data/batcher.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "data/random_stream.h"

namespace hstu {

Batcher::Batcher(int64_t num_samples, int64_t batch_size, bool shuffle, uint64_t seed,
                 MakeBatch make)
    : num_samples_(num_samples),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      make_(std::move(make)) {
  HSTU_CHECK(batch_size >= 1, "batch size ", batch_size, " (need >= 1)");
  HSTU_CHECK(num_samples < (int64_t{1} << 32), "at most 2^32 samples can be shuffled");
}

Batcher::Batcher(const SequenceDataset& ds, const Split& split, int64_t batch_size, bool shuffle,
                 uint64_t seed)
    : Batcher(static_cast<int64_t>(split.samples.size()), batch_size, shuffle, seed,
              [&ds, &split](std::span<const int64_t> samples, SequenceBatch& out) {
                make_batch(ds, split, samples, out);
              }) {}

int64_t Batcher::num_batches() const {
  return (num_samples() + batch_size_ - 1) / batch_size_;
}

void Batcher::set_position(int64_t epoch, int64_t batch_index) {
  HSTU_CHECK(epoch >= 0 && batch_index >= 0 && batch_index <= num_batches(),
             "batcher position (epoch ", epoch, ", batch ", batch_index, ") outside an epoch of ",
             num_batches(), " batches");
  epoch_ = epoch;
  batch_index_ = batch_index;
  if (batch_index_ == num_batches()) {  // the end of an epoch is the start of the next
    ++epoch_;
    batch_index_ = 0;
  }
}

std::span<const int64_t> Batcher::order(int64_t epoch) {
  if (order_epoch_ != epoch) {
    order_.resize(num_samples());
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (shuffle_) {
      PhiloxStream rng(seed_, kShuffleStream, static_cast<uint64_t>(epoch) << 32);
      rng.shuffle(std::span<int64_t>(order_));
    }
    order_epoch_ = epoch;
  }
  return order_;
}

void Batcher::get(int64_t epoch, int64_t batch_index, SequenceBatch& out) {
  HSTU_CHECK(batch_index >= 0 && batch_index < num_batches(), "batch ", batch_index, " of ",
             num_batches());
  const std::span<const int64_t> ord = order(epoch);
  const int64_t begin = batch_index * batch_size_;
  const int64_t end = std::min(begin + batch_size_, num_samples());
  make_(ord.subspan(begin, end - begin), out);
}

void Batcher::next(SequenceBatch& out) {
  HSTU_CHECK(num_batches() > 0, "the split has no samples");
  get(epoch_, batch_index_, out);
  set_position(epoch_, batch_index_ + 1);
}

void make_batch(const SequenceDataset& ds, const Split& split, std::span<const int64_t> samples,
                SequenceBatch& out) {
  const int64_t batch = static_cast<int64_t>(samples.size());
  const int64_t num_ctx = static_cast<int64_t>(ds.contextual_cardinalities.size());
  const bool has_actions = !ds.actions.empty();

  out.batch_size = static_cast<int32_t>(batch);
  out.offsets.resize(batch + 1);
  out.offsets[0] = 0;
  out.max_seqlen = 0;
  int64_t tokens = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const Sample& s = split.samples.at(samples[b]);
    const int64_t n = s.end - s.begin;
    tokens += n;
    HSTU_CHECK(tokens <= INT32_MAX, "a batch of more than 2^31 tokens");
    out.offsets[b + 1] = static_cast<int32_t>(tokens);
    out.max_seqlen = std::max(out.max_seqlen, static_cast<int32_t>(n));
  }
  out.item_ids.resize(tokens);
  out.actions.resize(has_actions ? tokens : 0);
  out.timestamps.resize(tokens);
  out.target_ids.resize(tokens);
  out.query_timestamps.resize(tokens);
  out.eval_targets.resize(batch);
  out.user_ids.resize(batch);
  out.num_candidates.assign(batch, 0);
  out.contextual.resize(batch * num_ctx);
  const bool raw = ds.raw_ids();
  out.item_keys.resize(raw ? tokens : 0);
  out.target_keys.resize(raw ? tokens : 0);
  out.eval_target_keys.resize(raw ? batch : 0);

  for (int64_t b = 0; b < batch; ++b) {
    const Sample& s = split.samples[samples[b]];
    const int64_t o = out.offsets[b], n = s.end - s.begin;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = s.begin + i;
      const int64_t next = i + 1 < n ? e + 1 : s.target;  // the event position i predicts
      out.timestamps[o + i] = ds.timestamps[e];
      if (has_actions) out.actions[o + i] = ds.actions[e];
      out.query_timestamps[o + i] = ds.timestamps[next];
      if (raw) {  // keys, and their catalogue indices as the dense ids (batch.h)
        out.item_keys[o + i] = ds.item_keys[e];
        out.target_keys[o + i] = ds.item_keys[next];
        out.item_ids[o + i] = item_index(ds, e);
        out.target_ids[o + i] = item_index(ds, next);
      } else {
        out.item_ids[o + i] = ds.items[e];
        out.target_ids[o + i] = ds.items[next];
      }
    }
    out.eval_targets[b] = item_index(ds, s.target);
    if (raw) out.eval_target_keys[b] = ds.item_keys[s.target];
    out.user_ids[b] = s.user;
    for (int64_t c = 0; c < num_ctx; ++c) {
      out.contextual[b * num_ctx + c] = ds.contextual_values[s.user * num_ctx + c];
    }
  }
}

}  // namespace hstu
