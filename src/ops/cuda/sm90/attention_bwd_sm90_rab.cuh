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
// (2^-40: kRabFixedScale) integers: CTA-wide accumulators in shared memory, added to the call's
// (p.drab_accum, drab_finish_kernel of hstu_attention.cu) once per CTA. Integer adds are
// associative, so d_rab is bit-identical run to run whatever the order; every fp32 sum before
// the conversion runs in a fixed order. Per tile (bwd_rab_grad, while the dV / dK GEMMs run):
//   - diagonals: each warp writes its 16 x 64 part of fp32 dS, 8 rows at a time, skewed into a
//     private shared stage (element (r, c) at column c - r + 8), so each stage column is one
//     diagonal; a lane sums a column's 8 rows and adds it: one atomic per diagonal and warp, the
//     lanes of an atomic on distinct diagonals.
//   - time buckets: each thread sums runs of equal bucket along its two key rows in registers; a
//     run that ends is added by a warp-collective flush: one atomic per distinct bucket among the
//     lanes that flush, of their values summed exactly (fixed point, __reduce_add_sync).
// NOTE: no two lanes of one instruction add to the same shared address. The first form of this
// file added every thread's per-diagonal and per-run sums with 64-bit shared atomics whose lanes
// collided on hot buckets: 5.2x the rab-free backward time at 32 x 1024 x 4 x 128 (H200: 1.910
// vs 0.368 ms); the likely cause (not checked in SASS: no disassembler here) is that 64-bit shared
// atomics are compare-and-swap loops whose colliding lanes retry. This form: 3.2x (H100: 1.183 vs
// 0.370 ms; 0.510 ms with the bias and no gradient), still far from the bar; the gradient's
// per-element vote and the flush rounds near the diagonal (many buckets) are the suspects.
//
// Shared memory after the kernel's SharedStorage (bytes() for a call's max_seqlen):
//   [dK/dV only] time-bucket sums u64 [kMaxBktTable], diagonal sums u64 [pos_window],
//                per warp a stage f32 [8][kStagePitch],
//   bucket tiles u8 [warpgroups][2][64 queries][kBktPitch], time table f32 [kMaxBktTable],
//   position window f32 [pos_window] (pos_window = round_up(max_seqlen, kBN) + kBM).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"
#include "ops/cuda/sm90/attention_fwd_sm90.cuh"  // CuTe (get, size) in this namespace

