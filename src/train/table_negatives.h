// table_negatives.h — retrieval negatives drawn from the items a dynamic item table holds (issue
// 18, raw-id data): instead of the whole catalogue, uniform negatives come from the catalogue ids
// whose keys are present in the table at the start of the step (DynamicItemTable::negative_pool),
// with the per-element Philox formula of data/negatives_rng.h, so the CUDA kernel
// (ops/negatives_gpu.h sample_pool_negatives) draws the same ids bit for bit:
//
//   out[t * R + r] = pool[key_negative_index(seed, step, (o + t) * R + r, |pool|)]
//
// pool ascending (the table's keys ascending: catalogue ids are ordered as their keys), so this is
// sample_key_negatives (data/key_negatives.h) over the table's sorted keys, mapped to ids. A table
// that holds nothing yet (the first step) draws uniform_negative over the catalogue instead.
#pragma once

#include <cstdint>
#include <span>

namespace hstu {

// out: [num_tokens * num_negatives] ids; pool: ascending ids in [1, num_items) (may be empty);
// token_offset as for the other samplers (data/negatives.h).
void sample_pool_negatives(std::span<const int32_t> pool, int64_t num_items, int64_t num_tokens,
                           int64_t num_negatives, uint64_t seed, uint64_t step,
                           std::span<int32_t> out, int64_t token_offset = 0);

}  // namespace hstu
