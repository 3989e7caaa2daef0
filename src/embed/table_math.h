// table_math.h — the per-key formulas the CPU reference and the CUDA kernels of the dynamic
// embedding table share (HSTU_HD): the sentinel key, the bucket of a key, a key's initial value,
// the eviction order of two slots, and the bf16 storage of embedding values (round to nearest
// even, the row layout of a bf16 table).
//
// A key's initial row is a pure function of (table seed, key, column): element c of key k draws
// Box-Muller pairs from Philox(derive_seed(table_seed, k), counter j, subsequence c) until one is
// inside +-2 (truncated normal, as model/params.h Init::trunc_normal), so it depends neither on
// insertion order nor on the rank or backend that inserts the key.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/hash.h"
#include "core/host_device.h"
#include "core/philox.h"

namespace hstu::embed {

// The one key value a table reserves internally for empty slots; callers get an error for it.
inline constexpr int64_t kEmptyKey = INT64_MIN;

// The murmur3 fmix64 finaliser (core/hash.h) of the key's bits.
HSTU_HD uint64_t key_hash(int64_t key) {
  return murmur3_fmix64(static_cast<uint64_t>(key));
}

// Bucket of `key` among num_buckets (a power of two). Doubling the bucket count splits bucket b
// into b and b + num_buckets, so a rehash never overflows a bucket. The key is salted before the
// hash so that the bucket bits are independent of the `hash` owner function of sharded tables
// (dist::key_owner = fmix64(key) mod W): unsalted, every key a rank owns under W = 2^j ranks
// would share the hash's low j bits and fill only 1 / W of that rank's buckets.
HSTU_HD int64_t bucket_of(int64_t key, int64_t num_buckets) {
  const int64_t salted = static_cast<int64_t>(static_cast<uint64_t>(key) ^ 0x9e3779b97f4a7c15ull);
  return static_cast<int64_t>(key_hash(salted) & static_cast<uint64_t>(num_buckets - 1));
}

// Element c of the initial embedding of `key`: std * z, z ~ N(0, 1) truncated at +-2.
HSTU_HD float key_init_value(uint64_t table_seed, int64_t key, int64_t c, float std) {
  const uint64_t ks = derive_seed(table_seed, static_cast<uint64_t>(key));
  for (uint64_t j = 0; j < 64; ++j) {
    const Philox4 r = philox4x32(ks, j, static_cast<uint32_t>(c));
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
    for (int p = 0; p < 4; p += 2) {
      const double u1 = (static_cast<double>(w[p]) + 0.5) / 4294967296.0;
      const double u2 = (static_cast<double>(w[p + 1]) + 0.5) / 4294967296.0;
      const double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
      if (z >= -2.0 && z <= 2.0) return static_cast<float>(static_cast<double>(std) * z);
    }
  }
  return 0.0f;  // 128 rejections in a row: probability 2^-570
}

// True when slot a (score sa, key ka) is evicted before slot b: lower score first, then the
// smaller key, so the victim does not depend on where keys sit in the bucket.
HSTU_HD bool evicts_before(uint64_t sa, int64_t ka, uint64_t sb, int64_t kb) {
  return sa < sb || (sa == sb && ka < kb);
}

// ---- bf16 values -------------------------------------------------------------------------------
// A bf16 table's row (value_dtype "bf16") holds its dim embedding values as bf16 (the upper 16
// bits of the fp32 value, element c at byte 2c of the row) in embedding_words(dim, true) 4-byte
// words (dim rounded up to 8 values, so the fp32 optimiser state after it stays 16-byte
// aligned; the padding is zero), then the fp32 state. An f32 row is dim floats, then the state.
// Readers widen bf16 to fp32 exactly; writers round the fp32 result to nearest even.

// The bf16 bits of f rounded to nearest, ties to even; NaN stays a (quiet) NaN, overflow past
// the largest bf16 gives infinity (IEEE rounding).
HSTU_HD uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The fp32 value of bf16 bits (exact).
HSTU_HD float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// f rounded to the nearest bf16 (ties to even), as an fp32 value.
HSTU_HD float round_bf16(float f) {
  return bf16_to_float(bf16_bits(f));
}

// 4-byte words of a row's embedding part: dim (f32) or dim rounded up to 8 bf16 values.
HSTU_HD int64_t embedding_words(int64_t dim, bool bf16) {
  return bf16 ? (dim + 7) / 8 * 4 : dim;
}

// Embedding element c of a row (row: its first word).
HSTU_HD float row_value(const float* row, int64_t c, bool bf16) {
  return bf16 ? bf16_to_float(reinterpret_cast<const uint16_t*>(row)[c]) : row[c];
}

// Stores v as embedding element c of a row (bf16: rounded to nearest even).
HSTU_HD void set_row_value(float* row, int64_t c, float v, bool bf16) {
  if (bf16)
    reinterpret_cast<uint16_t*>(row)[c] = bf16_bits(v);
  else
    row[c] = v;
}

}  // namespace hstu::embed
