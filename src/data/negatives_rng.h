// negatives_rng.h — the per-element formula of the negative samplers, shared by the CPU
// samplers (negatives.cpp) and CUDA kernels, which must reproduce it bit for bit.
//
// Element e = t * R + r is negative r of token t (t indexes the batch's tokens, R negatives per
// token). Its random word is
//   word(e) = word (e & 3) of philox4x32(seed, counter = (step << 32) + (e >> 2),
//                                        subsequence = kNegativeStream)
// with words numbered x, y, z, w = 0, 1, 2, 3. Then
//   uniform:  neg = 1 + u32_to_range(word(e), num_items - 1)      (ids 1..num_items-1)
//   in-batch: neg = pool[u32_to_range(word(e), pool_size)]        (pool: sorted unique ids)
//   keys:     neg = keys[u32_to_range(word(e), num_keys)]         (raw-id mode: a KeyCatalogue's
//             sorted keys; over the full catalogue this is the key of the uniform id above)
// u32_to_range(w, n) = (w * n) >> 32 (philox.h). Valid for step < 2^32 and T * R < 2^34, so a
// resumed run draws the same negatives at the same step.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace hstu {

inline constexpr uint32_t kNegativeStream = 0x4e454731u;  // "NEG1"

HSTU_HD uint32_t negative_word(uint64_t seed, uint64_t step, uint64_t e) {
  const Philox4 r = philox4x32(seed, (step << 32) + (e >> 2), kNegativeStream);
  switch (e & 3) {
    case 0:
      return r.x;
    case 1:
      return r.y;
    case 2:
      return r.z;
    default:
      return r.w;
  }
}

// Uniform negative over the catalogue ids 1..num_items-1 (num_items includes padding 0).
HSTU_HD int32_t uniform_negative(uint64_t seed, uint64_t step, uint64_t e, int64_t num_items) {
  return 1 + static_cast<int32_t>(
                 u32_to_range(negative_word(seed, step, e), static_cast<uint32_t>(num_items - 1)));
}

// Index into the in-batch pool of size pool_size.
HSTU_HD uint32_t in_batch_negative_index(uint64_t seed, uint64_t step, uint64_t e,
                                         uint32_t pool_size) {
  return u32_to_range(negative_word(seed, step, e), pool_size);
}

// Index into a sorted key span of num_keys keys (raw-id mode; key_negatives.h).
HSTU_HD uint32_t key_negative_index(uint64_t seed, uint64_t step, uint64_t e, uint32_t num_keys) {
  return u32_to_range(negative_word(seed, step, e), num_keys);
}

}  // namespace hstu
