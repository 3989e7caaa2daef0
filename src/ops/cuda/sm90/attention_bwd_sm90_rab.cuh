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
// alpha scale dS[i, j]. Each thread first sums its own accumulator elements in registers — per
// diagonal (the wgmma accumulator layout puts its 32 elements of a 64 x 64 tile on 18 diagonals)
// and per run of equal time bucket along each of its two key rows — then adds those sums, as
// 64-bit fixed-point integers (2^-40: kRabFixedScale), to CTA-wide shared accumulators (one per
// diagonal of the CTA's window, one per time bucket); a warp whose lanes end a row on the same
// bucket adds one shuffle-reduced sum. The accumulators go to the call's global ones
// (p.drab_accum, drab_finish_kernel of hstu_attention.cu) once per CTA, with integer atomics.
// Integer adds are associative: d_rab is bit-identical run to run whatever the order.
//
// Shared memory after the kernel's SharedStorage (bytes() for a call's max_seqlen):
//   [dK/dV only] time-bucket sums u64 [kMaxBktTable], diagonal sums u64 [pos_window]
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
  static constexpr int acc_bytes(int window) { return kDkdv ? 8 * (kMaxBktTable + window) : 0; }
  static int bytes(int max_seqlen) {
    const int w = pos_window(max_seqlen);
    return acc_bytes(w) + kBktBytes + 4 * kMaxBktTable + 4 * w;
  }
  struct Ptrs {
    unsigned long long* tacc;  // dK/dV only
    unsigned long long* pacc;  // dK/dV only
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
    r.bkt = base + acc_bytes(w);  // a multiple of 16: w is a multiple of 64
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

// Sum of a fixed-point value over the 32 lanes of a warp (exact: integers).
__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The rab gradient of one key-major tile (dK/dV kernel) from one thread's accumulators tY
// (dS / (alpha scale), 0 where masked; tile coordinates tc: (key, query)), added to rv.pacc /
// rv.tacc as alpha scale dS in fixed point. Every thread of the warpgroup calls it (the
// end-of-row sums are warp collectives).
// The accumulators of an m64nNk16 wgmma: element e = 4 k + 2 h + b sits at tile row
// row0 + 8 h and column col0 + 8 k + b, so its diagonal (key - query) is
// row0 - col0 + 8 (h - k) - b: 18 distinct diagonals, one register sum each; and elements
// k = 0..7, b = 0..1 of one h are the thread's keys row0 + 8 h in ascending query order.
template <int kBktPitch, typename TY, typename TC>
__device__ __forceinline__ void bwd_rab_grad(const TY& tY, const TC& tc, const BwdRabView& rv,
                                             float grad_mul) {
  using LY = std::decay_t<decltype(tY.layout())>;
  constexpr int kN = int(size(LY{}));
  static_assert(kN % 4 == 0 && kN / 4 <= 8, "m64nNk16 accumulators, N <= 64");
  constexpr int kK = kN / 4;
  // Diagonal sums: bin (h - k + kK - 1, b).
  float bin[kK + 1][2];
#pragma unroll
  for (int m = 0; m <= kK; ++m) bin[m][0] = bin[m][1] = 0.f;
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    const int b = e & 1, h = (e >> 1) & 1, k = e >> 2;
    bin[h - k + kK - 1][b] += tY(e);
  }
#pragma unroll
  for (int m = 0; m <= kK; ++m) {
    // A representative element of bin m: h = 0, k = kK - 1 - m (m < kK), else h = 1, k = 0.
    const int e0 = m < kK ? 4 * (kK - 1 - m) : 2;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      if (bin[m][b] != 0.f) {
        const int key = get<0>(tc(e0 + b)), query = get<1>(tc(e0 + b));
        atomicAdd(rv.pacc + (key - query), to_fixed(bin[m][b] * grad_mul));
      }
    }
  }
  // Time-bucket sums: runs of equal bucket along each of the thread's two key rows (masked
  // elements, 0, continue the run).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key0 = get<0>(tc(2 * h)), q0 = get<1>(tc(2 * h));
    uint32_t run_b = rv.bkt[q0 * kBktPitch + key0];
    float run = 0.f;
#pragma unroll
    for (int k = 0; k < kK; ++k)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int e = 4 * k + 2 * h + b;
        const float v = tY(e);
        const uint32_t bk = rv.bkt[get<1>(tc(e)) * kBktPitch + get<0>(tc(e))];
        if (v != 0.f && bk != run_b) {
          if (run != 0.f) atomicAdd(rv.tacc + run_b, to_fixed(run * grad_mul));
          run_b = bk;
          run = 0.f;
        }
        run += v;
      }
    // The last runs: one warp-reduced add when every lane with a sum ends on lane 0's bucket.
    const unsigned long long f = run != 0.f ? to_fixed(run * grad_mul) : 0ull;
    const uint32_t b0 = __shfl_sync(0xffffffffu, run_b, 0);
    if (__all_sync(0xffffffffu, f == 0 || run_b == b0)) {
      const unsigned long long sum = warp_sum_u64(f);
      if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd(rv.tacc + b0, sum);
    } else if (f != 0) {
      atomicAdd(rv.tacc + run_b, f);
    }
  }
}

}  // namespace hstu::cuda::attn::sm90
