// attention_bwd.cuh — the HSTU attention backward kernels (FlashAttention-2 shape, no softmax).
//
//   S  = alpha (Q K^T + rab)  (recomputed)     P  = SiLU(S)            (1/N scale applied last)
//   dP = dO V^T                                dS = dP * SiLU'(S)      (alpha, 1/N applied last)
//   dV = scale P^T dO     dK = alpha scale dS^T Q     dQ = alpha scale dS K
//   d_rab[i,j] = alpha scale dS[i,j], summed into the position / time-bucket tables.
//
// dkdv kernel: one CTA per block of kBlockN keys of one (sequence, head), looping over the
// visible query blocks (two-stage cp.async Q/dO pipeline). Each warp owns a 16-key slab and
// computes the *transposed* scores S^T = K Q^T and dP^T = V dO^T, so P^T and dS^T come out of
// the accumulators already in the A-operand layout of dV += P^T dO and dK += dS^T Q: nothing but
// dS^T (for dQ) goes through shared memory. dQ is either accumulated here with fp32 atomics into
// a scratch buffer (then converted), or — deterministic mode — computed by a second, query-major
// kernel (dq kernel: S, dP, dQ += dS K; no atomics), at the price of recomputing two GEMMs. The
// two kernels are independent and run concurrently on two streams, which fills the GPU for short
// sequences. (Fusing them into one grid measured slower on an H100: 0.205 vs 0.136 ms at
// 128 x 200, 2 x 25; the fused kernel takes the larger register count of the two.)
// d_rab: each slab warp writes its tile of alpha scale dS^T to a private shared slab; the warp
// then sums runs of equal time bucket down each query column (one lane per column) into per-CTA
// time-bucket counters (hist_add: 32-bit slices of the 64-bit fixed-point (2^-40) value, native
// shared atomics), and after the tile's barrier every thread sums one diagonal of the whole tile
// (rab_tile_diagonals) and adds it to the global fixed-point accumulators; the counters go there
// at the CTA's end. Sums in a fixed order plus order-independent integer adds: deterministic in
// both modes. (Adding every element with its own shared atomic serialised on the few hot
// buckets: ~5x the rab-free time at the MovieLens shape.)
//
// The shaping decision: keep P^T and dS^T in registers by choosing the key-major orientation for
// every per-warp GEMM; the price is that a warp's dK/dV accumulators cover a whole head width,
// which for d = 256 is split over two warps sharing a slab (kSplitD = 2, S/dP recomputed twice).
#pragma once

#include "ops/cuda/sm80/attention_launch.cuh"
#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"

namespace hstu::cuda::attn {

// Element-wise step of the backward on one score tile held as accumulators.
//   in:  s = Q.K (without rab), dp = dO.V
//   out: s = SiLU(S) (= P / scale), dp = dP * SiLU'(S) (= dS / (alpha scale)); masked -> 0.

// kKeyMajor: accumulator rows are keys (dkdv kernel) instead of queries (dq kernel); the warp's
// rows are tile rows wrow.. and sequence positions r0.., its columns c0... bias: the warp's rows
// of the tile's rab (pitch kPitch, same orientation), read only with kHasRab, or with kDirect
// (query-major only) bk: the warp's rows of the staged buckets (pitch kBkPitch; rab_pair with the
// time table ttab); mask: the tile's
// mask_tile bits (same orientation), read only for partial tiles. With slab_ds (key-major only),
// alpha scale dS (0 where masked) also goes to slab_ds[row][col] (pitch kSlabPitch) for
// rab_slab_runs and rab_tile_diagonals. kFast (bf16): SiLU and SiLU' in the tanh form
// (silu_and_grad_fast_half, one MUFU op a score instead of two; the bias enters before the
// scale, so rab takes it too).
template <bool kKeyMajor, bool kHasRab, int kKind, int kNT, int kPitch, int kSlabPitch = kPitch,
          bool kDirect = false, int kBkPitch = 0, bool kFast = false>
__device__ __forceinline__ void bwd_scores(float (&s)[1][kNT][4], float (&dp)[1][kNT][4],
                                           const HstuAttnParams& p, const float* bias,
                                           const uint32_t* mask, int wrow, int r0, int c0, int lane,
                                           float* slab_ds = nullptr, const uint8_t* bk = nullptr,
                                           const float* ttab = nullptr) {
  static_assert(!(kDirect && kKeyMajor), "staged buckets are query-major");
  const float grad_mul = p.alpha * p.scale, half_alpha = 0.5f * p.alpha;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int rr = lane >> 2, cc = nt * 8 + (lane & 3) * 2;  // fragment rows rr, rr + 8
    float2 rab[2] = {};
    if constexpr (kHasRab) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        if constexpr (kDirect) {
          rab[hf] =
              rab_pair(p, ttab, bk + (rr + hf * 8) * kBkPitch + cc, r0 + rr + hf * 8, c0 + cc);
        } else {
          rab[hf] = *reinterpret_cast<const float2*>(bias + (rr + hf * 8) * kPitch + cc);
        }
      }
    }
    float rv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = rr + (e >> 1) * 8, c = cc + (e & 1);  // in the warp's block
      const int i = kKeyMajor ? c0 + c : r0 + r, j = kKeyMajor ? r0 + r : c0 + c;
      const bool ok = tile_visible<kKind, mask_words<kNT * 8>()>(mask, wrow + r, c, i, j);
      float x = s[0][nt][e];
      if constexpr (kHasRab) x += (e & 1) ? rab[e >> 1].y : rab[e >> 1].x;
      float silu, dsilu;
      if constexpr (kFast) {
        silu_and_grad_fast_half(x * half_alpha, silu, dsilu);
      } else {
        silu_and_grad(x * p.alpha, silu, dsilu);
      }
      const float ds = dp[0][nt][e] * dsilu;
      s[0][nt][e] = ok ? silu : 0.f;
      dp[0][nt][e] = ok ? ds : 0.f;
      rv[e] = ok ? ds * grad_mul : 0.f;
    }
    if constexpr (kHasRab && kKeyMajor) {
      if (slab_ds) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          slab_ds[(rr + (e >> 1) * 8) * kSlabPitch + cc + (e & 1)] = rv[e];
      }
    }
  }
}

