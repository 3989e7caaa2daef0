// attention_bwd_sm90_rab.cuh — relative attention bias in the Hopper (sm_90a) backward
// (attention_bwd_sm90.cuh, head widths 64 / 128): the shared memory it adds to a CTA, the bias of
// one score element, and the reduction of its gradient into fixed-point accumulators.
//
// Bias of (query i, key j) = rab_pos[rab_pos_index(i, j)] + rab_time[bucket(i, j)], added to
// S = Q K^T before alpha and SiLU exactly as the forward does. The buckets are the call's
// precomputed u8 [B, S, S] (sm80/rab_buckets.cuh): each consumer warpgroup copies the 64 x 64
// block of its tile (queries x keys, query-major, pitch kBktPitch) with cp.async into one of two
// buffers while it computes the block before. The time table (kMaxBktTable floats) and the CTA's
// window of the position table (one entry per diagonal j - i its tiles touch) sit in shared memory.
//
// Gradient (dK/dV kernel only; the dQ kernel adds the bias and nothing else): d_rab[i, j] =
// alpha scale dS[i, j], summed per diagonal j - i and per time bucket into 64-bit fixed-point
// (2^-40: kRabFixedScale) integers, added to the call's accumulators (p.drab_accum,
// drab_finish_kernel of hstu_attention.cu). Integer adds are associative, so d_rab is
// bit-identical run to run whatever their order; every fp32 sum before a conversion runs in a
// fixed order. Per tile and warpgroup, while the dV / dK GEMMs run:
//   - diagonals (bwd_rab_grad): each warp folds its 16 x 64 part of fp32 dS onto 8 rows (row
//     r + 8 and column c lie on the diagonal of row r and column c - 8: one add per pair) and
//     writes them skewed into a private stage (folded column c' at stage column c' - r + 16), so
//     each stage column is one diagonal of the warp's 16 rows; a lane sums a column and, once
//     the warp has read its whole stage, stores the sum in the stage's first row (the warp's
//     row of the warpgroup's diagonal sums: no table of their own, so d 128 fits 4096 tokens).
//   - time buckets (bwd_rab_grad): each thread sums runs of equal bucket along its two key rows
//     in registers (the two rows side by side, the next column group's buckets read ahead) and
//     adds each finished run to the warpgroup's bucket sums as three 32-bit integer slices of
//     the fixed-point value (bits 0-19, 20-39, 40-63: native shared atomics; at most 4096 adds
//     per tile keep the low slices' sums below 2^32, and the top slice's only matters modulo
//     2^24).
//   - then (bwd_rab_flush_tile, after a warpgroup barrier) thread t sums diagonal t over the 4
//     warps in order and adds it to the CTA's diagonal accumulators (u64, shared; added to
//     p.drab_accum once per CTA), and turns two buckets' slices back into one 64-bit add to
//     p.drab_accum, zeroing them.
// Cost (H200, ncu, 32 x 1024 x 4 x 128, the dK/dV kernel; session 18): 495-507 us with the
// gradient, 266-273 us with the bias alone. Of the difference, switching one part off at a time
// (the parts overlap, so the shares are rough): the time-bucket runs ~170-190 us, the diagonals
// ~50 (~70 before the fold), the per-tile flush ~30. The runs are latency-bound, not
// bank-bound: their atomics on hot buckets count 24 M bank conflicts, yet summing each run over
// the warp first (ballot, the bucket shuffled, integer __reduce_add_sync of the slices; 0.3 M
// conflicts) ran slower (699 us), as did deferring only each row's first and last run to such
// sums (550 us): both add more instructions than the conflicts cost. Reading all of a thread's
// buckets before the runs cost registers (a spill; 530 us); reading one column group ahead
// gains 2.5%. Session 19 (ncu source counters): the gradient and its flush hold ~46% of the
// kernel's stall samples and ~36% of its instructions; the consumer warps issue one instruction
// per ~6 cycles, so time follows the instruction count, not the atomics' conflicts. Measured and
// dropped: each row's last three runs in a register shift register, added once at the end
// (the warp votes only when a fourth run pushes one out): 502 us, the same; and those final adds
// grouped per bucket over the warp (__match_any_sync, __reduce_add_sync of the slices: bank
// conflicts 26 M -> 4 M): 573 us.
//
// Shared memory after the kernel's SharedStorage (bytes() for a call's max_seqlen):
//   [dK/dV only] diagonal sums u64 [pos_window], per warp a stage f32 [8][kStagePitch], per
//                warpgroup bucket slices u32 [3][256],
//   bucket tiles u8 [warpgroups][2][64 queries][kBktPitch], time table f32 [kMaxBktTable],
//   position window f32 [pos_window] (pos_window = round_up(max_seqlen, kBN) + kBM).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"
#include "ops/cuda/sm90/attention_fwd_sm90.cuh"  // CuTe (get, size) in this namespace
#include "ops/cuda/sm90/attention_sm90.h"

