// attention_mask.cuh — per-sequence geometry, tile classification and the relative attention
// bias of the HSTU attention kernels.
//
// The shaping decision: masks are never template parameters. A tile (query rows x key columns)
// is classified at run time (hstu_tile_kind, next to hstu_attend in hstu_attention.h) as skipped
// (nothing visible), full (no per-element test), causal (one compare per element: the diagonal
// tiles of plain causal attention) or partial (each element goes through hstu_attend, the one
// mask definition shared with the CPU reference). Causal runs skip ~half the tiles, and the
// classification looks only at pairs inside the sequence: the rows and columns past its end are
// zero-filled in shared memory, so they contribute nothing whatever the mask says.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/cuda/sm80/attention_params.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"
#include "ops/hstu_attention.h"

namespace hstu::cuda::attn {

// Rows [start, start + L) of the batch hold one sequence: c contextual tokens first, t targets
// last.
struct SeqInfo {
  int64_t start;
  int L, c, t;
  int b;  // the sequence's index in the batch
};

__device__ __forceinline__ SeqInfo seq_info(const HstuAttnParams& p, int b) {
  SeqInfo s;
  s.start = p.cu_seqlens[b];
  s.L = p.cu_seqlens[b + 1] - p.cu_seqlens[b];
  s.c = p.num_contexts ? p.num_contexts[b] : 0;
  s.t = p.num_targets ? p.num_targets[b] : 0;
  s.b = b;
  return s;
}

// Kind of the tile rows [r0, r0 + nr) x columns [c0, c0 + nc) of sequence s (hstu_tile_kind).
__host__ __device__ __forceinline__ int tile_kind(const SeqInfo& s, const HstuAttnParams& p, int r0,
                                                  int nr, int c0, int nc) {
  return hstu_tile_kind(r0, nr, c0, nc, s.L, s.c, s.t, p.target_group_size, p.window, p.causal);
}

// One past the last key block (of nc keys) that query rows [r0, r0 + nr) of sequence s can see
// (hstu_key_block_end).
__host__ __device__ __forceinline__ int key_block_end(const SeqInfo& s, const HstuAttnParams& p,
                                                      int r0, int nr, int nc) {
  return hstu_key_block_end(r0, nr, nc, s.L, s.c, p.causal);
}

// Words of a partial tile's visibility mask per row: one bit per column.
template <int kCols>
constexpr int mask_words() {
  static_assert(kCols % 32 == 0, "tile widths are multiples of 32 columns");
  return kCols / 32;
}

// Fills the visibility mask of a partial tile, rows [r0, r0 + kRows) x columns [c0, c0 + kCols)
// of sequence si: bit c % 32 of mask[r * kWords + c / 32] says whether (query i, key j) = (row,
// col), or (col, row) when kKeyMajor, is visible (hstu_attend; 0 outside the sequence). All
// threads of the block take part.
//
// The one decision: the general mask (contexts, targets, windows) is evaluated here, once per
// tile element in a rolled loop, and the fully unrolled accumulator loops test one bit. Evaluated
// inline there, it held registers next to the accumulators in every kernel, partial tile or not
// (ptxas: the d = 128 dK/dV kernel spilled ~200 B with it inline, none without).
template <int kRows, int kCols, int kThreads, bool kKeyMajor>
__device__ __forceinline__ void mask_tile(const HstuAttnParams& p, const SeqInfo& si, int r0,
                                          int c0, uint32_t* mask, int tid) {
  constexpr int kWords = mask_words<kCols>();
#pragma unroll 1
  for (int w = tid; w < kRows * kWords; w += kThreads) {
    const int r = w / kWords, cw = (w % kWords) * 32;
    uint32_t bits = 0;
#pragma unroll 1
    for (int k = 0; k < 32; ++k) {
      const int i = kKeyMajor ? c0 + cw + k : r0 + r, j = kKeyMajor ? r0 + r : c0 + cw + k;
      const bool ok = i < si.L && j < si.L &&
                      hstu_attend(i, j, si.L, si.c, si.t, p.target_group_size, p.window, p.causal);
      bits |= uint32_t(ok) << k;
    }
    mask[w] = bits;
  }
}

// Whether tile element (r, c) — query i, key j — is visible in a tile of kind kKind (kTileFull /
// kTileCausal / kTilePartial, whose mask_tile bits are `mask`, kWords per row).
template <int kKind, int kWords>
__device__ __forceinline__ bool tile_visible(const uint32_t* mask, int r, int c, int i, int j) {
  if constexpr (kKind == kTileFull) return true;
  if constexpr (kKind == kTileCausal) return j <= i;
  return (mask[r * kWords + (c >> 5)] >> (c & 31)) & 1u;
}

// Calls f(std::integral_constant<int, kind>) with the tile kind as a compile-time constant, so
// each kind gets its own element loop (kind is never kTileSkip here).
template <typename F>
__device__ __forceinline__ void with_tile_kind(int kind, F&& f) {
  if (kind == kTileFull) {
    f(std::integral_constant<int, kTileFull>{});
  } else if (kind == kTileCausal) {
    f(std::integral_constant<int, kTileCausal>{});
  } else {
    f(std::integral_constant<int, kTilePartial>{});
  }
}

// Time bucket of dt from the threshold table of nb buckets (thr[k] = smallest |dt| of bucket
// >= k, in shared memory): a fast float log guess corrected by one exact integer comparison.
__device__ __forceinline__ int time_bucket_table(int nb, const int64_t* thr, int64_t dt) {
  const int64_t a = dt < 0 ? -dt : dt;
  if (a <= 1) return 0;
  int b = static_cast<int>(__log2f(static_cast<float>(a)) * (0.69314718055994531f / 0.301f));
  b = b < 0 ? 0 : (b > nb ? nb : b);
  if (b < nb && a >= thr[b + 1]) {
    ++b;
  } else if (b > 0 && a < thr[b]) {
    --b;
  }
  return b;
}

// Time bucket of dt: time_bucket_table with the thresholds, otherwise the exact double-precision
// function of hstu_attention.h.
__device__ __forceinline__ int time_bucket(const HstuAttnParams& p, const int64_t* thr,
                                           int64_t dt) {
  const int nb = p.rab_time_len - 1;
  if (!p.time_table) return rab_time_bucket(dt, nb);
  return time_bucket_table(nb, thr, dt);
}

// rab[i, j] (positions within the sequence; tq = ts_query of row i, tk = ts_key of column j).
__device__ __forceinline__ float rab_value(const HstuAttnParams& p, const int64_t* thr, int i,
                                           int j, int64_t tq, int64_t tk, int& bucket) {
  bucket = time_bucket(p, thr, tq - tk);
  return __ldg(p.rab_pos + rab_pos_index(i, j, p.rab_pos_len)) + __ldg(p.rab_time + bucket);
}

__device__ __forceinline__ unsigned long long to_fixed(float x) {
  // x * 2^40 is exact in fp32 (a power-of-two scaling), so this equals rounding in fp64.
  return static_cast<unsigned long long>(__float2ll_rn(x * static_cast<float>(kRabFixedScale)));
}

// Pitch (floats) of a shared rab tile with kCols columns: == 8 (mod 32), so the 8-byte reads of
// one accumulator fragment (8 rows x 4 column pairs per half warp) hit distinct banks.
template <int kCols>
constexpr int rab_pitch() {
  return kCols + 8;
}

// The precomputed time buckets of sequence si (row i at + i * rab_bkt_stride), or null.
__device__ __forceinline__ const uint8_t* seq_buckets(const HstuAttnParams& p, const SeqInfo& si) {
  if (!p.rab_bkt) return nullptr;
  return p.rab_bkt + int64_t(si.b) * p.rab_bkt_stride * p.rab_bkt_stride;
}

// Fills a shared tile with the relative attention bias of rows [r0, r0 + kRows) x columns
// [c0, c0 + kCols) of sequence si: bias[r][c] = rab(i, j) with (i, j) = (query, key) =
// (row, col), or (col, row) when kKeyMajor; bkt[r][c] (when not null) the time bucket. Outside
// the sequence both are 0. All threads of the block take part. `tab`: load_rab_tables' shared
// memory (the time table with precomputed buckets, the bucket thresholds without).
//
// The one decision: the bias is computed here, once per tile element in a rolled loop, instead of
// inside the fully unrolled accumulator loops. There the timestamp loads, the log and the table
// lookups of every element were unrolled into code that missed the instruction cache and held
// registers; the accumulator loops now add one shared-memory read per element.
// With precomputed buckets (p.rab_bkt: once per call for every head and both passes, instead of
// the timestamps, a log and a threshold search per element per head) only key-major tiles (the
// dK/dV kernel, whose rab gradient also needs the buckets in its orientation) come here; the
// query-major kernels add the bias straight from the staged buckets (rab_pair). The tile's
// buckets were copied into shared memory with the streamed operands of the tile (load_bkt_tile:
// s_bk, query-major), so the loop waits on no global load: each thread takes 4 consecutive
// queries of a key, the time table comes from shared memory and the position table (a few
// hundred bytes, coalesced) through L1.
template <int kRows, int kCols, int kThreads, bool kKeyMajor>
__device__ __forceinline__ void rab_tile(const HstuAttnParams& p, const SeqInfo& si,
                                         const int64_t* tab, int r0, int c0, float* bias,
                                         uint16_t* bkt, int tid, const uint8_t* s_bk) {
  constexpr int kPitch = rab_pitch<kCols>();
  if (kKeyMajor && p.rab_bkt) {  // the tile's buckets, staged in shared memory by load_bkt_tile
    static_assert(kCols % 4 == 0, "4 columns per thread");
    constexpr int kG = kCols / 4;
    constexpr int kBkPitch = kRows + 16;  // s_bk is query-major: [queries][keys]
    const float* ttab = reinterpret_cast<const float*>(tab);
#pragma unroll 2
    for (int idx = tid; idx < kRows * kG; idx += kThreads) {
      const int r = idx % kRows, c = 4 * (idx / kRows);
      const int j = r0 + r, i = c0 + c;
      float v[4] = {0.f, 0.f, 0.f, 0.f};
      uint32_t bq[4] = {0, 0, 0, 0};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        bq[q] = s_bk[(c + q) * kBkPitch + r];
        if (j < si.L && i + q < si.L)
          v[q] = __ldg(p.rab_pos + rab_pos_index(i + q, j, p.rab_pos_len)) + ttab[bq[q]];
      }
      float* dst = bias + r * kPitch + c;  // 8-byte aligned: c and kPitch are even
      *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
      *reinterpret_cast<float2*>(dst + 2) = make_float2(v[2], v[3]);
      if (bkt) {
        uint32_t* bd = reinterpret_cast<uint32_t*>(bkt + r * kPitch + c);
        bd[0] = bq[0] | (bq[1] << 16);
        bd[1] = bq[2] | (bq[3] << 16);
      }
    }
    return;
  }
#pragma unroll 1
  for (int idx = tid; idx < kRows * kCols; idx += kThreads) {
    const int r = idx / kCols, c = idx % kCols;
    const int i = kKeyMajor ? c0 + c : r0 + r, j = kKeyMajor ? r0 + r : c0 + c;
    float v = 0.f;
    int bucket = 0;
    if (i < si.L && j < si.L)
      v = rab_value(p, tab, i, j, __ldg(p.ts_query + si.start + i), __ldg(p.ts_key + si.start + j),
                    bucket);
    bias[r * kPitch + c] = v;
    if (bkt) bkt[r * kPitch + c] = static_cast<uint16_t>(bucket);
  }
}

