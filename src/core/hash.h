// hash.h — the 64-bit MurmurHash3 finaliser, the one integer hash of hstu: the `hash` owner of
// sharded tables (dist/sharding.h, on the host and in ops/cuda/window_gpu.cu) and the dynamic
// table's bucket hash (embed/table_math.h). Host and device.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace hstu {

// The 64-bit MurmurHash3 finaliser (fmix64): a bijection that mixes every input bit.
HSTU_HD uint64_t murmur3_fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

}  // namespace hstu