namespace hstu::cuda::attn::sm90 {

// Dynamic shared memory one CTA may use on sm_90 (227 KB).
constexpr int kSm90MaxSmem = 227 * 1024;

// The consumer's view of the rab shared memory for one tile: bias of the element with query qi,
// key kj (tile coordinates: the tile's rows and columns in the kernel's orientation) =
// pw[kj - qi] + ttab[bkt[qi * kBktPitch + kj]] (bkt and pw pre-offset by the caller). With the
// gradient, pacc is the CTA's diagonal accumulator pre-offset like pw.
struct BwdRabView {
  const uint8_t* bkt = nullptr;
  const float* ttab = nullptr;
  const float* pw = nullptr;
  unsigned long long* pacc = nullptr;
};

template <int kBM, int kBN, int kWGs, bool kDkdv>
struct BwdRabSmem {
  static_assert(kBN == 64 && kBM == 64 * kWGs, "one 64 x 64 bucket block per warpgroup and tile");
  // Pitch (bytes) of a bucket block's query rows: 80 puts the 8 keys x 4 query pairs one warp's
  // key-major accumulators read at once in distinct banks (and the query-major ones too).
  static constexpr int kBktPitch = 64 + 16;
  static constexpr int kBlockBytes = 64 * kBktPitch;
  static constexpr int kBktBytes = kWGs * 2 * kBlockBytes;
  // Diagonals j - i the CTA's tiles touch: key (or query) blocks reach round_up(max_seqlen, kBN),
  // the resident rows go kBM - 1 the other way.
  __host__ __device__ static constexpr int pos_window(int max_seqlen) {
    return (max_seqlen + kBN - 1) / kBN * kBN + kBM;
  }
  // The diagonal stage of one warp (bwd_rab_grad): its 16 rows folded onto 8 (row r + 8 and
  // column c lie on the diagonal of row r and column c - 8), so 8 rows of 72 columns -8 .. 63,
  // skewed over 80. Pitch 81: a half warp's STS.64 (4 rows x 4 column pairs, write pitch 80)
  // meets 2-way bank conflicts at worst, for no more bytes than the unfolded stage had.
  static constexpr int kStagePitch = 81;
  static constexpr int kStageFloats = 8 * kStagePitch;
  static constexpr int kStageBytes = 4 * kStageFloats * 4 * kWGs;  // 4 warps a warpgroup
  // A warpgroup's diagonal sums: warp q's stage column j (1..79) at q * kDiagPitch + j, the
  // first row of warp q's stage (written after the warp's last read of it; read by the flush).
  static constexpr int kDiagPitch = kStageFloats;
  // A warpgroup's bucket sums: three u32 slices of kMaxBktTable.
  static constexpr int kHistWords = 3 * kMaxBktTable;
  static constexpr int kHistBytes = 4 * kHistWords * kWGs;
  static constexpr int acc_bytes(int window) {
    return kDkdv ? 8 * window + kStageBytes + kHistBytes : 0;
  }
  static constexpr int bytes(int max_seqlen) {
    const int w = pos_window(max_seqlen);
    return acc_bytes(w) + kBktBytes + 4 * kMaxBktTable + 4 * w;
  }
  struct Ptrs {  // dK/dV only: pacc .. hist
    unsigned long long* pacc;
    float* stage;    // per warp kStageFloats; its first row the warp's diagonal sums
    uint32_t* hist;  // per warpgroup kHistWords
    uint8_t* bkt;    // 16-byte aligned (cp.async)
    float* ttab;
    float* pw;
  };
  // base: 16-byte aligned, right after the SharedStorage.
  __device__ static Ptrs carve(unsigned char* base, int max_seqlen) {
    const int w = pos_window(max_seqlen);
    Ptrs r;
    r.pacc = reinterpret_cast<unsigned long long*>(base);
    r.stage = reinterpret_cast<float*>(r.pacc + w);
    r.hist = reinterpret_cast<uint32_t*>(r.stage + kStageBytes / 4);
    r.bkt = base + acc_bytes(w);  // a multiple of 16: so are w (of 64) and the three parts
    r.ttab = reinterpret_cast<float*>(r.bkt + kBktBytes);
    r.pw = r.ttab + kMaxBktTable;
    return r;
  }
  // The tables (times mul: alpha, or alpha / 2 for the tanh form; bwd_rab_bias_pair;
  // rab_fill_tables) and zeroed accumulators; threads tid of nthreads (the consumers, before their
  // shared barrier). dmin: the diagonal j - i of window entry 0.
  __device__ static void fill(const Ptrs& s, const HstuAttnParams& p, int max_seqlen, int dmin,
                              int tid, int nthreads, float mul) {
    const int w = pos_window(max_seqlen);
    rab_fill_tables(s.ttab, p, w, dmin, tid, nthreads, mul);  // s.pw = s.ttab + kMaxBktTable
    if constexpr (kDkdv) {
      for (int k = tid; k < w; k += nthreads) s.pacc[k] = 0;
      for (int k = tid; k < kHistWords * kWGs; k += nthreads) s.hist[k] = 0;
    }
  }
  // Issues (cp.async, one group) the copy of the buckets of queries [qi0, qi0 + 64) x keys
  // [kj0, kj0 + 64) of sequence si into block `blk` (query-major, pitch kBktPitch); chunks
  // outside the sequence are zero-filled. t: the thread's index in its warpgroup.
  __device__ static void load_block(const HstuAttnParams& p, const SeqInfo& si, uint8_t* blk,
                                    int qi0, int kj0, int t) {
    const uint8_t* sb = seq_buckets(p, si);
    const int64_t ld = p.rab_bkt_stride;
#pragma unroll
    for (int c = t; c < 64 * 4; c += 128) {
      const int r = c / 4, cc = (c % 4) * 16;
      const int i = qi0 + r, j = kj0 + cc;
      const bool in = i < si.L && j < si.L;  // then j + 16 <= ld: rows are 16-byte padded
      cp_async_16(blk + r * kBktPitch + cc, in ? sb + i * ld + j : sb, in ? 16 : 0);
    }
    cp_async_commit();
  }
  // Adds the CTA's diagonal sums to the call's (p.drab_accum); the consumer threads (t of n)
  // after the barrier that follows their last tile.
  __device__ static void flush(const Ptrs& s, const HstuAttnParams& p, int max_seqlen, int dmin,
                               int t, int n) {
    if constexpr (kDkdv) {
      const int w = pos_window(max_seqlen), half = (p.rab_pos_len + 1) / 2;
      for (int k = t; k < w; k += n) {
        const unsigned long long v = s.pacc[k];
        if (v == 0) continue;
        int idx = half - 1 + dmin + k;
        idx = idx < 0 ? 0 : (idx >= p.rab_pos_len ? p.rab_pos_len - 1 : idx);
        atomicAdd(p.drab_accum + idx, v);
      }
    }
  }
};

// mul times the bias (the tables are scaled by fill) of tile elements (r, c) and (r, c + 1),
// c even (see BwdRabView): key r and queries c, c + 1 when kKeyMajor (two rows of the
// query-major bucket block), else query r and keys c, c + 1 (rab_bias_pair: one read).
template <bool kKeyMajor, int kBktPitch>
__device__ __forceinline__ void bwd_rab_bias_pair(const BwdRabView& rv, int r, int c,
                                                  float (&bias)[2]) {
  if constexpr (kKeyMajor) {
    bias[0] = rv.pw[r - c] + rv.ttab[rv.bkt[c * kBktPitch + r]];
    bias[1] = rv.pw[r - c - 1] + rv.ttab[rv.bkt[(c + 1) * kBktPitch + r]];
  } else {
    rab_bias_pair<kBktPitch>(rv.bkt, rv.ttab, rv.pw, r, c, bias);
  }
}

// A fixed-point value as three 32-bit slices (bits 0-19, 20-39, 40-63, see the file comment),
// and back from slice sums (modulo 2^64, as the 64-bit sums would be).
__device__ __forceinline__ uint32_t slice_lo(unsigned long long v) {
  return uint32_t(v) & 0xfffffu;
}
__device__ __forceinline__ uint32_t slice_mid(unsigned long long v) {
  return uint32_t(v >> 20) & 0xfffffu;
}
__device__ __forceinline__ uint32_t slice_hi(unsigned long long v) {
  return uint32_t(static_cast<long long>(v) >> 40);
}
__device__ __forceinline__ unsigned long long from_slices(uint32_t lo, uint32_t mid, uint32_t hi) {
  return (static_cast<unsigned long long>(hi) << 40) +
         (static_cast<unsigned long long>(mid) << 20) + lo;
}

// Adds x, in fixed point, to bucket b of a warpgroup's slices (see the file comment).
__device__ __forceinline__ void add_slices(uint32_t* hist, uint32_t b, float x) {
  const unsigned long long v = to_fixed(x);
  atomicAdd(hist + b, slice_lo(v));
  atomicAdd(hist + kMaxBktTable + b, slice_mid(v));
  atomicAdd(hist + 2 * kMaxBktTable + b, slice_hi(v));
}

// The rab gradient of one key-major tile (dK/dV kernel) from one thread's accumulators tY
// (dS / (alpha scale), 0 where masked; tile coordinates tc: (key, query)) into its
// warpgroup's diagonal sums and bucket slices `hist` (see the file comment); stage: this
// warp's kStageFloats, whose first row (pitch kStagePitch) ends up holding the warp's diagonal
// sums. Every thread of the warpgroup calls it, after a warpgroup barrier that follows the
// previous tile's flush; bwd_rab_flush_tile follows.
// The accumulators of an m64nNk16 wgmma: element e = 4 k + 2 h + b sits at tile row row0 + 8 h
// and column col0 + 8 k + b (row0 - row0 % 8 is the warp's first row, + 8 h its h-th group of 8
// rows), so elements k = 0..7, b = 0..1 of one h are the thread's key row0 + 8 h in ascending
// query order, and elements 2k, 2k + 1 two neighbouring queries.
template <int kBktPitch, int kStagePitch, typename TY, typename TC>
__device__ __forceinline__ void bwd_rab_grad(const TY& tY, const TC& tc, const BwdRabView& rv,
                                             float* stage, uint32_t* hist, float grad_mul) {
  using LY = std::decay_t<decltype(tY.layout())>;
  constexpr int kN = int(size(LY{}));
  constexpr int kK = kN / 4, kCols = 8 * kK;  // columns of the tile
  static_assert(kN % 4 == 0 && kCols + 16 <= kStagePitch, "m64nNk16 accumulators, N <= 64");
  const int lane = threadIdx.x & 31;
  // Diagonals: the thread's element (row + 8, c) (h = 1) is on the diagonal of (row, c - 8)
  // (h = 0); their sum goes to stage[r * kStagePitch + j] at column j = c' - r + 16 of the
  // folded column c' = c - 8 .. 63, so each stage column is one diagonal of the warp's 16 rows.
  const int row = get<0>(tc(0)) & 63, r = row & 7;
  const int c0 = get<1>(tc(0));  // even; element 4 k + 2 h + b at column c0 + 8 k + b
#pragma unroll
  for (int k = -1; k < kK; ++k) {
    float2 v = make_float2(0.f, 0.f);
    if (k >= 0) v = make_float2(tY(4 * k), tY(4 * k + 1));
    if (k + 1 < kK) {
      v.x += tY(4 * (k + 1) + 2);
      v.y += tY(4 * (k + 1) + 3);
    }
    *reinterpret_cast<float2*>(stage + r * (kStagePitch - 1) + c0 + 8 * k + 16) = v;
  }
  __syncwarp();
  // Column j (1 .. kCols + 15) holds key - query = 16 q + 16 - j (q: the warp in its
  // warpgroup); row rr holds it when its folded column j - 16 + rr lies in -8 .. kCols - 1.
  // The sums replace the first row once every lane has read the stage.
  constexpr int kT = (kCols + 15 + 31) / 32;
  float sums[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int j = 1 + lane + 32 * t;
    sums[t] = 0.f;
#pragma unroll
    for (int rr = 0; rr < 8; ++rr) {
      const int c = j - 16 + rr;
      if (c >= -8 && c < kCols) sums[t] += stage[rr * kStagePitch + j];
    }
  }
  __syncwarp();
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int j = 1 + lane + 32 * t;
    if (j <= kCols + 15) stage[j] = sums[t];
  }
  __syncwarp();
  // Time buckets: runs of equal bucket along each of the thread's two key rows (masked
  // elements, 0, continue a run), each finished run added to the slices (add_slices). The two
  // rows' runs advance side by side, and the buckets of column group k + 1 are read before the
  // atomics of group k: the compiler keeps a shared load behind an earlier shared atomic, so
  // reading each bucket where it is used left every load's latency exposed.
  auto load4 = [&](int k, uint32_t(&bk)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      bk[i] = rv.bkt[get<1>(tc(4 * k + i)) * kBktPitch + get<0>(tc(4 * k + i))];
  };
  uint32_t cur[4], nxt[4];
  load4(0, cur);
  uint32_t run_b[2] = {cur[0], cur[2]};
  float run[2] = {0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (k + 1 < kK) load4(k + 1, nxt);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v = tY(4 * k + 2 * h + b);
        const uint32_t bk = cur[2 * h + b];
        if (v != 0.f && bk != run_b[h]) {
          if (run[h] != 0.f) add_slices(hist, run_b[h], run[h] * grad_mul);
          run_b[h] = bk;
          run[h] = 0.f;
        }
        run[h] += v;
      }
    if (k + 1 < kK) {  // nxt holds the next group's buckets only then
#pragma unroll
      for (int i = 0; i < 4; ++i) cur[i] = nxt[i];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (run[h] != 0.f) add_slices(hist, run_b[h], run[h] * grad_mul);
}

// After bwd_rab_grad of every warp of the warpgroup and a warpgroup barrier: thread t (of 128)
// adds diagonal t (key - query = t - 63 within the warpgroup's 64 x 64 part, whose first key is
// tile row row0) summed over the 4 warps (diag: the warpgroup's first warp's stage; warp q's
// sums at q * kDiagPitch) to rv.pacc, and buckets t, t + 128 of the slices to p.drab_accum,
// zeroing them. The next tile's bwd_rab_grad must follow a warpgroup barrier.
template <int kDiagPitch>
__device__ __forceinline__ void bwd_rab_flush_tile(const HstuAttnParams& p, const BwdRabView& rv,
                                                   const float* diag, uint32_t* hist, int t,
                                                   int row0, float grad_mul) {
  if (t < 127) {
    // Warp q's column j holds key - query = 16 q + 16 - j (bwd_rab_grad).
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = 16 * q + 79 - t;
      if (j >= 1 && j <= 79) sum += diag[q * kDiagPitch + j];
    }
    if (sum != 0.f) atomicAdd(rv.pacc + (row0 + t - 63), to_fixed(sum * grad_mul));
  }
#pragma unroll
  for (int b = t; b < kMaxBktTable; b += 128) {
    const uint32_t lo = hist[b], mid = hist[kMaxBktTable + b], hi = hist[2 * kMaxBktTable + b];
    if ((lo | mid | hi) == 0) continue;
    hist[b] = hist[kMaxBktTable + b] = hist[2 * kMaxBktTable + b] = 0;
    const unsigned long long v = from_slices(lo, mid, hi);
    if (v != 0 && b < p.rab_time_len) atomicAdd(p.drab_accum + p.rab_pos_len + b, v);
  }
}