// Time-bucket sums of the dK/dV kernel: per CTA, four 32-bit shared counters per bucket, each
// adding a 16-bit slice of the fixed-point value with native shared atomics, where 64-bit shared
// adds are compare-and-swap loops whose colliding lanes retry. At most 65536 adds between
// flushes keep the three low slices' sums below 2^32; the top slice's only matters modulo 2^16.
// Measured with rab_tile_diagonals (H200, ncu, 128 x 200 x 2 x 25, deterministic): the dK/dV
// kernel 116 -> 110 us (45 us without rab): the gradient's atomics were not its main cost.
constexpr int kHistBuckets = kMaxTimeTable + 1;
__device__ __forceinline__ void hist_add(uint32_t* hist, int b, float x) {
  const unsigned long long v = to_fixed(x);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    atomicAdd(hist + k * kHistBuckets + b, static_cast<uint32_t>(v >> (16 * k)) & 0xffffu);
}
// Adds the slices back together into p.drab_accum's time entries and zeroes them (all threads).
__device__ __forceinline__ void hist_flush(const HstuAttnParams& p, uint32_t* hist, int tid,
                                           int nthreads) {
  for (int b = tid; b < p.rab_time_len; b += nthreads) {
    unsigned long long v = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v += static_cast<unsigned long long>(hist[k * kHistBuckets + b]) << (16 * k);
      hist[k * kHistBuckets + b] = 0;
    }
    if (v != 0) atomicAdd(p.drab_accum + p.rab_pos_len + b, v);
  }
}

// Walks the query columns of one warp's rab slab (16 keys x kBM queries of alpha scale dS^T,
// pitch kSlabPitch; slab_bkt: the same rows of the tile's time buckets, pitch kBktPitch), lane l
// taking columns l (+32 ...) down the 16 keys, and adds each run of equal bucket to hist
// (hist_add) or, without hist (time tables of more than kHistBuckets entries), to the global
// accumulators.
template <int kBM, int kSlabPitch, int kBktPitch>
__device__ __forceinline__ void rab_slab_runs(const HstuAttnParams& p, const float* slab_ds,
                                              const uint16_t* slab_bkt, int lane, uint32_t* hist) {
  __syncwarp();
  auto add = [&](int b, float x) {
    if (hist) {
      hist_add(hist, b, x);
    } else {
      atomicAdd(p.drab_accum + p.rab_pos_len + b, to_fixed(x));
    }
  };
  for (int cc = lane; cc < kBM; cc += 32) {
    int run_bucket = slab_bkt[cc];
    float run = 0.f;
#pragma unroll
    for (int rr = 0; rr < 16; ++rr) {
      const int b = slab_bkt[rr * kBktPitch + cc];
      if (b != run_bucket) {
        if (run != 0.f) add(run_bucket, run);
        run_bucket = b;
        run = 0.f;
      }
      run += slab_ds[rr * kSlabPitch + cc];
    }
    if (run != 0.f) add(run_bucket, run);
  }
}

