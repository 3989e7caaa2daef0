// attn_rab_ds.h — the dS tiles of the fused sm_90a backward's rab form (ops/cuda/sm90/
// attention_bwd_sm90.cuh, BwdTraits::kRabFused), sized where no CUDA header is at hand (the
// trainer's scratch budget, the benchmark's arena): the fused d 128 kernel stores each visited
// tile's dS, 64 queries x 128 keys of 16-bit values, whole in the call's scratch at
// [B, H, key blocks, query blocks], and a reduction kernel (attention_bwd_sm90_rab.cuh) sums them
// into the rab gradient. The form runs up to kSm90BwdRabFusedMaxSeqlen tokens a sequence, where
// the bias tables still fit beside its pipeline in shared memory (its launcher asserts it).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace hstu::cuda::attn {

constexpr int kRabDsTileBytes = 64 * 128 * 2;
constexpr int kSm90BwdRabFusedMaxSeqlen = 3200;

constexpr HSTU_HD int sm90_rab_ds_key_blocks(int max_seqlen) {
  return (max_seqlen + 127) / 128;
}
constexpr HSTU_HD int sm90_rab_ds_query_blocks(int max_seqlen) {
  return (max_seqlen + 63) / 64;
}
// Bytes of the dS tiles of a call of `batch` sequences of at most max_seqlen tokens.
constexpr int64_t sm90_bwd_rab_ds_bytes(int64_t batch, int64_t heads, int max_seqlen) {
  return batch * heads * sm90_rab_ds_key_blocks(max_seqlen) * sm90_rab_ds_query_blocks(max_seqlen) *
         kRabDsTileBytes;
}

}  // namespace hstu::cuda::attn
