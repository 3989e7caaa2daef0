// attn_tile_order.h — the longest-first launch order of the sm_90a attention kernels' CTAs
// (attention_sm90.h: sm90_build_tile_order writes it on the device; this header holds its size,
// its entry type and a host reference, which the CPU and GPU tests compare against).
//
// The shaping decision: the order is by SEQUENCE, not by tile. Each kernel's CTA owns one resident
// block of bm rows (queries in the forward and the dQ kernel, keys in the dK/dV kernels) of one
// (sequence, head). Sequences are sorted by their number of resident blocks, descending (a
// counting sort: keys <= ceil(max_seqlen / bm)), ties in batch order; each sequence's blocks stay
// together, in the kernel's own heavy-first order (entry j is the kernel's j-th block: the
// forward's m = n - 1 - j, late query blocks first), with the heads fastest: the H CTAs of one
// entry are consecutive. A global sort of tiles by work would put the heaviest block of every
// (sequence, head) side by side: 132 CTAs reading 132 different sequences' K / V (2 MB each at
// 4096 x 128 bf16), where the grid order reads ~4 (sequence, head) pairs at a time from L2.
// Sorting sequences keeps that locality, drops the empty CTAs (blocks past a sequence's end),
// and ends the launch with the shortest sequences: the last wave is short tiles.
//
// Estimate (before any GPU run; H200, forward, 32 x 4096 x 4 x 128 bf16 causal, lengths uniform
// in 1..4096): full-length rate 538 TFLOPS = 4.08 TFLOPS per SM (132 SMs). Jagged work
// 4 H d sum(L^2) / 2 = 1.83e11 FLOPs (E[L^2] = 4096^2 / 3), ideal 0.341 ms at that rate; measured
// 447 TFLOPS = 0.410 ms, 69 us lost. Where (grid order, 128-row query blocks):
//   - empty CTAs: the grid is 32 x 4 x 32 = 4096 CTAs, ~2100 of them real (sum ceil(L / 128) x 4);
//     the other ~2000 are launched between real ones, read cu_seqlens and exit, one CTA per SM
//     at a time (228 KB of shared memory): ~15 per SM at ~1-1.5 us (launch + one L2/HBM read):
//     ~15-25 us;
//   - the tail: blockIdx.z (the sequence) is the slowest index, so the batch's last sequences run
//     last whatever their length; a 4096-token sequence there leaves its 32-key-block tiles
//     (~33 us each at 4.08 TFLOPS per SM) in the last waves: ~10-20 us;
//   - not the order: padding (the last query block of a sequence is partly past its end, the
//     diagonal key blocks are computed whole: ~6 % more than full-length's share) and the fixed
//     per-CTA prologue (barriers, Q's load, pipeline fill: ~1.5x full-length's share per FLOP,
//     the tiles being shorter): ~10 % together.
// This order removes the first two (the empty CTAs become ~one per sequence at the grid's end,
// exiting at once; the last waves are the shortest sequences), at the price of one builder
// launch (one CTA, ~3-5 us with the launch). Expected: 0.36-0.38 ms, 480-505 TFLOPS (0.89-0.94 of
// full length); the remaining ~10 % would need a persistent kernel that overlaps one tile's
// prologue with the previous tile's epilogue, or smaller last tiles. Full lengths: every
// sequence has the same key, so the list would be the grid order itself (heads fastest instead
// of blocks): the dispatcher skips it (T = B max_seqlen) and full-length calls run main's kernels.
// Backward: the same list (128-key blocks; 64 at d 256); the fused-dQ form (d 64 / 128) keeps
// its descending key-block order within each (sequence, head), so a CTA still waits only on CTAs
// launched before it, and the dQ adds keep their fixed ticket order (bit-identical output).
//
// Entries past the last real block hold b = -1 (the kernels' CTAs there return at once); the
// list has tile_order_entries() entries, the grid that many times H CTAs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace hstu::cuda::attn {

// One entry: sequence b (rows [start, start + len) of the batch), the kernel's j-th resident
// block of it. b = -1: past the end of the list.
struct alignas(16) SeqTile {
  int32_t b, j, start, len;
};

// Resident blocks of a sequence of len rows.
HSTU_HD int seq_blocks(int len, int bm) {
  return (len + bm - 1) / bm;
}

// Entries of the list (an upper bound on sum_b ceil(L_b / bm) that the host knows without the
// lengths): min(B ceil(max_seqlen / bm), floor((T + B (bm - 1)) / bm)), T = total tokens.
inline int64_t tile_order_entries(int64_t batch, int64_t max_seqlen, int64_t total_tokens, int bm) {
  if (batch <= 0 || max_seqlen <= 0 || bm <= 0) return 0;
  const int64_t by_len = batch * ((max_seqlen + bm - 1) / bm);
  const int64_t by_tokens = (total_tokens + batch * (bm - 1)) / bm;
  return std::min(by_len, by_tokens);
}

// Keys of the counting sort: 0 .. ceil(max_seqlen / bm) (a longer sequence is clamped to the
// last, as the grid order drops its blocks past ceil(max_seqlen / bm)).
inline int tile_order_keys(int64_t max_seqlen, int bm) {
  return static_cast<int>((max_seqlen + bm - 1) / bm) + 1;
}

// The device builder's shared memory (int32): counts, offsets and ranks per key, and one count
// per (warp, key) of a 1024-thread chunk. Calls beyond kTileOrderMaxSmem keep the grid order.
inline int64_t tile_order_smem_bytes(int keys) {
  return 4 * int64_t(keys) * (3 + 32);
}
constexpr int64_t kTileOrderMaxSmem = 48 * 1024;

// A batch's launch plan (ops/hstu_attention.h: hstu_attention_plan), built once for every
// attention call of a step: the forward's list and the backward's, each with room for
// attention_plan_capacity entries (the most of the kernels' block heights: 64, 128, 192 rows),
// then one 16-byte slot whose first int is the persistent forward's tile counter.
inline int64_t attention_plan_capacity(int64_t batch, int64_t max_seqlen, int64_t total_tokens) {
  int64_t n = 0;
  for (int bm : {64, 128, 192})
    n = std::max(n, tile_order_entries(batch, max_seqlen, total_tokens, bm));
  return n;
}
inline int64_t attention_plan_bytes(int64_t batch, int64_t max_seqlen, int64_t total_tokens) {
  return int64_t(sizeof(SeqTile)) *
         (2 * attention_plan_capacity(batch, max_seqlen, total_tokens) + 1);
}

// The list the device builder writes, on the host (tests): cu_seqlens [B + 1].
inline std::vector<SeqTile> tile_order_reference(const std::vector<int32_t>& cu_seqlens,
                                                 int max_seqlen, int64_t total_tokens, int bm) {
  const int batch = static_cast<int>(cu_seqlens.size()) - 1;
  const int keys = tile_order_keys(max_seqlen, bm);
  const int64_t n = tile_order_entries(batch, max_seqlen, total_tokens, bm);
  std::vector<SeqTile> out;
  for (int k = keys - 1; k >= 1; --k)
    for (int b = 0; b < batch; ++b) {
      const int len = cu_seqlens[b + 1] - cu_seqlens[b];
      if (std::min(seq_blocks(len, bm), keys - 1) != k) continue;
      for (int j = 0; j < k; ++j) out.push_back({b, j, cu_seqlens[b], len});
    }
  while (static_cast<int64_t>(out.size()) < n) out.push_back({-1, 0, 0, 0});
  return out;
}

}  // namespace hstu::cuda::attn