// Sums the diagonals of a tile's alpha scale dS^T (kRows keys from n0 x kCols queries from m0,
// element (r, c) at ds[r * kPitch + c]) and adds each to its position entry of p.drab_accum; all
// threads, after a barrier that follows every warp's slab. Thread t takes diagonal r - c =
// t - (kCols - 1), four partial sums in a fixed order; kPitch is odd, so the lanes of one read hit
// distinct banks.
template <int kRows, int kCols, int kPitch, int kThreads>
__device__ __forceinline__ void rab_tile_diagonals(const HstuAttnParams& p, const float* ds, int n0,
                                                   int m0, int tid) {
  static_assert(kPitch % 2 == 1, "odd pitch: conflict-free diagonal reads");
  const int half = (p.rab_pos_len + 1) / 2;
  for (int t = tid; t < kRows + kCols - 1; t += kThreads) {
    const int r0 = t >= kCols - 1 ? t - (kCols - 1) : 0, c0 = r0 - t + kCols - 1;
    const int n = min(kRows - r0, kCols - c0);
    const float* e = ds + r0 * kPitch + c0;
    float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int k0 = 0; k0 < n; k0 += 4)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (k0 + q < n) part[q] += e[(k0 + q) * (kPitch + 1)];
    const float sum = (part[0] + part[1]) + (part[2] + part[3]);
    if (sum != 0.f) {  // key - query = n0 - m0 + t - (kCols - 1)
      int idx = half - 1 + n0 - m0 + t - (kCols - 1);
      idx = idx < 0 ? 0 : (idx >= p.rab_pos_len ? p.rab_pos_len - 1 : idx);
      atomicAdd(p.drab_accum + idx, to_fixed(sum));
    }
  }
}

__device__ __forceinline__ void atomic_add2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// ---- dK, dV (and d_rab, and dQ with atomics): key-major ---------------------------------------

template <typename T, int kHeadDim, bool kHasRab, bool kAtomicDq>
struct DkdvKernel {
  using Cfg = std::conditional_t<kHasRab, typename AttnTiles<kHeadDim>::DkdvRab,
                                 typename AttnTiles<kHeadDim>::Dkdv>;
  static constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kHD = kHeadDim;
  static constexpr int kNWarps = Cfg::kNWarps, kThreads = Cfg::kNThreads;
  static constexpr int kStages = Cfg::kStages, kSplitD = Cfg::kSplitD;
  static constexpr int kSlabs = kBN / 16;
  static_assert(kSlabs * kSplitD == kNWarps, "warps = key slabs x d splits");
  static_assert(kStages == 2, "the Q / dO pipeline is two-stage");
  static constexpr int kDW = kHD / kSplitD;  // dK / dV columns per warp
  static constexpr int kMT = kBM / 8;        // accumulator atoms over the query block
  // dQ = dS K partition: kQWarpsM x kQWarpsD warps, 16 kQMT query rows x kQDW columns each.
  // Two m atoms per warp where the columns allow: every K fragment then feeds two MMAs, and this
  // kernel is bound by shared-memory reads (ldmatrix), not by the tensor cores. At d = 128
  // (64 x 128 tile, 8 warps) that is 32 instead of 40 ldmatrix per warp for the dQ GEMM.
  static constexpr int dq_mt() {
    if (kBM % 32 != 0 || kNWarps % (kBM / 32) != 0) return 1;
    return (kHD / (kNWarps / (kBM / 32))) % 16 == 0 ? 2 : 1;
  }
  static constexpr int kQMT = dq_mt();
  static constexpr int kQWarpsM = kNWarps < kBM / (16 * kQMT) ? kNWarps : kBM / (16 * kQMT);
  static constexpr int kQWarpsD = kNWarps / kQWarpsM;
  static constexpr int kQDW = kHD / kQWarpsD;
  static_assert(kQWarpsM * 16 * kQMT == kBM && kQDW % 16 == 0, "dQ warp partition");
  // Shared memory: K, V [kBN][kHD] | (Q, dO [kBM][kHD]) x kStages | dS^T [kBN][kBM] |
  // partial-tile mask [kBN][kBM / 32] u32 | rab: thresholds, per-CTA time-bucket counters
  // [4][kHistBuckets] u32, the tile's bias [kBN][kRabPitch] f32, per slab warp a slab of alpha
  // scale dS^T [16][kSlabPitch] f32, and the tile's time buckets [kBN][kRabPitch] u16 (keys x
  // queries).
  static constexpr int kKVElems = kBN * kHD, kQElems = kBM * kHD;
  static constexpr int kDSElems = kAtomicDq ? kBN * kBM : 0;
  static constexpr int kRabPitch = rab_pitch<kBM>();
  // Odd (rab_tile_diagonals); kBM + 9 (fewer store conflicts) took the atomic-dQ kernel at d 32
  // past 4 CTAs' worth of shared memory per SM.
  static constexpr int kSlabPitch = kBM + 5;
  static constexpr int kRabSlab = 16 * kSlabPitch;  // elements per slab warp
  // Tiles between flushes of the time-bucket counters: at most 65536 adds (one per element).
  static constexpr int kHistTiles = 65536 / (kBM * kBN);
  static constexpr int kMaskWords = kBN * mask_words<kBM>();
  static constexpr size_t kTileBytes =
      sizeof(T) * (2 * kKVElems + 2 * kStages * kQElems + kDSElems) + sizeof(uint32_t) * kMaskWords;
  // Then (rab, 16-byte aligned) two stages of precomputed buckets [kBM][kBN + 16] u8 (queries x
  // keys), loaded with Q / dO.
  static constexpr size_t kSmemBytes =
      kTileBytes +
      (kHasRab ? sizeof(int64_t) * (kMaxTimeTable + 1) + sizeof(uint32_t) * 4 * kHistBuckets +
                     (sizeof(float) + sizeof(uint16_t)) * kBN * kRabPitch +
                     sizeof(float) * kSlabs * kRabSlab + 16 + 2 * bkt_tile_bytes<kBM, kBN>()
               : 0);
};

