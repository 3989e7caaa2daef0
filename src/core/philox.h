// philox.h — Philox-4x32-10 counter-based RNG, identical on the CPU and in CUDA kernels.
//
// Every random number in hstu (dropout masks, negative samples, synthetic data) is a pure
// function of (seed, counter), so a CUDA kernel and its CPU reference draw the same numbers, a
// backward pass can regenerate a forward dropout mask instead of storing it, and a resumed run
// continues the exact stream.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace hstu {

struct Philox4 {
  uint32_t x, y, z, w;
};

// Four 32-bit random words for (seed, counter hi/lo); 10 rounds (Salmon et al., SC'11).
HSTU_HD Philox4 philox4x32(uint64_t seed, uint64_t counter, uint32_t subsequence = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = subsequence, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

// An independent seed for a sub-stream `site` of `seed` (SplitMix64 finaliser): dropout of
// layer l at step s uses derive_seed(derive_seed(seed, s), l), and so on.
HSTU_HD uint64_t derive_seed(uint64_t seed, uint64_t site) {
  uint64_t h = seed + 0x9E3779B97F4A7C15ull * (site + 1);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

// Uniform float in [0, 1) from one 32-bit word (24 mantissa bits; never returns 1).
HSTU_HD float u32_to_unit_float(uint32_t r) {
  return static_cast<float>(r >> 8) * (1.0f / 16777216.0f);
}

// Uniform integer in [0, n) from one 32-bit word (Lemire's multiply-shift; bias < n / 2^32).
HSTU_HD uint32_t u32_to_range(uint32_t r, uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(r) * n) >> 32);
}

// The element-wise uniform stream used by dropout: element i of stream (seed, offset) is word
// (i % 4) of philox4x32(seed, offset + i / 4).
HSTU_HD float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  const Philox4 r = philox4x32(seed, offset + (i >> 2));
  const uint32_t words[4] = {r.x, r.y, r.z, r.w};
  return u32_to_unit_float(words[i & 3]);
}

// Dropout keep decision for element i: kept iff its uniform >= p (so p = 0 keeps everything).
HSTU_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return philox_uniform(seed, offset, i) >= p;
}

}  // namespace hstu
