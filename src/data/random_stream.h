// random_stream.h — a sequential random stream over Philox-4x32 and the transforms the data
// layer needs (uniform reals and integers, normal, exponential, Zipf, Fisher–Yates).
//
// Every transform is written out here instead of using std:: distributions, whose outputs are
// implementation-defined: the same (seed, stream) gives the same data with any standard library.
// Only libm's log/exp/pow/cos remain (normal, exponential, Zipf), so bit-identical synthetic data
// across machines also assumes the same libm (glibc on Linux).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <utility>

#include "core/philox.h"

namespace hstu {

class PhiloxStream {
 public:
  // Words are those of philox4x32(seed, counter, stream) for counter = first_counter, +1, ...
  PhiloxStream(uint64_t seed, uint32_t stream, uint64_t first_counter = 0)
      : seed_(seed), stream_(stream), counter_(first_counter) {}

  uint32_t next_u32() {
    if (used_ == 4) {
      const Philox4 r = philox4x32(seed_, counter_++, stream_);
      words_[0] = r.x;
      words_[1] = r.y;
      words_[2] = r.z;
      words_[3] = r.w;
      used_ = 0;
    }
    return words_[used_++];
  }

  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), exactly unbiased (Lemire's multiply-shift with rejection); n > 0.
  uint32_t below(uint32_t n) {
    uint64_t m = static_cast<uint64_t>(next_u32()) * n;
    if (static_cast<uint32_t>(m) < n) {
      const uint32_t threshold = (0u - n) % n;
      while (static_cast<uint32_t>(m) < threshold) m = static_cast<uint64_t>(next_u32()) * n;
    }
    return static_cast<uint32_t>(m >> 32);
  }

  bool bernoulli(double p) { return uniform() < p; }

  // Standard normal by Box–Muller (one value per call; two uniforms each).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  // Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log(1.0 - uniform()); }

  // Zipf on k >= 1 with P(k) ~ k^-alpha, alpha > 1 (Devroye's rejection method, the algorithm
  // numpy.random.zipf uses); values beyond 2^62 are redrawn.
  int64_t zipf(double alpha) {
    const double am1 = alpha - 1.0;
    const double b = std::pow(2.0, am1);
    for (;;) {
      const double u = 1.0 - uniform();  // (0, 1]
      const double v = uniform();
      const double x = std::floor(std::pow(u, -1.0 / am1));
      if (!(x >= 1.0) || x > 4.6e18) continue;
      const double t = std::pow(1.0 + 1.0 / x, am1);
      if (v * x * (t - 1.0) / (b - 1.0) <= t / b) return static_cast<int64_t>(x);
    }
  }

  // Fisher–Yates shuffle, from the last element down (n < 2^32).
  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i > 1; --i) {
      const size_t j = below(static_cast<uint32_t>(i));
      std::swap(values[i - 1], values[j]);
    }
  }

 private:
  uint64_t seed_;
  uint32_t stream_;
  uint64_t counter_;
  uint32_t words_[4] = {0, 0, 0, 0};
  int used_ = 4;
};

// Stream ids (Philox's third counter word) that keep the data layer's draws apart from each
// other and from dropout (stream 0).
inline constexpr uint32_t kShuffleStream = 0x53485546u;    // "SHUF": batcher permutations
inline constexpr uint32_t kSyntheticStream = 0x53594e54u;  // "SYNT": synthetic generator

}  // namespace hstu
