// attention_mask.cuh — per-sequence geometry, tile classification and the relative attention
// bias of the HSTU attention kernels.
//
// The shaping decision: masks are never template parameters. A tile (query rows x key columns)
// is classified at run time as skipped (nothing visible), full (everything visible: no per-element
// test) or partial (each element goes through hstu_attend, the one mask definition shared with
// the CPU reference). The classification is conservative — "skip" and "full" are only claimed
// when certain — so correctness rests on hstu_attend alone, and causal runs skip ~half the tiles.
#pragma once

#include <cstdint>

#include "ops/cuda/attention_params.cuh"
#include "ops/hstu_attention.h"
#include "ops/hstu_mask.h"

namespace hstu::cuda::attn {

// Rows [start, start + L) of the batch hold one sequence: c contextual tokens first, t targets
// last.
struct SeqInfo {
  int64_t start;
  int L, c, t;
};

__device__ __forceinline__ SeqInfo seq_info(const HstuAttnParams& p, int b) {
  SeqInfo s;
  s.start = p.cu_seqlens[b];
  s.L = p.cu_seqlens[b + 1] - p.cu_seqlens[b];
  s.c = p.num_contexts ? p.num_contexts[b] : 0;
  s.t = p.num_targets ? p.num_targets[b] : 0;
  return s;
}

enum TileKind : int { kSkip = 0, kPartial = 1, kFull = 2 };

// Kind of the tile rows [r0, r0 + nr) x columns [c0, c0 + nc) of sequence s. Follows
// hstu_attend: targets (columns >= h = L - t) are seen only by target rows of the same group,
// up to the diagonal; contextual rows/columns are always visible below h; otherwise causal with
// an optional window w measured from min(i, h).
__host__ __device__ __forceinline__ int tile_kind(const SeqInfo& s, const HstuAttnParams& p, int r0,
                                                  int nr, int c0, int nc) {
  const int L = s.L;
  if (r0 >= L || c0 >= L) return kSkip;
  const int r1 = min(r0 + nr, L) - 1, c1 = min(c0 + nc, L) - 1;  // inclusive, clipped
  const int h = L - s.t, g = p.target_group_size, w = p.window;
  bool any = false;
  if (c1 >= h && r1 >= h) {  // target rows x target columns: same group, j <= i
    const int ri0 = max(r0, h), cj0 = max(c0, h);
    any = cj0 <= r1 && (cj0 - h) / g <= (r1 - h) / g && (ri0 - h) / g <= (c1 - h) / g;
  }
  if (!any && c0 < h) {
    if (c0 < s.c || r0 < s.c || !p.causal) {
      any = true;
    } else {  // all rows >= c, columns [c0, cc1] of the history, causal: need j <= ie <= j + w
      const int cc1 = min(c1, h - 1);
      const int ie_min = min(r0, h), ie_max = min(r1, h);
      any = c0 <= ie_max && (w <= 0 || ie_min <= cc1 + w);
    }
  }
  if (!any) return kSkip;
  if (r0 + nr > L || c0 + nc > L || c1 >= h) return kPartial;
  if (c1 < s.c || r1 < s.c || !p.causal) return kFull;
  const int rr0 = max(r0, s.c);  // first non-contextual row of the tile
  const int ie_min = min(rr0, h), ie_max = min(r1, h);
  if (c1 <= ie_min && (w <= 0 || ie_max - c0 <= w)) return kFull;
  return kPartial;
}

__host__ __device__ __forceinline__ bool attend(const SeqInfo& s, const HstuAttnParams& p, int i,
                                                int j) {
  return i < s.L && j < s.L &&
         hstu_attend(i, j, s.L, s.c, s.t, p.target_group_size, p.window, p.causal);
}

// Time bucket of dt: with the threshold table (thr[k] = smallest |dt| of bucket >= k, in shared
// memory), a fast float log guess corrected by one exact integer comparison; otherwise the exact
// double-precision function of hstu_attention.h.
__device__ __forceinline__ int time_bucket(const HstuAttnParams& p, const int64_t* thr,
                                           int64_t dt) {
  const int nb = p.rab_time_len - 1;
  if (!p.time_table) return rab_time_bucket(dt, nb);
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

// Fills a shared tile with the relative attention bias of rows [r0, r0 + kRows) x columns
// [c0, c0 + kCols) of sequence si: bias[r][c] = rab(i, j) with (i, j) = (query, key) =
// (row, col), or (col, row) when kKeyMajor; bkt[r][c] (when not null) the time bucket. Outside
// the sequence both are 0. All threads of the block take part.
//
// The one decision: the bias is computed here, once per tile element in a rolled loop, instead of
// inside the fully unrolled accumulator loops. There the timestamp loads, the log and the table
// lookups of every element were unrolled into code that missed the instruction cache and held
// registers; the accumulator loops now add one shared-memory read per element.
template <int kRows, int kCols, int kThreads, bool kKeyMajor>
__device__ __forceinline__ void rab_tile(const HstuAttnParams& p, const SeqInfo& si,
                                         const int64_t* thr, int r0, int c0, float* bias,
                                         uint16_t* bkt, int tid) {
  constexpr int kPitch = rab_pitch<kCols>();
#pragma unroll 1
  for (int idx = tid; idx < kRows * kCols; idx += kThreads) {
    const int r = idx / kCols, c = idx % kCols;
    const int i = kKeyMajor ? c0 + c : r0 + r, j = kKeyMajor ? r0 + r : c0 + c;
    float v = 0.f;
    int bucket = 0;
    if (i < si.L && j < si.L)
      v = rab_value(p, thr, i, j, __ldg(p.ts_query + si.start + i), __ldg(p.ts_key + si.start + j),
                    bucket);
    bias[r * kPitch + c] = v;
    if (bkt) bkt[r * kPitch + c] = static_cast<uint16_t>(bucket);
  }
}

// Copies the time-bucket thresholds into shared memory (rab kernels, before the first barrier).
__device__ __forceinline__ void load_time_thresholds(const HstuAttnParams& p, int64_t* s_thr,
                                                     int tid, int nthreads) {
  if (!p.time_table) return;
  for (int k = tid; k < p.rab_time_len; k += nthreads) s_thr[k] = p.time_thr[k];
}

}  // namespace hstu::cuda::attn
