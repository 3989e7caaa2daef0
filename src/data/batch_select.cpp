// batch_select.cpp — copying a subset of a batch's samples into another batch.
#include "data/batch_select.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace hstu {
namespace {

// Appends in[begin, end) to out (a per-token or per-sample field; empty fields stay empty).
template <typename T>
void append(const std::vector<T>& in, int64_t begin, int64_t end, std::vector<T>& out) {
  if (in.empty()) return;
  out.insert(out.end(), in.begin() + begin, in.begin() + end);
}

}  // namespace

void select_samples(const SequenceBatch& in, std::span<const int64_t> samples, SequenceBatch& out) {
  const int64_t b_in = in.batch_size;
  const int64_t num_ctx = b_in > 0 ? static_cast<int64_t>(in.contextual.size()) / b_in : 0;
  out.batch_size = static_cast<int32_t>(samples.size());
  out.max_seqlen = 0;
  out.offsets.assign(1, 0);
  for (auto* v : {&out.item_ids, &out.actions, &out.labels, &out.target_ids, &out.eval_targets,
                  &out.user_ids, &out.num_candidates, &out.contextual})
    v->clear();
  out.timestamps.clear();
  out.query_timestamps.clear();
  for (auto* v : {&out.item_keys, &out.target_keys, &out.eval_target_keys}) v->clear();
  int64_t tokens = 0;
  for (const int64_t s : samples) {
    HSTU_CHECK(s >= 0 && s < b_in, "select_samples: sample ", s, " of a batch of ", b_in);
    const int64_t begin = in.offsets[static_cast<size_t>(s)];
    const int64_t end = in.offsets[static_cast<size_t>(s) + 1];
    tokens += end - begin;
    HSTU_CHECK(tokens <= INT_MAX, "a batch of more than 2^31 tokens");
    out.offsets.push_back(static_cast<int32_t>(tokens));
    out.max_seqlen = std::max(out.max_seqlen, static_cast<int32_t>(end - begin));
    append(in.item_ids, begin, end, out.item_ids);
    append(in.actions, begin, end, out.actions);
    append(in.labels, begin, end, out.labels);
    append(in.timestamps, begin, end, out.timestamps);
    append(in.target_ids, begin, end, out.target_ids);
    append(in.query_timestamps, begin, end, out.query_timestamps);
    append(in.item_keys, begin, end, out.item_keys);
    append(in.target_keys, begin, end, out.target_keys);
    append(in.eval_targets, s, s + 1, out.eval_targets);
    append(in.eval_target_keys, s, s + 1, out.eval_target_keys);
    append(in.user_ids, s, s + 1, out.user_ids);
    append(in.num_candidates, s, s + 1, out.num_candidates);
    append(in.contextual, s * num_ctx, (s + 1) * num_ctx, out.contextual);
  }
}

}  // namespace hstu
