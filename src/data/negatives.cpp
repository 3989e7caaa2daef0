// negatives.cpp — CPU negative samplers (the reference for the CUDA kernels); the formula is in
// negatives_rng.h.
//
// Loops run one element at a time in element order; each element is independent, so the
// OpenMP split cannot change the result.
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

}  // namespace

void sample_uniform_negatives(int64_t num_items, int64_t num_tokens, int64_t num_negatives,
                              uint64_t seed, uint64_t step, std::span<int32_t> out) {
  check_sizes(num_tokens, num_negatives, step, out.size());
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t{1} << 32), "num_items = ", num_items);
  const int64_t n = num_tokens * num_negatives;
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < n; ++e) {
    out[e] = uniform_negative(seed, step, static_cast<uint64_t>(e), num_items);
  }
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
  const int64_t n = num_tokens * num_negatives;
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < n; ++e) {
    out[e] = pool[in_batch_negative_index(seed, step, static_cast<uint64_t>(e), size)];
  }
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
