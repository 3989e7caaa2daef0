// attn_sm90_tiles.h — the sm_90a attention kernels' tile geometry as the host sizes scratch with
// it, where no CUDA header is at hand (the trainer's scratch budget, the benchmark's arena,
// ops/hstu_attention.cpp) as well as in the dispatcher and the kernels (ops/cuda/sm90/
// attention_sm90.h includes it): resident block rows, the backward's 64-query blocks and their dQ
// tickets, and the fused d 128 backward's rab form (attention_bwd_sm90.cuh, BwdTraits::kRabFused),
// which stores each visited tile's dS, 64 queries x 128 keys of 16-bit values, whole in the call's
// scratch at [B, H, key blocks, query blocks] for a reduction kernel (attention_bwd_sm90_rab.cuh)
// to sum into the rab gradient.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace hstu::cuda::attn {

// Rows of one CTA's resident block: the forward's query block (192 at d 64: 3 consumer
// warpgroups, else 128) and the backward's key / query block (128; 64 at d 256,
// attention_bwd_sm90_wide.cuh). The kernels' traits assert they agree.
constexpr HSTU_HD int sm90_fwd_block_rows(int padded_head_dim) {
  return padded_head_dim <= 64 ? 192 : 128;
}
constexpr HSTU_HD int sm90_bwd_block_rows(int padded_head_dim) {
  return padded_head_dim >= 256 ? 64 : 128;
}

// Query rows per block of the sm_90a backward's streamed operands (the dQ semaphores' unit).
constexpr int kSm90BwdQueryBlock = 64;
// The deterministic backward's dQ tickets (dq_sem): two per (sequence, head) and 64-query block
// of max_seqlen; sm90_bwd_query_blocks of them per (sequence, head) and half. The persistent
// backward's tile counter is the int right after them (the caller's scratch holds both).
constexpr HSTU_HD int sm90_bwd_query_blocks(int max_seqlen) {
  return (max_seqlen + kSm90BwdQueryBlock - 1) / kSm90BwdQueryBlock;
}
constexpr int64_t sm90_bwd_tickets(int batch, int heads, int max_seqlen) {
  return 2 * int64_t{batch} * heads * sm90_bwd_query_blocks(max_seqlen);
}

// The fused rab form: padded head width 128, up to kSm90BwdRabFusedMaxSeqlen tokens a sequence
// (where the bias tables still fit beside its pipeline in shared memory; its launcher asserts it).
// Its dS tiles: a 64-query block by a 128-key resident block each.
constexpr int kSm90BwdRabFusedMaxSeqlen = 3200;
constexpr int kRabDsTileBytes = kSm90BwdQueryBlock * 128 * 2;
constexpr bool sm90_bwd_rab_fused_fits(int padded_head_dim, int max_seqlen) {
  return padded_head_dim == 128 && max_seqlen <= kSm90BwdRabFusedMaxSeqlen;
}
constexpr HSTU_HD int sm90_rab_ds_key_blocks(int max_seqlen) {
  return (max_seqlen + sm90_bwd_block_rows(128) - 1) / sm90_bwd_block_rows(128);
}
// Bytes of the dS tiles of a call of `batch` sequences of at most max_seqlen tokens.
constexpr int64_t sm90_bwd_rab_ds_bytes(int64_t batch, int64_t heads, int max_seqlen) {
  return batch * heads * sm90_rab_ds_key_blocks(max_seqlen) * sm90_bwd_query_blocks(max_seqlen) *
         kRabDsTileBytes;
}

}  // namespace hstu::cuda::attn