// The bias of query i and keys j, j + 1 from a staged bucket tile (load_bkt_tile): bk points at
// the pair's two bucket bytes (j even), ttab is the time table in shared memory (load_rab_tables).
// The same sums as rab_tile's; outside the sequence the value is finite and unused (the zero-filled
// K / V / dO rows there make its products 0), so the query-major kernels need no bias tile.
__device__ __forceinline__ float2 rab_pair(const HstuAttnParams& p, const float* ttab,
                                           const uint8_t* bk, int i, int j) {
  const uint32_t w = *reinterpret_cast<const uint16_t*>(bk);
  return make_float2(__ldg(p.rab_pos + rab_pos_index(i, j, p.rab_pos_len)) + ttab[w & 0xffu],
                     __ldg(p.rab_pos + rab_pos_index(i, j + 1, p.rab_pos_len)) + ttab[w >> 8]);
}

// Bytes of one staged bucket tile of kQ queries x kK keys (load_bkt_tile: pitch kK + 16, so
// 16-byte copies stay aligned).
template <int kQ, int kK>
constexpr int bkt_tile_bytes() {
  return kQ * (kK + 16);
}

// Issues (cp.async, into the caller's current group) the copy of the precomputed buckets of
// queries [i0, i0 + kQ) x keys [j0, j0 + kK) of sequence si into s (query-major, pitch kK + 16);
// chunks outside the sequence are zero-filled. No-op without precomputed buckets.
template <int kQ, int kK, int kThreads>
__device__ __forceinline__ void load_bkt_tile(const HstuAttnParams& p, const SeqInfo& si, int i0,
                                              int j0, uint8_t* s, int tid) {
  static_assert(kK % 16 == 0, "16-byte chunks");
  const uint8_t* sb = seq_buckets(p, si);
  if (!sb) return;
  constexpr int kCPR = kK / 16, kPitch = kK + 16;
  const int64_t ld = p.rab_bkt_stride;
  for (int c = tid; c < kQ * kCPR; c += kThreads) {
    const int r = c / kCPR, cc = (c % kCPR) * 16;
    const int i = i0 + r, j = j0 + cc;
    const bool in = i < si.L && j < si.L;  // then j + 16 <= ld: rows are 16-byte padded
    cp_async_16(s + r * kPitch + cc, in ? sb + i * ld + j : sb, in ? 16 : 0);
  }
}

