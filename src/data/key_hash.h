// key_hash.h — the 63-bit key of a string id (Amazon's ASINs and user ids) in raw-id mode
// (DatasetArgs.raw_ids), and the key conventions of raw-id data.
//
// key(s) = splitmix64_finalise(fnv1a64(bytes of s)) & (2^63 - 1), where
//   fnv1a64:  h = 0xcbf29ce484222325; for each byte c: h = (h ^ c) * 0x100000001b3 (mod 2^64)
//   splitmix64_finalise(z): z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//                           z = (z ^ (z >> 27)) * 0x94d049bb133111eb; z ^ (z >> 31)
// FNV-1a alone mixes the last bytes poorly into the high bits (ASINs differ in their last
// characters); the splitmix64 finaliser spreads every input bit over the whole word. The top
// bit is cleared so that every key, numeric or hashed, is >= 0 and kNoKey (-1) is never a key.
// Preprocessing refuses a dataset in which two distinct strings share a key (naming both).
#pragma once

#include <cstdint>
#include <string_view>

namespace hstu {

// "No item" in the int64 key arrays of a batch (the dense arrays' 0): raw keys are >= 0.
inline constexpr int64_t kNoKey = -1;

inline constexpr int64_t string_key(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

}  // namespace hstu