namespace hstu::cuda::attn::sm90 {

// Dynamic shared memory one CTA may use on sm_90 (227 KB).
constexpr int kSm90MaxSmem = 227 * 1024;

// The consumer's view of the rab shared memory for one tile: bias of the element with query qi,
// key kj (tile coordinates: the tile's rows and columns in the kernel's orientation) =
// pw[kj - qi] + ttab[bkt[qi * kBktPitch + kj]] (bkt and pw pre-offset by the caller). With the
// gradient, pacc is the diagonal accumulator pre-offset like pw, tacc the bucket accumulator.
struct BwdRabView {
  const uint8_t* bkt = nullptr;
  const float* ttab = nullptr;
  const float* pw = nullptr;
  unsigned long long* pacc = nullptr;
  unsigned long long* tacc = nullptr;
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
  __host__ __device__ static int pos_window(int max_seqlen) {
    return (max_seqlen + kBN - 1) / kBN * kBN + kBM;
  }
  // The diagonal stage of one warp (bwd_rab_grad): 8 rows of 64 columns, skewed over 72; the odd
  // pitch spreads one STS.64 of a half warp (4 rows x 4 column pairs) over all 32 banks.
  static constexpr int kStagePitch = 73;
  static constexpr int kStageFloats = 8 * kStagePitch;
  static constexpr int kStageBytes = kDkdv ? 4 * kStageFloats * 4 * kWGs : 0;  // 4 warps a WG
  static constexpr int acc_bytes(int window) {
    return kDkdv ? 8 * (kMaxBktTable + window) + kStageBytes : 0;
  }
  static int bytes(int max_seqlen) {
    const int w = pos_window(max_seqlen);
    return acc_bytes(w) + kBktBytes + 4 * kMaxBktTable + 4 * w;
  }
  struct Ptrs {
    unsigned long long* tacc;  // dK/dV only
    unsigned long long* pacc;  // dK/dV only
    float* stage;              // dK/dV only: per warp kStageFloats
    uint8_t* bkt;              // 16-byte aligned (cp.async)
    float* ttab;
    float* pw;
  };
  // base: 16-byte aligned, right after the SharedStorage.
  __device__ static Ptrs carve(unsigned char* base, int max_seqlen) {
    const int w = pos_window(max_seqlen);
    Ptrs r;
    r.tacc = reinterpret_cast<unsigned long long*>(base);
    r.pacc = r.tacc + kMaxBktTable;
    r.stage = reinterpret_cast<float*>(r.pacc + w);
    r.bkt = base + acc_bytes(w);  // a multiple of 16: w is a multiple of 64, so is kStageBytes
    r.ttab = reinterpret_cast<float*>(r.bkt + kBktBytes);
    r.pw = r.ttab + kMaxBktTable;
    return r;
  }
  // The tables and zeroed accumulators; every thread of the CTA, before its first barrier.
  // dmin: the diagonal j - i of window entry 0.
  __device__ static void fill(const Ptrs& s, const HstuAttnParams& p, int max_seqlen, int dmin,
                              int tid, int nthreads) {
    const int w = pos_window(max_seqlen), half = (p.rab_pos_len + 1) / 2;
    for (int k = tid; k < kMaxBktTable; k += nthreads)
      s.ttab[k] = k < p.rab_time_len ? p.rab_time[k] : 0.f;
    for (int k = tid; k < w; k += nthreads) {
      int idx = half - 1 + dmin + k;
      idx = idx < 0 ? 0 : (idx >= p.rab_pos_len ? p.rab_pos_len - 1 : idx);
      s.pw[k] = __ldg(p.rab_pos + idx);
    }
    if constexpr (kDkdv) {
      for (int k = tid; k < kMaxBktTable + w; k += nthreads) s.tacc[k] = 0;
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
  // Adds the CTA's accumulators to the call's (p.drab_accum: positions, then time buckets);
  // the consumer threads (t of n) after the barrier that follows their last tile.
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
      for (int k = t; k < p.rab_time_len; k += n) {
        const unsigned long long v = s.tacc[k];
        if (v != 0) atomicAdd(p.drab_accum + p.rab_pos_len + k, v);
      }
    }
  }
};

// The bias of tile element (qi, kj) (see BwdRabView).
template <int kBktPitch>
__device__ __forceinline__ float bwd_rab_bias(const BwdRabView& rv, int qi, int kj) {
  return rv.pw[kj - qi] + rv.ttab[rv.bkt[qi * kBktPitch + kj]];
}

// The warp-collective flush of time-bucket runs: each lane with `need` adds `run` (times
// grad_mul, in fixed point) to tacc[bucket]. One atomic per distinct bucket among those lanes, by
// its first lane, of the lanes' values summed exactly (three 22 / 21 / 21-bit slices of the
// 64-bit integers, each summed with __reduce_add_sync over the whole warp). Every lane calls it.
__device__ __forceinline__ void warp_flush_time(bool need, uint32_t bucket, float run,
                                                float grad_mul, unsigned long long* tacc) {
  const unsigned long long f = need ? to_fixed(run * grad_mul) : 0ull;
  const uint32_t c0 = uint32_t(f) & 0x3fffffu, c1 = uint32_t(f >> 22) & 0x1fffffu,
                 c2 = uint32_t(f >> 43);
  const int lane = threadIdx.x & 31;
  uint32_t pend = __ballot_sync(0xffffffffu, need);
  while (pend) {  // warp-uniform
    const int leader = __ffs(pend) - 1;
    const uint32_t b = __shfl_sync(0xffffffffu, bucket, leader);
    const bool mine = need && bucket == b;
    const uint32_t s0 = __reduce_add_sync(0xffffffffu, mine ? c0 : 0u);
    const uint32_t s1 = __reduce_add_sync(0xffffffffu, mine ? c1 : 0u);
    const uint32_t s2 = __reduce_add_sync(0xffffffffu, mine ? c2 : 0u);
    const unsigned long long sum = s0 + (static_cast<unsigned long long>(s1) << 22) +
                                   (static_cast<unsigned long long>(s2) << 43);
    if (lane == leader && sum != 0) atomicAdd(tacc + b, sum);
    pend &= ~__ballot_sync(0xffffffffu, mine);
  }
}

// The rab gradient of one key-major tile (dK/dV kernel) from one thread's accumulators tY
// (dS / (alpha scale), 0 where masked; tile coordinates tc: (key, query)), added to rv.pacc /
// rv.tacc as alpha scale dS in fixed point (see the file comment). stage: this warp's
// kStageFloats. Every thread of the warpgroup calls it (warp collectives).
// The accumulators of an m64nNk16 wgmma: element e = 4 k + 2 h + b sits at tile row row0 + 8 h
// and column col0 + 8 k + b (row0 - row0 % 8 is the warp's first row, + 8 h its h-th group of 8
// rows), so elements k = 0..7, b = 0..1 of one h are the thread's key row0 + 8 h in ascending
// query order, and elements 2k, 2k + 1 two neighbouring queries.
template <int kBktPitch, int kStagePitch, typename TY, typename TC>
__device__ __forceinline__ void bwd_rab_grad(const TY& tY, const TC& tc, const BwdRabView& rv,
                                             float* stage, float grad_mul) {
  using LY = std::decay_t<decltype(tY.layout())>;
  constexpr int kN = int(size(LY{}));
  constexpr int kK = kN / 4, kCols = 8 * kK;  // columns of the tile
  static_assert(kN % 4 == 0 && kCols + 8 <= kStagePitch, "m64nNk16 accumulators, N <= 64");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Diagonals of rows g0 .. g0 + 7: element (g0 + r, c) at stage[r * kStagePitch + c - r + 8].
    const int row = get<0>(tc(2 * h)), g0 = row & ~7, r = row - g0;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const int e = 4 * k + 2 * h, c = get<1>(tc(e));  // even
      *reinterpret_cast<float2*>(stage + r * (kStagePitch - 1) + c + 8) =
          make_float2(tY(e), tY(e + 1));
    }
    __syncwarp();
    // Column j = c - r + 8 (1 .. kCols + 7) is diagonal key - query = g0 - j + 8; row r holds
    // it when 0 <= j - 8 + r < kCols.
#pragma unroll
    for (int t = 0; t < (kCols + 7 + 31) / 32; ++t) {
      const int j = 1 + lane + 32 * t;
      float sum = 0.f;
#pragma unroll
      for (int rr = 0; rr < 8; ++rr) {
        const int c = j - 8 + rr;
        if (c >= 0 && c < kCols) sum += stage[rr * kStagePitch + j];
      }
      if (j <= kCols + 7 && sum != 0.f) atomicAdd(rv.pacc + (g0 + 8 - j), to_fixed(sum * grad_mul));
    }
    __syncwarp();
  }
  // Time buckets: runs of equal bucket along each of the thread's two key rows (masked
  // elements, 0, continue a run); a run that ends goes through the warp-collective flush.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = get<0>(tc(2 * h));
    uint32_t run_b = rv.bkt[get<1>(tc(2 * h)) * kBktPitch + key];
    float run = 0.f;
#pragma unroll
    for (int k = 0; k < kK; ++k)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int e = 4 * k + 2 * h + b;
        const float v = tY(e);
        const uint32_t bk = rv.bkt[get<1>(tc(e)) * kBktPitch + key];
        const bool brk = v != 0.f && bk != run_b;
        if (__any_sync(0xffffffffu, brk && run != 0.f))
          warp_flush_time(brk && run != 0.f, run_b, run, grad_mul, rv.tacc);
        if (brk) {
          run_b = bk;
          run = 0.f;
        }
        run += v;
      }
    warp_flush_time(run != 0.f, run_b, run, grad_mul, rv.tacc);
  }
}

}  // namespace hstu::cuda::attn::sm90
