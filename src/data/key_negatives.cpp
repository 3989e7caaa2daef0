// key_negatives.cpp — uniform draws from a key span (formula in key_negatives.h).
#include "data/key_negatives.h"

#include <algorithm>

#include "core/error.h"
#include "data/key_hash.h"
#include "data/negatives_rng.h"

namespace hstu {

void sample_key_negatives(std::span<const int64_t> keys, int64_t num_tokens, int64_t num_negatives,
                          uint64_t seed, uint64_t step, std::span<int64_t> out,
                          int64_t token_offset) {
  HSTU_CHECK(!keys.empty(), "key negatives: the key span is empty (no keys to draw from)");
  HSTU_CHECK(keys.size() < (uint64_t{1} << 32), "key negatives: ", keys.size(),
             " keys (at most 2^32 - 1)");
  HSTU_CHECK(num_tokens >= 0 && num_negatives >= 1 && token_offset >= 0,
             "key negatives: num_tokens ", num_tokens, ", num_negatives ", num_negatives,
             ", token_offset ", token_offset);
  HSTU_CHECK(static_cast<int64_t>(out.size()) == num_tokens * num_negatives,
             "key negatives: output of ", out.size(), " for ", num_tokens, " x ", num_negatives);
  HSTU_CHECK((token_offset + num_tokens) * num_negatives < (int64_t{1} << 34) &&
                 step < (uint64_t{1} << 32),
             "negative sampling counter space exceeded (T*R < 2^34, step < 2^32)");
  const uint32_t n = static_cast<uint32_t>(keys.size());
  const uint64_t first = static_cast<uint64_t>(token_offset * num_negatives);
  const int64_t total = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total; ++i)
    out[i] = keys[key_negative_index(seed, step, first + static_cast<uint64_t>(i), n)];
}

std::vector<int64_t> in_batch_key_pool(std::span<const int64_t> target_keys) {
  std::vector<int64_t> pool;
  for (const int64_t k : target_keys)
    if (k != kNoKey) pool.push_back(k);
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  return pool;
}

}  // namespace hstu