template <typename T, int kHeadDim, bool kHasRab, bool kAtomicDq, bool kVecIn>
__global__ void __launch_bounds__(DkdvKernel<T, kHeadDim, kHasRab, kAtomicDq>::kThreads,
                                  DkdvKernel<T, kHeadDim, kHasRab, kAtomicDq>::Cfg::kMinCtas)
    hstu_attn_dkdv_kernel(const __grid_constant__ HstuAttnParams p) {
  using K = DkdvKernel<T, kHeadDim, kHasRab, kAtomicDq>;
  constexpr int kBM = K::kBM, kBN = K::kBN, kHD = K::kHD, kThreads = K::kThreads;
  constexpr int kMT = K::kMT, kDW = K::kDW, kQDW = K::kQDW;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + K::kKVElems;
  T* sQdO = sV + K::kKVElems;  // stage st: Q at sQdO + 2 st kQElems, dO right after
  T* sdS = sQdO + 2 * K::kStages * K::kQElems;
  uint32_t* s_mask = reinterpret_cast<uint32_t*>(sdS + K::kDSElems);
  int64_t* s_thr = reinterpret_cast<int64_t*>(smem_raw + K::kTileBytes);
  uint32_t* s_hist = reinterpret_cast<uint32_t*>(s_thr + kMaxTimeTable + 1);
  float* s_bias = reinterpret_cast<float*>(s_hist + 4 * kHistBuckets);
  float* slab_ds = s_bias + kBN * K::kRabPitch;
  uint16_t* s_bkt = reinterpret_cast<uint16_t*>(slab_ds + K::kSlabs * K::kRabSlab);
  uint8_t* s_bk = align16(s_bkt + kBN * K::kRabPitch);  // rab: 2 stages of precomputed buckets

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int slab = warp % K::kSlabs, dh = warp / K::kSlabs;
  const CtaCoords cta = cta_coords(p);  // key blocks: the first one is the heaviest
  const int n_block = cta.j, h = cta.h;
  const SeqInfo si = seq_info(p, cta.b);
  const int n0 = n_block * kBN;
  if (n0 >= si.L) return;

  const T* gk = p.k.head<const T>(si.start + n0, h);
  const T* gv = p.v.head<const T>(si.start + n0, h);
  const int rows_k = min(kBN, si.L - n0);

  load_tile<kBN, kHD, kThreads, kVecIn>(sK, gk, p.k.row_stride, rows_k, p.d_qk, p.k.vec, tid);
  load_tile<kBN, kHD, kThreads, kVecIn>(sV, gv, p.v.row_stride, rows_k, p.d_v, p.v.vec, tid);

  const bool rab_grad = kHasRab && p.drab_accum != nullptr;
  uint32_t* hist = nullptr;  // null: time-bucket sums go straight to global
  // With kSplitD = 2 both warps of a slab compute the same dS: only the first adds d_rab.
  float* warp_slab_ds = rab_grad && dh == 0 ? slab_ds + slab * K::kRabSlab : nullptr;
  int hist_tiles = 0;  // tiles added to hist since its last flush
  if constexpr (kHasRab) {
    if (p.rab_time_len <= kHistBuckets) hist = s_hist;
    for (int k = tid; k < 4 * kHistBuckets; k += kThreads) s_hist[k] = 0;
  }

  const int m_blocks = (si.L + kBM - 1) / kBM;
  auto next_visible = [&](int m) {
    while (m < m_blocks && tile_kind(si, p, m * kBM, kBM, n0, kBN) == kTileSkip) ++m;
    return m;
  };
  const T* gq = p.q.head<const T>(si.start, h);
  const T* gdo = p.d_o.head<const T>(si.start, h);
  auto stage = [&](int st) { return sQdO + 2 * st * K::kQElems; };  // Q; dO follows
  auto load_qdo = [&](int m, int st) {
    const int rows = min(kBM, si.L - m * kBM);
    load_tile<kBM, kHD, kThreads, kVecIn>(stage(st), gq + int64_t(m) * kBM * p.q.row_stride,
                                          p.q.row_stride, rows, p.d_qk, p.q.vec, tid);
    load_tile<kBM, kHD, kThreads, kVecIn>(stage(st) + K::kQElems,
                                          gdo + int64_t(m) * kBM * p.d_o.row_stride,
                                          p.d_o.row_stride, rows, p.d_v, p.d_o.vec, tid);
    if constexpr (kHasRab)
      load_bkt_tile<kBM, kBN, kThreads>(p, si, m * kBM, n0, s_bk + st * bkt_tile_bytes<kBM, kBN>(),
                                        tid);
  };
  int m = next_visible(0);
  if (m < m_blocks) load_qdo(m, 0);
  cp_async_commit();
  if constexpr (kHasRab) load_rab_tables<kThreads>(p, s_thr, tid);

  const int krow = slab * 16;  // the warp's first key row in the block

  float acc_dk[1][kDW / 8][4], acc_dv[1][kDW / 8][4];
  zero(acc_dk);
  zero(acc_dv);
  int st = 0;
  while (m < m_blocks) {
    const int m_next = next_visible(m + 1);
    cp_async_wait<0>();
    __syncthreads();
    if (m_next < m_blocks) load_qdo(m_next, st ^ 1);
    cp_async_commit();
    const T* sQ = stage(st);
    const T* sdO = sQ + K::kQElems;
    const int m0 = m * kBM;

    // The bias, buckets and partial-tile mask of this tile (keys x queries).
    const int kind = tile_kind(si, p, m0, kBM, n0, kBN);
    if constexpr (kHasRab)
      rab_tile<kBN, kBM, kThreads, true>(p, si, s_thr, n0, m0, s_bias, rab_grad ? s_bkt : nullptr,
                                         tid, s_bk + st * bkt_tile_bytes<kBM, kBN>());
    if (kind == kTilePartial) mask_tile<kBN, kBM, kThreads, true>(p, si, n0, m0, s_mask, tid);

    float s[1][kMT][4], dp[1][kMT][4];
    zero(s);
    zero(dp);
    gemm_nt<T, 1, kMT, kHD, kHD, kHD>(s, sK, krow, sQ, 0, lane);    // S^T  = K Q^T
    gemm_nt<T, 1, kMT, kHD, kHD, kHD>(dp, sV, krow, sdO, 0, lane);  // dP^T = V dO^T
    if (kHasRab || kind == kTilePartial) __syncthreads();
    const float* bias = s_bias + krow * K::kRabPitch;
    with_tile_kind(kind, [&](auto kd) {
      bwd_scores<true, kHasRab, decltype(kd)::value, kMT, K::kRabPitch, K::kSlabPitch, false, 0,
                 kTanhSilu<T>>(s, dp, p, bias, s_mask, krow, n0 + krow, m0, lane, warp_slab_ds);
    });
    if constexpr (kHasRab) {
      if (warp_slab_ds)
        rab_slab_runs<kBM, K::kSlabPitch, K::kRabPitch>(p, warp_slab_ds,
                                                        s_bkt + krow * K::kRabPitch, lane, hist);
    }
    {
      uint32_t pa[1][kMT / 2][4];
      acc_to_a<T>(s, pa);
      gemm_rs<T, 1, kDW / 8, kMT / 2, kHD>(acc_dv, pa, sdO, 0, dh * kDW, lane);  // dV += P^T dO
    }
    {
      uint32_t da[1][kMT / 2][4];
      acc_to_a<T>(dp, da);
      gemm_rs<T, 1, kDW / 8, kMT / 2, kHD>(acc_dk, da, sQ, 0, dh * kDW, lane);  // dK += dS^T Q
    }
    if constexpr (kAtomicDq) {
      if (dh == 0) acc_to_smem<T, kBM>(sdS, dp, krow, 0, 1.f, lane);
    }
    __syncthreads();
    if constexpr (kHasRab) {
      if (rab_grad) {
        rab_tile_diagonals<kBN, kBM, K::kSlabPitch, kThreads>(p, slab_ds, n0, m0, tid);
        if (hist && ++hist_tiles == K::kHistTiles && m_next < m_blocks) {
          __syncthreads();  // every warp's runs of the last kHistTiles tiles are in
          hist_flush(p, hist, tid, kThreads);
          hist_tiles = 0;  // the loop's next barrier orders the zeroing before the next adds
        }
      }
    }
    if constexpr (kAtomicDq) {  // dQ[m0.., :] += dS K, into the fp32 scratch accumulator
      constexpr int kQMT = K::kQMT;
      const int qm = warp % K::kQWarpsM, qd = warp / K::kQWarpsM;
      float aq[kQMT][kQDW / 8][4];
      zero(aq);
      gemm_tt<T, kQMT, kQDW / 8, kBN, kBM, kHD>(aq, sdS, qm * 16 * kQMT, sK, qd * kQDW, lane);
#pragma unroll
      for (int mt = 0; mt < kQMT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = m0 + (qm * kQMT + mt) * 16 + (lane >> 2) + 8 * hf;
          if (i < si.L) {
            float* dst = p.dq_accum + ((si.start + i) * p.num_heads + h) * int64_t(kHD) +
                         qd * kQDW + (lane & 3) * 2;
#pragma unroll
            for (int nt = 0; nt < kQDW / 8; ++nt)
              atomic_add2(dst + nt * 8, aq[mt][nt][2 * hf], aq[mt][nt][2 * hf + 1]);
          }
        }
    }
    m = m_next;
    st ^= 1;
  }

  // Epilogue: stage dK, dV (scaled, converted) in sK / sV once every warp is done with them.
  cp_async_wait<0>();
  __syncthreads();
  acc_to_smem<T, kHD>(sK, acc_dk, krow, dh * kDW, p.alpha * p.scale, lane);
  acc_to_smem<T, kHD>(sV, acc_dv, krow, dh * kDW, p.scale, lane);
  __syncthreads();
  T* gdk = p.dk.head<T>(si.start + n0, h);
  T* gdv = p.dv.head<T>(si.start + n0, h);
  store_tile<kBN, kHD, kThreads>(gdk, p.dk.row_stride, sK, rows_k, p.d_qk, p.dk.vec, tid);
  store_tile<kBN, kHD, kThreads>(gdv, p.dv.row_stride, sV, rows_k, p.d_v, p.dv.vec, tid);
  if constexpr (kHasRab) {
    if (rab_grad && hist) hist_flush(p, hist, tid, kThreads);  // after the epilogue's barriers
  }
}