// ---- the fused form's gradient (BwdTraits::kRabFused) ------------------------------------------
// The fused d 128 kernel stores each visited tile's dS (dS / (alpha scale), 0 where masked: the
// [64 queries x 128 keys] image of its dS buffer, ds_byte_offset<false>: key rows of 64 queries,
// 16-byte chunks XOR-ed with key % 8) whole at rab_ds_tile(b, h, key block, query block) of
// p.rab_ds (sm90_bwd_rab_ds_bytes), and this kernel reduces them into p.drab_accum.
__device__ __forceinline__ unsigned char* rab_ds_tile(const HstuAttnParams& p, int b, int h, int kb,
                                                      int qb) {
  const int64_t tile =
      ((int64_t(b) * p.num_heads + h) * sm90_rab_ds_key_blocks(p.max_seqlen) + kb) *
          sm90_bwd_query_blocks(p.max_seqlen) +
      qb;
  return static_cast<unsigned char*>(p.rab_ds) + tile * kRabDsTileBytes;
}

// Dynamic shared memory of hstu_attn_rab_grad_sm90_kernel: the CTA's diagonal sums.
inline int rab_grad_sm90_smem(int max_seqlen) {
  return 4 * (sm90_bwd_query_blocks(max_seqlen) * 64 + 127);
}
// The CTAs a key block's query tiles are dealt to (tile qb to CTA qb mod kRabGradSplit): the
// key blocks of one sequence see up to 50 tiles each, which one CTA ran one after another.
constexpr int kRabGradSplit = 4;

