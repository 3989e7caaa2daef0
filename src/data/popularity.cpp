// popularity.cpp — counts and ranks of the popularity baseline (protocol in popularity.h).
//
// Items are sorted once by (count desc, id asc); a target's rank is then its position in that
// order minus the distinct history items ahead of it: O(V log V + history) instead of O(V) per
// sample.
#include "data/popularity.h"

#include <algorithm>
#include <numeric>

#include "core/checked.h"
#include "core/error.h"

namespace hstu {

std::vector<int64_t> popularity_counts(const SequenceDataset& ds, const Split& train) {
  std::vector<int64_t> counts(ds.num_items, 0);
  for (const Sample& s : train.samples) {
    for (int64_t e = ds.user_offsets[s.user]; e <= s.target; ++e) ++counts[item_index(ds, e)];
  }
  return counts;
}

std::vector<int32_t> popularity_ranks(const SequenceDataset& ds, const Split& eval,
                                      std::span<const int64_t> counts, int64_t rank_cap) {
  HSTU_CHECK(static_cast<int64_t>(counts.size()) == ds.num_items, counts.size(), " counts for ",
             ds.num_items, " items");
  HSTU_CHECK(rank_cap >= 1, "rank cap ", rank_cap);
  // position[i] = 0-based place of item i in the order (count desc, id asc) over 1..V-1.
  std::vector<int32_t> by_score(ds.num_items - 1);
  std::iota(by_score.begin(), by_score.end(), 1);
  std::sort(by_score.begin(), by_score.end(), [&](int32_t a, int32_t b) {
    return counts[a] != counts[b] ? counts[a] > counts[b] : a < b;
  });
  std::vector<int64_t> position(ds.num_items, 0);
  for (size_t p = 0; p < by_score.size(); ++p) position[by_score[p]] = static_cast<int64_t>(p);

  // Ranks never exceed the catalogue, so a cap beyond it changes nothing (and cannot overflow).
  const int64_t worst = checked_add(std::min(rank_cap, ds.num_items), 1, "popularity rank cap");
  std::vector<int32_t> ranks(eval.samples.size());
  std::vector<int64_t> ahead;  // distinct history items placed before the target
  for (size_t k = 0; k < eval.samples.size(); ++k) {
    const Sample& s = eval.samples[k];
    const int32_t target = item_index(ds, s.target);
    ahead.clear();
    for (int64_t e = s.begin; e < s.end; ++e) {
      const int32_t item = item_index(ds, e);
      if (item != target && position[item] < position[target]) ahead.push_back(item);
    }
    std::sort(ahead.begin(), ahead.end());
    const int64_t filtered = std::unique(ahead.begin(), ahead.end()) - ahead.begin();
    const int64_t rank = 1 + position[target] - filtered;
    ranks[k] = checked_i32(std::min(rank, worst), "popularity rank");
  }
  return ranks;
}

}  // namespace hstu