// ---- dQ without atomics (deterministic mode): query-major -------------------------------------

template <typename T, int kHeadDim, bool kHasRab>
struct DqKernel {
  using Cfg = std::conditional_t<kHasRab, typename AttnTiles<kHeadDim>::DqRab,
                                 typename AttnTiles<kHeadDim>::Dq>;
  static constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kHD = kHeadDim;
  static constexpr int kThreads = Cfg::kNThreads, kNT = kBN / 8;
  static_assert(kBM == 16 * Cfg::kNWarps && Cfg::kStages == 2, "dq tiles");
  // Shared memory: Q, dO [kBM][kHD] | (K, V [kBN][kHD]) x 2 stages | partial-tile mask
  // [kBM][kBN / 32] u32 | rab: thresholds (or the time table), the tile's bias (used without
  // precomputed buckets) [kBM][kRabPitch] f32, two stages of precomputed buckets [kBM][kBN + 16] u8
  // (16-byte aligned, loaded with K / V).
  static constexpr int kQElems = kBM * kHD, kKVElems = kBN * kHD;
  static constexpr int kMaskWords = kBM * mask_words<kBN>();
  static constexpr int kRabPitch = rab_pitch<kBN>();
  static constexpr size_t kSmemBytes =
      sizeof(T) * (2 * kQElems + 4 * kKVElems) + sizeof(uint32_t) * kMaskWords +
      (kHasRab ? sizeof(int64_t) * (kMaxTimeTable + 1) + sizeof(float) * kBM * kRabPitch + 16 +
                     2 * bkt_tile_bytes<kBM, kBN>()
               : 0);
};