// The rab gradient of the fused form from its stored dS: one CTA (256 threads) per (key block of
// 128 and a kRabGradSplit-th of its query blocks, head, sequence), over those of the block's
// visited query blocks (the fused kernel's tile_kind test) in ascending order, each tile's dS and
// buckets loaded into registers while the tile before is reduced:
//   - the tile into shared memory un-swizzled, key-major, pitch 66 elements (33 words: the
//     diagonal walks below read distinct banks), 4 chunks of 16 bytes a thread;
//   - time buckets: thread t takes query t % 64 and keys 32 (t / 64) .. + 31 of the tile, with
//     their buckets (two 16-byte loads of the query's bucket row), sums runs of equal bucket in
//     fp32 and adds each to the tile's bucket slices (add_slices: three native 32-bit shared
//     atomics; 64-bit shared atomics are compare-and-swap loops, which a warp's lanes, mostly
//     on one bucket, serialised: 305-317 us a call at 32 x 1024 x 4 x 128, H200); the last runs
//     summed over the warp's lanes of one bucket first. A bucket's runs in one query row are one
//     (buckets never increase along the keys of a row), so a tile's adds to a bucket sum less
//     than 256 x 2^20 a slice: the slices cannot overflow. After the tile, thread t folds bucket
//     t into the CTA's 64-bit sums (its own: no atomics) and zeroes it;
//   - diagonals: thread t < 191 sums diagonal key - query = t - 63 of the tile (four partial
//     sums over the queries, combined in a fixed order) and adds it to the CTA's sum of that
//     diagonal (one thread a diagonal, the tiles in order);
// then the CTA's sums go to p.drab_accum as fixed-point adds, one per diagonal and bucket.
// Deterministic: every fp32 sum runs in a fixed order, and the fixed-point adds commute.
template <typename T>
__global__ void __launch_bounds__(256)
    hstu_attn_rab_grad_sm90_kernel(const __grid_constant__ HstuAttnParams p) {
  constexpr int kPitch = 66;
  __shared__ __align__(16) T tile[128 * kPitch];
  __shared__ uint32_t slices[3 * kMaxBktTable];
  __shared__ unsigned long long hist[kMaxBktTable];
  extern __shared__ float diag[];  // diagonal key - query = dmin + x at x
  const int kb = blockIdx.x / kRabGradSplit, part = blockIdx.x % kRabGradSplit;
  const int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const SeqInfo si = seq_info(p, b);
  const int k0 = kb * 128;
  if (k0 >= si.L) return;
  const int nqb = sm90_bwd_query_blocks(p.max_seqlen);
  const int dmin = k0 - (nqb * 64 - 1), nd = nqb * 64 + 127;
  for (int x = t; x < nd; x += 256) diag[x] = 0.f;
  for (int x = t; x < kMaxBktTable; x += 256) hist[x] = 0;
  for (int x = t; x < 3 * kMaxBktTable; x += 256) slices[x] = 0;
  const float mul = p.alpha * p.scale;
  const uint8_t* sb = seq_buckets(p, si);
  const int64_t ld = p.rab_bkt_stride;
  const int q = t & 63, kk0 = (t >> 6) * 32;  // the time pass's query and keys
  // This CTA's next visited query block from qb on (nqb: none).
  auto next = [&](int qb) {
    while (qb < nqb && tile_kind(si, p, qb * 64, 64, k0, 128) == kTileSkip) qb += kRabGradSplit;
    return qb < nqb ? qb : nqb;
  };
  // Tile qb's dS chunks and this thread's buckets, into registers.
  uint4 ds[4], bk[2];
  auto load = [&](int qb) {
    const uint4* src = reinterpret_cast<const uint4*>(rab_ds_tile(p, b, h, kb, qb));
#pragma unroll
    for (int i = 0; i < 4; ++i) ds[i] = __ldcs(src + t + 256 * i);
    const int i = qb * 64 + q;
    bk[0] = bk[1] = make_uint4(0, 0, 0, 0);
    if (i < si.L && k0 + kk0 < si.L) {  // then k0 + kk0 < ld, a multiple of 16
      const uint8_t* row = sb + i * ld + k0 + kk0;
      bk[0] = __ldg(reinterpret_cast<const uint4*>(row));
      if (k0 + kk0 + 16 < ld) bk[1] = __ldg(reinterpret_cast<const uint4*>(row + 16));
    }
  };
  int qb = next(part);
  if (qb < nqb) load(qb);
#pragma unroll 1
  while (qb < nqb) {
    const int q0 = qb * 64;
    __syncthreads();  // the previous tile's reads done (and the zeroing, before the first)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = t + 256 * i, k = c >> 3, qc = (c & 7) ^ (k & 7);
      uint32_t* dst = reinterpret_cast<uint32_t*>(tile + k * kPitch + 8 * qc);
      dst[0] = ds[i].x;
      dst[1] = ds[i].y;
      dst[2] = ds[i].z;
      dst[3] = ds[i].w;
    }
    const uint32_t w[8] = {bk[0].x, bk[0].y, bk[0].z, bk[0].w, bk[1].x, bk[1].y, bk[1].z, bk[1].w};
    const int qn = next(qb + kRabGradSplit);
    if (qn < nqb) load(qn);  // in flight while this tile is reduced
    __syncthreads();
    {  // every lane (pairs outside the sequence hold dS 0 and bucket 0: no run to add)
      uint32_t rb = w[0] & 0xffu;
      float run = 0.f;
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        const uint32_t bkt = (w[e >> 2] >> (8 * (e & 3))) & 0xffu;
        const float v = static_cast<float>(tile[(kk0 + e) * kPitch + q]);
        if (bkt != rb) {
          if (run != 0.f) add_slices(slices, rb, run * mul);
          rb = bkt;
          run = 0.f;
        }
        run += v;
      }
      // The last runs, mostly one bucket over the warp's 32 queries: summed over the lanes of
      // each bucket first (the slices' integer sums, exact) and added once by the group's first
      // lane. Per-lane atomics on one address took most of the kernel's shared-memory pipe (ncu,
      // session 29: L1 81% busy, DRAM 22%).
      const unsigned long long f = run != 0.f ? to_fixed(run * mul) : 0ull;
      const unsigned grp = __match_any_sync(0xffffffffu, rb);
      const uint32_t lo = __reduce_add_sync(grp, slice_lo(f));
      const uint32_t mid = __reduce_add_sync(grp, slice_mid(f));
      const uint32_t hi = __reduce_add_sync(grp, slice_hi(f));
      if ((t & 31) == __ffs(grp) - 1 && (lo | mid | hi) != 0) {
        atomicAdd(slices + rb, lo);
        atomicAdd(slices + kMaxBktTable + rb, mid);
        atomicAdd(slices + 2 * kMaxBktTable + rb, hi);
      }
    }
    if (t < 191) {
      const int dl = t - 63;  // key - query within the tile
      const int qa = dl < 0 ? -dl : 0, qe = dl > 64 ? 128 - dl : 64;
      // Four partial sums (queries qa + 4 i + j in sum[j]), added in order at the end: the loads
      // of a step are independent (the single sum's add chain held them back).
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
      int r = qa;
#pragma unroll 1
      for (; r + 4 <= qe; r += 4)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          sum[j] += static_cast<float>(tile[(r + j + dl) * kPitch + r + j]);
      for (int j = 0; r + j < qe; ++j)
        sum[j] += static_cast<float>(tile[(r + j + dl) * kPitch + r + j]);
      diag[k0 + dl - q0 - dmin] += (sum[0] + sum[1]) + (sum[2] + sum[3]);
    }
    __syncthreads();  // the tile's slices complete
    for (int x = t; x < kMaxBktTable; x += 256) {
      uint32_t* sl = slices + x;
      const uint32_t lo = sl[0], mid = sl[kMaxBktTable], hi = sl[2 * kMaxBktTable];
      if ((lo | mid | hi) == 0) continue;
      sl[0] = sl[kMaxBktTable] = sl[2 * kMaxBktTable] = 0;
      hist[x] += from_slices(lo, mid, hi);
    }
    qb = qn;
  }
  __syncthreads();
  const int half = (p.rab_pos_len + 1) / 2;
  for (int x = t; x < nd; x += 256) {
    const float v = diag[x];
    if (v == 0.f) continue;
    int idx = half - 1 + dmin + x;
    idx = idx < 0 ? 0 : (idx >= p.rab_pos_len ? p.rab_pos_len - 1 : idx);
    atomicAdd(p.drab_accum + idx, to_fixed(v * mul));
  }
  for (int x = t; x < p.rab_time_len; x += 256)
    if (hist[x] != 0) atomicAdd(p.drab_accum + p.rab_pos_len + x, hist[x]);
}

}  // namespace hstu::cuda::attn::sm90
