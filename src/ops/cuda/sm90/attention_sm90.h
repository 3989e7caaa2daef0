// attention_sm90.h — the Hopper (sm_90a) HSTU attention entry points the dispatcher
// (cuda/hstu_attention.cu) calls, and the test of which calls they serve.
//
// The shaping decision: the sm_90a kernels sit behind the same HstuAttnParams as the sm_80 ones;
// the dispatcher asks sm90_fwd_supported() / sm90_bwd_supported() and falls back to the sm80
// kernels otherwise (other GPUs, HSTU_ATTN_SM80=1, head widths <= 32, operands whose
// strides break TMA's 16-byte rules, builds without sm_90a code or without CUTLASS).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/sm80/attention_params.cuh"
#include "ops/detail/attn_sm90_tiles.h"

namespace hstu::cuda::attn {

// Forward on sm_90a: o = scale * sum_j SiLU(alpha (S + rab)) v over the visible keys;
// kHeadDim = padded head width (64, 128 or 256).
template <typename T, int kHeadDim>
void run_fwd_sm90(const HstuAttnParams& p, cudaStream_t stream);

// Backward on sm_90a (attention_bwd_sm90_run.cuh); kHeadDim = 64, 128 or 256; rab (with
// p.rab_bkt) at 64 / 128 in the split form, and at 128 in the fused form up to
// kSm90BwdRabFusedMaxSeqlen tokens (with p.rab_ds for its gradient; none at 256). With p.dq_accum
// (fp32, 4 T H kHeadDim bytes, dq_accum_head_stride = kHeadDim; attention_bwd_sm90_dq.cuh): the
// fused form, one kernel for dk, dv and the partial dQ of every key block added to dq_accum, then
// dq converted, all on `stream`; with dq_sem (int32 [B, H, ceil(max_seqlen / kSm90BwdQueryBlock),
// 2] tickets and one more int, the persistent form's tile counter; all zeroed) the adds run in a
// fixed order (deterministic; dq_accum needs no zeroing) and the convert overlaps the fused
// kernel's last wave (at 64 / 128), without it unordered (dq_accum zeroed). Without p.dq_accum: the
// split form, dk, dv from a key-major kernel on `stream` and dq from a query-major kernel on
// dq_stream (which the caller has made wait for `stream` and joins back afterwards; may equal
// stream), deterministic.
template <typename T, int kHeadDim>
void run_bwd_sm90(const HstuAttnParams& p, int* dq_sem, cudaStream_t stream,
                  cudaStream_t dq_stream);
// The tile geometry (block rows, 64-query blocks, dQ tickets, the fused rab form's dS tiles):
// ops/detail/attn_sm90_tiles.h.

// The longest-first launch order (attn_tile_order.h). Whether calls take it: by default where
// `by_default` says (the dispatcher: not the fp16 forward, whose list form ptxas compiles with
// 8-12 bytes more spill stores than main's at d 128 / 256), always under
// HSTU_ATTN_SM90_ORDER=seq, never under HSTU_ATTN_SM90_ORDER=grid (the grid order, blockIdx =
// (block, head, sequence): A/B runs); and only where the builder's shared memory fits
// (max_seqlen up to ~22,000 tokens at bm 64).
bool sm90_tile_order_on(int max_seqlen, int bm, bool by_default);
// Writes the list of p's batch for resident blocks of bm rows into out (entries =
// tile_order_entries(p.batch, p.max_seqlen, p.total_tokens, bm)) on `stream`: one CTA, no host
// synchronisation (capturable in a CUDA graph), the same list every run.
void sm90_build_tile_order(const HstuAttnParams& p, int bm, SeqTile* out, int64_t entries,
                           cudaStream_t stream);

// Whether this build carries the sm_90a kernels (CMake: HSTU_SM90_KERNELS, set when
// HSTU_CUDA_ARCHS names 90a and CUTLASS headers were found).
constexpr bool sm90_kernels_built() {
#if defined(HSTU_SM90_KERNELS)
  return true;
#else
  return false;
#endif
}

// Whether the sm_90a forward takes this call: a compute-capability-9.0 device, no
// HSTU_ATTN_SM80=1 in the environment, a padded head width of 64 / 128 / 256, q, k, v
// TMA-addressable (16-byte aligned base, row and head strides; HeadsView::vec), with rab the
// precomputed time buckets (p.rab_bkt) and max_seqlen <= 4096 (2048 at d 256), and a call where
// it measured faster than the sm80 kernel (lengths from 256 / 512 tokens; attention_sm90.cu) or
// HSTU_ATTN_SM90=1.
bool sm90_fwd_supported(const HstuAttnParams& p, int padded_head_dim);

// Whether the sm_90a backward takes this call: the forward's device / override / TMA conditions
// (d_o included), a padded head width of 64, 128 or 256, relative attention bias only at 64 / 128
// with the precomputed buckets and max_seqlen <= 4096, and a call where it
// measured faster than the sm80 backward (from 512 tokens at d 128 / 256, 2048 at d 64 without
// rab, every length at d 64 with rab; attention_sm90.cu) or HSTU_ATTN_SM90=1. Falls back to sm80:
// rab at d 256, without buckets or beyond those lengths, head widths <= 32, operands TMA cannot
// address, shorter sequences.
bool sm90_bwd_supported(const HstuAttnParams& p, int padded_head_dim);

// The sm_90a forward's persistent form (attention_fwd_sm90.cuh; calls without rab at padded
// head widths 64 / 128), read per call from HSTU_ATTN_SM90_PERSIST: 0 = off (one CTA per tile),
// 2 = "1" (always, where it applies), 1 = unset or anything else (the default: calls with the
// longest-first launch list, i.e. jagged batches; full-length ones run one CTA per tile). The
// dispatcher applies it by giving the call a tile counter (p.fwd_tile_counter), from which each
// CTA claims its next tile; the launcher runs the persistent form exactly when it has one.
// NOTE (session 16, H200, B32 L4096 H4 causal bf16, forward TFLOPS, persistent vs one CTA per
// tile in one call): jagged uniform 1..4096 d 128 469-473 vs 464-466, d 64 330-331 vs 327-328;
// full length d 128 527-529 vs 538 (slower: not the default there), d 64 365 vs 366; a static
// stride (CTA c takes tiles c, c + G, ...) 491 / 231 at full length (d 128 / 64): removed.
int sm90_fwd_persist_mode();
// The fused d 64 backward's persistent form (attention_bwd_sm90.cuh, kPersist; deterministic
// calls), read per call from HSTU_ATTN_SM90_BWD_PERSIST: "0" off (one CTA a tile), "1" on, unset
// (or anything else) on for calls with at least two tiles' worth of token-heads per SM
// (total_tokens x heads >= 2 x 128 x SMs). H200, B32 H4 d 64 bf16, against one CTA a tile
// (docs/BENCHMARKS.md, sessions 27-28): L 4096 full 386 vs 381 TFLOPS, jagged uniform 345 vs 338,
// half 364 vs 356; 64 x 2048 347 vs 336, 128 x 1024 283 vs 266, 512 x 256 134 vs 119; fp16 the
// same within 1%. Below the threshold a call is bound by its longest tile, which the persistent
// kernel runs ~4% slower: 1 x 4096 x 4 185 vs 194 (128 tiles, one a CTA either way), zipf
// 32 x 4096 112 vs 120 (one long sequence); zipf 128 x 1024 103 vs 101 above it.
bool sm90_bwd_persist(const HstuAttnParams& p);
// The device's multiprocessors (cached per device).
int sm90_sm_count();
// Launches of the persistent forward / backward, and of the fused backward's rab form, in this
// process (the GPU tests' check that a call ran it), and their counting (the launchers').
enum class Sm90Pass { kFwd, kBwd, kBwdRabFused };
int64_t sm90_persist_launches(Sm90Pass pass);
void sm90_count_persist_launch(Sm90Pass pass);

// Whether the sm_90a forward runs at all here (kernels built, a 9.0 device, no HSTU_ATTN_SM80=1):
// the GPU tests' question, which they cannot ask sm90_kernels_built() (a define of hstu_ops).
bool sm90_attention_available();

}  // namespace hstu::cuda::attn