template <typename T, int kHeadDim, bool kHasRab, bool kVecIn>
__global__ void __launch_bounds__(DqKernel<T, kHeadDim, kHasRab>::kThreads,
                                  DqKernel<T, kHeadDim, kHasRab>::Cfg::kMinCtas)
    hstu_attn_dq_kernel(const __grid_constant__ HstuAttnParams p) {
  using K = DqKernel<T, kHeadDim, kHasRab>;
  constexpr int kBM = K::kBM, kBN = K::kBN, kHD = K::kHD, kNT = K::kNT, kThreads = K::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + K::kQElems;
  T* sKV = sdO + K::kQElems;  // stage st: K at sKV + 2 st kKVElems, V right after
  uint32_t* s_mask = reinterpret_cast<uint32_t*>(sKV + 4 * K::kKVElems);
  int64_t* s_thr = reinterpret_cast<int64_t*>(s_mask + K::kMaskWords);
  float* s_bias = reinterpret_cast<float*>(s_thr + kMaxTimeTable + 1);  // rab only
  uint8_t* s_bk = align16(s_bias + kBM * K::kRabPitch);                 // rab: 2 stages
  const float* ttab = reinterpret_cast<const float*>(s_thr);            // with precomputed buckets
  constexpr int kBkPitch = kBN + 16;                                    // of the staged buckets
  // Without precomputed buckets the bias goes through a shared tile (rab_tile).
  const bool bias_tile = kHasRab && !p.rab_bkt;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const CtaCoords cta = cta_coords(p);  // heavy (late, causal) query blocks first
  const int m_block = cta.blocks - 1 - cta.j, h = cta.h;
  const SeqInfo si = seq_info(p, cta.b);
  const int m0 = m_block * kBM;
  if (m0 >= si.L) return;

  const T* gq = p.q.head<const T>(si.start + m0, h);
  const T* gdo = p.d_o.head<const T>(si.start + m0, h);
  const int rows_q = min(kBM, si.L - m0);
  load_tile<kBM, kHD, kThreads, kVecIn>(sQ, gq, p.q.row_stride, rows_q, p.d_qk, p.q.vec, tid);
  load_tile<kBM, kHD, kThreads, kVecIn>(sdO, gdo, p.d_o.row_stride, rows_q, p.d_v, p.d_o.vec, tid);

  const int n_blocks = (si.L + kBN - 1) / kBN;
  auto next_visible = [&](int n) {
    while (n < n_blocks && tile_kind(si, p, m0, kBM, n * kBN, kBN) == kTileSkip) ++n;
    return n;
  };
  const T* gk = p.k.head<const T>(si.start, h);
  const T* gv = p.v.head<const T>(si.start, h);
  auto stage = [&](int st) { return sKV + 2 * st * K::kKVElems; };  // K; V follows
  auto load_kv = [&](int n, int st) {
    const int rows = min(kBN, si.L - n * kBN);
    load_tile<kBN, kHD, kThreads, kVecIn>(stage(st), gk + int64_t(n) * kBN * p.k.row_stride,
                                          p.k.row_stride, rows, p.d_qk, p.k.vec, tid);
    load_tile<kBN, kHD, kThreads, kVecIn>(stage(st) + K::kKVElems,
                                          gv + int64_t(n) * kBN * p.v.row_stride, p.v.row_stride,
                                          rows, p.d_v, p.v.vec, tid);
    if constexpr (kHasRab)
      load_bkt_tile<kBM, kBN, kThreads>(p, si, m0, n * kBN, s_bk + st * bkt_tile_bytes<kBM, kBN>(),
                                        tid);
  };
  int n = next_visible(0);
  if (n < n_blocks) load_kv(n, 0);
  cp_async_commit();
  if constexpr (kHasRab) load_rab_tables<kThreads>(p, s_thr, tid);

  const int wrow = warp * 16;

  float acc_dq[1][kHD / 8][4];
  zero(acc_dq);
  int st = 0;
  while (n < n_blocks) {
    const int n_next = next_visible(n + 1);
    cp_async_wait<0>();
    __syncthreads();
    if (n_next < n_blocks) load_kv(n_next, st ^ 1);
    cp_async_commit();
    const T* sK = stage(st);
    const T* sV = sK + K::kKVElems;

    // The bias (without precomputed buckets) and partial-tile mask of this tile (the barrier
    // above retired the last ones).
    const int kind = tile_kind(si, p, m0, kBM, n * kBN, kBN);
    const uint8_t* bk = s_bk + st * bkt_tile_bytes<kBM, kBN>();
    if (bias_tile)
      rab_tile<kBM, kBN, kThreads, false>(p, si, s_thr, m0, n * kBN, s_bias, nullptr, tid, bk);
    if (kind == kTilePartial) mask_tile<kBM, kBN, kThreads, false>(p, si, m0, n * kBN, s_mask, tid);

    float s[1][kNT][4], dp[1][kNT][4];
    zero(s);
    zero(dp);
    gemm_nt<T, 1, kNT, kHD, kHD, kHD>(s, sQ, wrow, sK, 0, lane);    // S  = Q K^T
    gemm_nt<T, 1, kNT, kHD, kHD, kHD>(dp, sdO, wrow, sV, 0, lane);  // dP = dO V^T
    if (bias_tile || kind == kTilePartial) __syncthreads();
    const float* bias = s_bias + wrow * K::kRabPitch;
    const uint8_t* wbk = bk + wrow * kBkPitch;
    with_tile_kind(kind, [&](auto kd) {
      constexpr int kKind = decltype(kd)::value;
      if constexpr (kHasRab) {
        if (!bias_tile) {
          bwd_scores<false, true, kKind, kNT, K::kRabPitch, K::kRabPitch, true, kBkPitch,
                     kTanhSilu<T>>(s, dp, p, bias, s_mask, wrow, m0 + wrow, n * kBN, lane, nullptr,
                                   wbk, ttab);
          return;
        }
      }
      bwd_scores<false, kHasRab, kKind, kNT, K::kRabPitch, K::kRabPitch, false, 0, kTanhSilu<T>>(
          s, dp, p, bias, s_mask, wrow, m0 + wrow, n * kBN, lane);
    });
    uint32_t da[1][kNT / 2][4];
    acc_to_a<T>(dp, da);
    gemm_rs<T, 1, kHD / 8, kNT / 2, kHD>(acc_dq, da, sK, 0, 0, lane);  // dQ += dS K
    n = n_next;
    st ^= 1;
  }

  cp_async_wait<0>();
  __syncthreads();
  acc_to_smem<T, kHD>(sQ, acc_dq, wrow, 0, p.alpha * p.scale, lane);
  __syncthreads();
  T* gdq = p.dq.head<T>(si.start + m0, h);
  store_tile<kBM, kHD, kThreads>(gdq, p.dq.row_stride, sQ, rows_q, p.d_qk, p.dq.vec, tid);
}

