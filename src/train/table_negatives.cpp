// table_negatives.cpp — the CPU reference of negatives drawn from a dynamic item table's ids
// (table_negatives.h).
#include "train/table_negatives.h"

#include "core/error.h"
#include "data/negatives_rng.h"

namespace hstu {

void sample_pool_negatives(std::span<const int32_t> pool, int64_t num_items, int64_t num_tokens,
                           int64_t num_negatives, uint64_t seed, uint64_t step,
                           std::span<int32_t> out, int64_t token_offset) {
  const int64_t n = num_tokens * num_negatives;
  HSTU_CHECK(num_tokens >= 0 && num_negatives >= 1 && static_cast<int64_t>(out.size()) == n,
             "sample_pool_negatives: out holds ", out.size(), " ids for ", num_tokens, " tokens x ",
             num_negatives, " negatives");
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t{1} << 32),
             "sample_pool_negatives: ", num_items, " catalogue ids");
  HSTU_CHECK(pool.size() < (size_t{1} << 31), "sample_pool_negatives: a pool of ", pool.size(),
             " ids (at most 2^31 - 1)");
  HSTU_CHECK(n < (int64_t{1} << 34) && step < (uint64_t{1} << 32),
             "sample_pool_negatives: negative sampling counter space exceeded");
  const uint64_t e0 = static_cast<uint64_t>(token_offset * num_negatives);
  const uint32_t size = static_cast<uint32_t>(pool.size());
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t g = e0 + static_cast<uint64_t>(e);
    out[static_cast<size_t>(e)] = size == 0 ? uniform_negative(seed, step, g, num_items)
                                            : pool[key_negative_index(seed, step, g, size)];
  }
}

}  // namespace hstu
