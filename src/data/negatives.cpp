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

void check_sizes(int64_t num_tokens, int64_t num_negatives, uint64_t step, size_t out_size) {
  HSTU_CHECK(num_negatives >= 1, "num_negatives = ", num_negatives, " (need >= 1)");
  HSTU_CHECK(static_cast<int64_t>(out_size) == num_tokens * num_negatives, "negatives buffer of ",
             out_size, " for ", num_tokens, " tokens x ", num_negatives);
  HSTU_CHECK(num_tokens * num_negatives < (int64_t{1} << 34) && step < (uint64_t{1} << 32),
             "negative sampling counter space exceeded (T*R < 2^34, step < 2^32)");
}

// Calls emit(e, word(e)) for every element e in [0, n), word(e) as in negative_word
// (negatives_rng.h): word e & 3 of philox4x32(seed, (step << 32) + (e >> 2), kNegativeStream).
template <typename Emit>
void for_negative_words(uint64_t seed, uint64_t step, int64_t n, Emit&& emit) {
  constexpr int64_t kBatch = 16;  // Philox counters per batch: 4 * kBatch elements
  const int64_t batches = (n + 4 * kBatch - 1) / (4 * kBatch);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batches; ++b) {
    const uint64_t counter = (step << 32) + static_cast<uint64_t>(b * kBatch);
    uint32_t w[4 * kBatch];
    for (int64_t l = 0; l < kBatch; ++l) {
      const Philox4 r = philox4x32(seed, counter + static_cast<uint64_t>(l), kNegativeStream);
      w[4 * l] = r.x;
      w[4 * l + 1] = r.y;
      w[4 * l + 2] = r.z;
      w[4 * l + 3] = r.w;
    }
    const int64_t e0 = 4 * kBatch * b, e1 = std::min(n, e0 + 4 * kBatch);
    for (int64_t e = e0; e < e1; ++e) emit(e, w[e - e0]);
  }
}

}  // namespace

void sample_uniform_negatives(int64_t num_items, int64_t num_tokens, int64_t num_negatives,
                              uint64_t seed, uint64_t step, std::span<int32_t> out) {
  check_sizes(num_tokens, num_negatives, step, out.size());
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t{1} << 32), "num_items = ", num_items);
  const uint32_t range = static_cast<uint32_t>(num_items - 1);
  for_negative_words(seed, step, num_tokens * num_negatives, [&](int64_t e, uint32_t word) {
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
                               std::span<int32_t> out) {
  check_sizes(num_tokens, num_negatives, step, out.size());
  HSTU_CHECK(!pool.empty() || num_tokens == 0, "in-batch negatives need a non-empty pool");
  const uint32_t size = static_cast<uint32_t>(pool.size());
  for_negative_words(seed, step, num_tokens * num_negatives,
                     [&](int64_t e, uint32_t word) { out[e] = pool[u32_to_range(word, size)]; });
}

std::vector<int32_t> sample_negatives(const std::string& sampler, const SequenceBatch& batch,
                                      int64_t num_items, int64_t num_negatives, uint64_t seed,
                                      uint64_t step) {
  const int64_t tokens = batch.num_tokens();
  std::vector<int32_t> out(tokens * num_negatives);
  if (sampler == "uniform") {
    sample_uniform_negatives(num_items, tokens, num_negatives, seed, step, out);
  } else if (sampler == "in_batch") {
    sample_in_batch_negatives(in_batch_pool(batch.target_ids), tokens, num_negatives, seed, step,
                              out);
  } else {
    HSTU_THROW("RetrievalArgs.negative_sampler = \"", sampler,
               "\" is not one of uniform, in_batch");
  }
  return out;
}

}  // namespace hstu
