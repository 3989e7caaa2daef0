// test_tie_break.cpp — DatasetArgs.tie_break: "file" keeps file order among a user's events with
// equal timestamps (the stable sort of the spec); "shuffle" orders them by a fixed hash of
// (user, item), so the result no longer depends on file order, while distinct timestamps still
// sort by time.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "data/preprocess.h"
#include "data/readers.h"

namespace hstu {
namespace {

RawData tied(bool reversed) {
  RawData raw;
  raw.name = "ties";
  // One user: item 9 at t=1, then items 1..8 all at t=5, then item 10 at t=7.
  std::vector<RawEvent> ev;
  ev.push_back({1, 9, 1, 0, 1});
  for (int64_t i = 1; i <= 8; ++i) ev.push_back({1, i, 5, 0, static_cast<int32_t>(i + 1)});
  ev.push_back({1, 10, 7, 0, 10});
  if (reversed) std::reverse(ev.begin(), ev.end());
  raw.events = ev;
  return raw;
}

std::vector<int32_t> items_of(const SequenceDataset& ds) {
  return std::vector<int32_t>(ds.items.begin(), ds.items.end());
}

TEST(TieBreak, FileKeepsFileOrderShuffleIsFileOrderIndependent) {
  const auto file_fwd = items_of(build_dataset(tied(false), nullptr, "file"));
  const auto file_rev = items_of(build_dataset(tied(true), nullptr, "file"));
  // Dense ids equal raw ids here (items 1..10 in raw-id order).
  EXPECT_EQ(file_fwd, (std::vector<int32_t>{9, 1, 2, 3, 4, 5, 6, 7, 8, 10}));
  EXPECT_EQ(file_rev, (std::vector<int32_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 10}));

  const auto sh_fwd = items_of(build_dataset(tied(false), nullptr, "shuffle"));
  const auto sh_rev = items_of(build_dataset(tied(true), nullptr, "shuffle"));
  EXPECT_EQ(sh_fwd, sh_rev);     // independent of file order
  EXPECT_EQ(sh_fwd.front(), 9);  // time still orders distinct timestamps
  EXPECT_EQ(sh_fwd.back(), 10);
  EXPECT_NE(sh_fwd, file_fwd);  // and the ties really are reordered
  EXPECT_THROW(build_dataset(tied(false), nullptr, "random"), Error);
}

}  // namespace
}  // namespace hstu
