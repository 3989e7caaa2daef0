// negatives.cpp — CPU negative samplers (the reference for the CUDA kernels); the formula is in
// negatives_rng.h.
//
// Each Philox call yields the words of four consecutive elements; the calls run in batches of
// independent counters (which the compiler vectorises), split over OpenMP threads. Each element
// is independent, so the split cannot change the result.
#include "data/negatives.h"

#include <algorithm>

#include "core/error.h"
#include "data/negatives_rng.h"

namespace hstu {

namespace {

// end_token: where the batch's tokens end in the global batch; tokens: the batch's own.
void check_sizes(int64_t end_token, int64_t num_negatives, uint64_t step, size_t out_size,
                 int64_t tokens) {
  HSTU_CHECK(num_negatives >= 1, "num_negatives = ", num_negatives, " (need >= 1)");
  HSTU_CHECK(static_cast<int64_t>(out_size) == tokens * num_negatives, "negatives buffer of ",
             out_size, " for ", tokens, " tokens x ", num_negatives);
  HSTU_CHECK(end_token * num_negatives < (int64_t{1} << 34) && step < (uint64_t{1} << 32),
             "negative sampling counter space exceeded (T*R < 2^34, step < 2^32)");
}

// Calls emit(e, word(e0 + e)) for every element e in [0, n), word(E) as in negative_word
// (negatives_rng.h): word E & 3 of philox4x32(seed, (step << 32) + (E >> 2), kNegativeStream).
// e0 is where the batch's elements start in the global batch of a data-parallel step.
template <typename Emit>
void for_negative_words(uint64_t seed, uint64_t step, int64_t e0, int64_t n, Emit&& emit) {
  constexpr int64_t kBatch = 16;  // Philox counters per batch: 4 * kBatch elements
  constexpr int64_t kSpan = 4 * kBatch;
  const int64_t first = e0 / kSpan, last = (e0 + n + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static)
  for (int64_t b = first; b < last; ++b) {
    const uint64_t counter = (step << 32) + static_cast<uint64_t>(b * kBatch);
    uint32_t w[kSpan];
    for (int64_t l = 0; l < kBatch; ++l) {
      const Philox4 r = philox4x32(seed, counter + static_cast<uint64_t>(l), kNegativeStream);
      w[4 * l] = r.x;
      w[4 * l + 1] = r.y;
      w[4 * l + 2] = r.z;
      w[4 * l + 3] = r.w;
    }
    const int64_t g0 = std::max(kSpan * b, e0), g1 = std::min(e0 + n, kSpan * (b + 1));
    for (int64_t g = g0; g < g1; ++g) emit(g - e0, w[g - kSpan * b]);
  }
}

}  // namespace

int64_t negatives_per_query(int64_t num_negatives, int64_t queries) {
  HSTU_CHECK(num_negatives == -1 || num_negatives >= 1,
             "RetrievalArgs.num_negatives = ", num_negatives,
             " (need >= 1, or -1 for one per query of the batch)");
  HSTU_CHECK(queries >= 0, "negatives_per_query: ", queries, " queries");
  return num_negatives > 0 ? num_negatives : std::max<int64_t>(queries, 1);
}

void sample_uniform_negatives(int64_t num_items, int64_t num_tokens, int64_t num_negatives,
                              uint64_t seed, uint64_t step, std::span<int32_t> out,
                              int64_t token_offset) {
  check_sizes(token_offset + num_tokens, num_negatives, step, out.size(), num_tokens);
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t{1} << 32), "num_items = ", num_items);
  const uint32_t range = static_cast<uint32_t>(num_items - 1);
  for_negative_words(seed, step, token_offset * num_negatives, num_tokens * num_negatives,
                     [&](int64_t e, uint32_t word) {
                       out[e] = 1 + static_cast<int32_t>(u32_to_range(word, range));
                     });
}

std::vector<int32_t> in_batch_pool(std::span<const int32_t> target_ids) {
  std::vector<int32_t> pool;
  pool.reserve(target_ids.size());
  for (const int32_t id : target_ids) {
    if (id != 0) pool.push_back(id);
  }
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  return pool;
}

void sample_in_batch_negatives(std::span<const int32_t> pool, int64_t num_tokens,
                               int64_t num_negatives, uint64_t seed, uint64_t step,
                               std::span<int32_t> out, int64_t token_offset) {
  check_sizes(token_offset + num_tokens, num_negatives, step, out.size(), num_tokens);
  HSTU_CHECK(!pool.empty() || num_tokens == 0, "in-batch negatives need a non-empty pool");
  const uint32_t size = static_cast<uint32_t>(pool.size());
  for_negative_words(seed, step, token_offset * num_negatives, num_tokens * num_negatives,
                     [&](int64_t e, uint32_t word) { out[e] = pool[u32_to_range(word, size)]; });
}

std::vector<int32_t> sample_negatives(const std::string& sampler, const SequenceBatch& batch,
                                      int64_t num_items, int64_t num_negatives, uint64_t seed,
                                      uint64_t step, int64_t token_offset,
                                      std::span<const int32_t> pool_targets) {
  const int64_t tokens = batch.num_tokens();
  std::vector<int32_t> out(tokens * num_negatives);
  if (sampler == "uniform") {
    sample_uniform_negatives(num_items, tokens, num_negatives, seed, step, out, token_offset);
  } else if (sampler == "in_batch") {
    sample_in_batch_negatives(
        in_batch_pool(pool_targets.empty() ? std::span<const int32_t>(batch.target_ids)
                                           : pool_targets),
        tokens, num_negatives, seed, step, out, token_offset);
  } else {
    HSTU_THROW("RetrievalArgs.negative_sampler = \"", sampler,
               "\" is not one of uniform, in_batch");
  }
  return out;
}

}  // namespace hstu