// 16-byte aligned pointer at or after p (shared-memory carving).
__device__ __forceinline__ uint8_t* align16(void* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15));
}

// Copies the time-bucket thresholds into shared memory (rab kernels, before the first barrier).
// Each warp reads one threshold per instruction, the same for all its lanes: kernel-parameter
// reads of 32 different addresses by one instruction are serialised.
__device__ __forceinline__ void load_time_thresholds(const HstuAttnParams& p, int64_t* s_thr,
                                                     int tid, int nthreads) {
  if (!p.time_table) return;
  const int warp = tid >> 5, nwarps = nthreads >> 5;
#pragma unroll 4
  for (int k = warp; k < p.rab_time_len; k += nwarps) {
    const int64_t v = p.time_thr[k];
    if ((tid & 31) == 0) s_thr[k] = v;
  }
}

// The rab kernels' table in shared memory, `tab` (kMaxTimeTable + 1 int64): with precomputed
// buckets the time table (floats; entries past rab_time_len 0, so any u8 index reads a finite
// value), else the bucket thresholds. Before the first barrier, after the first stage's copies
// are issued (those need not wait for it); a thread's loads all go out before its stores, so the
// table costs one global round trip, not one per entry it fills.
template <int kThreads>
__device__ __forceinline__ void load_rab_tables(const HstuAttnParams& p, int64_t* tab, int tid) {
  if (p.rab_bkt) {
    float* t = reinterpret_cast<float*>(tab);
    constexpr int kPer = (kMaxBktTable + kThreads - 1) / kThreads;
    float v[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int k = tid + u * kThreads;
      v[u] = k < p.rab_time_len ? __ldg(p.rab_time + k) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (tid + u * kThreads < kMaxBktTable) t[tid + u * kThreads] = v[u];
  } else {
    load_time_thresholds(p, tab, tid, kThreads);
  }
}

}  // namespace hstu::cuda::attn
