// key_negatives.h — retrieval negatives in raw-id mode: keys drawn uniformly from a key span (a
// KeyCatalogue's sorted keys, or an in-batch pool of keys), with the per-element Philox formula
// of negatives_rng.h, so a CUDA kernel can reproduce them bit for bit and a resumed run draws
// the same keys.
//
//   out[t * R + r] = keys[key_negative_index(seed, step, (o + t) * R + r, |keys|)]
//
// (o = token_offset, where the batch's tokens start in a data-parallel global batch). Over the
// dataset's full catalogue with numeric raw ids this is exactly the key of the dense uniform
// sampler's id (negatives.h): the same negatives in both modes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hstu {

// out: [num_tokens * num_negatives]. keys must be non-empty and hold fewer than 2^32 keys.
void sample_key_negatives(std::span<const int64_t> keys, int64_t num_tokens, int64_t num_negatives,
                          uint64_t seed, uint64_t step, std::span<int64_t> out,
                          int64_t token_offset = 0);

// The in-batch pool of raw-id mode: the sorted unique supervision keys (kNoKey left out).
std::vector<int64_t> in_batch_key_pool(std::span<const int64_t> target_keys);

}  // namespace hstu