// dq[t, head h, c] = alpha scale dq_accum[t, h, c] (atomic mode).
template <typename T>
__global__ void hstu_attn_dq_convert_kernel(const __grid_constant__ HstuAttnParams p) {
  const int64_t width = int64_t(p.num_heads) * p.d_qk;
  const int64_t n = p.total_tokens * width;
  const float mul = p.alpha * p.scale;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / width;
    const int r = static_cast<int>(idx - t * width);
    const int h = r / p.d_qk, c = r - h * p.d_qk;
    const float v = p.dq_accum[(t * p.num_heads + h) * p.dq_accum_head_stride + c] * mul;
    T* dst = p.dq.head<T>(t, h) + c;
    if constexpr (std::is_same_v<T, __half>) {
      *dst = __float2half_rn(v);
    } else {
      *dst = __float2bfloat16_rn(v);
    }
  }
}

template <typename T, int kHeadDim>
void run_bwd(const HstuAttnParams& p, bool deterministic, cudaStream_t stream,
             cudaStream_t dq_stream) {
  auto go = [&](auto has_rab, auto vec_in) {
    constexpr bool kRab = decltype(has_rab)::value, kVec = decltype(vec_in)::value;
    if (deterministic) {
      using KV = DkdvKernel<T, kHeadDim, kRab, false>;
      launch<hstu_attn_dkdv_kernel<T, kHeadDim, kRab, false, kVec>>(
          sm80_grid(p, KV::kBN), KV::kThreads, KV::kSmemBytes, stream, p);
      using Q = DqKernel<T, kHeadDim, kRab>;
      launch<hstu_attn_dq_kernel<T, kHeadDim, kRab, kVec>>(sm80_grid(p, Q::kBM), Q::kThreads,
                                                           Q::kSmemBytes, dq_stream, p);
    } else {
      using KV = DkdvKernel<T, kHeadDim, kRab, true>;
      launch<hstu_attn_dkdv_kernel<T, kHeadDim, kRab, true, kVec>>(
          sm80_grid(p, KV::kBN), KV::kThreads, KV::kSmemBytes, stream, p);
      const int64_t n = p.total_tokens * p.num_heads * p.d_qk;
      const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
      launch<hstu_attn_dq_convert_kernel<T>>(dim3(blocks), 256, 0, stream, p);
    }
  };
  with_vec_in(p.q.vec && p.k.vec && p.v.vec && p.d_o.vec, [&](auto vec_in) {
    if (p.rab_pos) {
      go(std::true_type{}, vec_in);
    } else {
      go(std::false_type{}, vec_in);
    }
  });
}

}  // namespace hstu::cuda::attn
