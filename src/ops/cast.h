// cast.h — dtype conversion between two tensors of the same shape (fp32 master weights -> the
// bf16/fp16 copies the GEMMs read, and back for checkpoints and tests), plus the host scalar
// conversions of the 16-bit formats.
//
// The one decision: every narrowing rounds to nearest, ties to even, and keeps NaN a (quiet)
// NaN and overflow an infinity — the same values as CUDA's __float2bfloat16_rn /
// __float2half_rn, so the CPU and GPU paths produce identical bits (NaN payloads aside).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// dst = src converted to dst's dtype (f32, f64, bf16, f16; CUDA: f32, bf16, f16). Same shape;
// either may be a row-strided view; both on the same device.
void cast(Ctx& ctx, const Tensor& src, const Tensor& dst);

// ---- host scalar conversions (bit patterns of the 16-bit formats) -----------------------------

inline float bf16_bits_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 (and inf)
  if (ax < 0x38800000u) {                      // below 2^-14: a half subnormal m * 2^-24 (or zero)
    const uint32_t shift = 126u - (ax >> 23);  // f / 2^-24 = mantissa >> shift
    if (shift > 24u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits; a carry
  // into the exponent is the correct rounding (up to infinity from [65520, 65536)).
  const uint32_t r = ax - 0x38000000u;
  return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

}  // namespace hstu
