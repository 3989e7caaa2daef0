// splits.h — leave-one-out train / validation / test samples over a SequenceDataset, as in
// Meta's research trainer (reference §1.4).
//
// A sample is a window of one user's events, never a copy: (user, [begin, end) history events,
// target event), all global event indices into the dataset. Every split has one sample per user.
//
// For a user with events e_0 .. e_{n-1} and H = max_history_seqlen:
//   paper:      train  target e_{n-2}, history = the newest <= H events before it  (needs n >= 3)
//               test   target e_{n-1}, history = the newest <= H events before it  (needs n >= 2)
//   validation: train  target e_{n-3}                                              (needs n >= 4)
//               validation target e_{n-2}                                          (needs n >= 3)
//               test   target e_{n-1}                                              (needs n >= 2)
// A training sample supervises every history position with the next event and its last
// position with the target. Users too short for a split are skipped there and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hstu {

struct Sample {
  int32_t user;    // dense user index
  int64_t begin;   // first history event (global index)
  int64_t end;     // one past the last history event; the history is non-empty
  int64_t target;  // the held-out event (global index), == end for every split here
};

struct Split {
  std::vector<Sample> samples;  // in user order
  int64_t skipped_users = 0;    // users with too few events for this split
};

struct DataSplits {
  Split train;
  Split validation;  // empty in "paper" mode
  Split test;
};

// mode: "paper" or "validation"; max_history_seqlen >= 1.
DataSplits make_splits(const SequenceDataset& ds, const std::string& mode,
                       int64_t max_history_seqlen);

}  // namespace hstu
