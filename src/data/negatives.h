// negatives.h — the negative samplers of the sampled-softmax retrieval loss: uniform over the
// catalogue (Meta) and in-batch deduplicated (NVIDIA).
//
// Both are pure functions of (seed, step, token index) through negatives_rng.h, so the CPU
// reference, the CUDA kernel and a resumed run all draw identical negatives. Every token of the
// batch gets a row (rows of unsupervised tokens are simply unused), which keeps the formula a
// function of the token index alone.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/batch.h"

namespace hstu {

// R, the negatives per query of a step: RetrievalArgs.num_negatives when positive; -1
// (recsys-examples' default) means one draw per query of the batch, R = `queries` (the batch's
// supervised tokens; of the global batch in a data-parallel step), at least 1. With the in-batch
// sampler every query then draws #queries negatives uniformly with replacement from the batch's
// deduplicated supervision ids; a draw equal to the query's own positive is masked by the loss.
int64_t negatives_per_query(int64_t num_negatives, int64_t queries);

// out[t * R + r] ([num_tokens * R]) = uniform_negative(seed, step, (o + t) * R + r, num_items),
// o = token_offset: where the batch's tokens start in the global batch of a data-parallel step
// (0 otherwise), so W ranks draw what one rank with the whole batch draws.
void sample_uniform_negatives(int64_t num_items, int64_t num_tokens, int64_t num_negatives,
                              uint64_t seed, uint64_t step, std::span<int32_t> out,
                              int64_t token_offset = 0);

// The in-batch pool: the sorted unique non-zero supervision ids of a batch.
std::vector<int32_t> in_batch_pool(std::span<const int32_t> target_ids);

// out[t * R + r] ([num_tokens * R]) =
//   pool[in_batch_negative_index(seed, step, (o + t) * R + r, |pool|)], o = token_offset.
void sample_in_batch_negatives(std::span<const int32_t> pool, int64_t num_tokens,
                               int64_t num_negatives, uint64_t seed, uint64_t step,
                               std::span<int32_t> out, int64_t token_offset = 0);

// The negatives of a batch: sampler "uniform" or "in_batch" (RetrievalArgs.negative_sampler);
// returns neg_ids [T * R] int32, row-major by token. A data-parallel rank passes where its
// tokens start in the global batch and the global batch's targets (the in-batch pool).
std::vector<int32_t> sample_negatives(const std::string& sampler, const SequenceBatch& batch,
                                      int64_t num_items, int64_t num_negatives, uint64_t seed,
                                      uint64_t step, int64_t token_offset = 0,
                                      std::span<const int32_t> pool_targets = {});

}  // namespace hstu
