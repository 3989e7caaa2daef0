// splits.cpp — leave-one-out samples (rules in splits.h).
//
// Each split is "hold out the k-th newest event": one helper builds any of them.
#include "data/splits.h"

#include <algorithm>

#include "core/error.h"

namespace hstu {

namespace {

// One sample per user whose target is its `from_end`-th newest event (1 = the last).
Split leave_out(const SequenceDataset& ds, int64_t from_end, int64_t max_history) {
  Split split;
  for (int64_t u = 0; u < ds.num_users(); ++u) {
    const int64_t first = ds.user_offsets[u], n = ds.seq_len(u);
    if (n < from_end + 1) {  // the history needs at least one event before the target
      ++split.skipped_users;
      continue;
    }
    const int64_t target = first + n - from_end;
    split.samples.push_back(
        {static_cast<int32_t>(u), std::max(first, target - max_history), target, target});
  }
  return split;
}

}  // namespace

DataSplits make_splits(const SequenceDataset& ds, const std::string& mode,
                       int64_t max_history_seqlen) {
  HSTU_CHECK(max_history_seqlen >= 1, "DatasetArgs.max_history_seqlen = ", max_history_seqlen,
             " (need >= 1)");
  DataSplits s;
  if (mode == "paper") {
    s.train = leave_out(ds, 2, max_history_seqlen);
    s.test = leave_out(ds, 1, max_history_seqlen);
  } else if (mode == "validation") {
    s.train = leave_out(ds, 3, max_history_seqlen);
    s.validation = leave_out(ds, 2, max_history_seqlen);
    s.test = leave_out(ds, 1, max_history_seqlen);
  } else {
    HSTU_THROW("DatasetArgs.split = \"", mode, "\" is not one of paper, validation");
  }
  return s;
}

}  // namespace hstu
