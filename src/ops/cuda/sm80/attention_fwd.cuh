// attention_fwd.cuh — the HSTU attention forward kernel (FlashAttention-2 structure, no softmax).
//
// One CTA = one tile of kBlockM query rows of one (sequence, head); it streams the visible key
// blocks through a two-stage cp.async K/V pipeline. Each warp owns 16 kMT query rows (kMT = 2 for
// d = 64 / 128: every K/V fragment feeds two m atoms): S = Q K^T in registers (ldmatrix +
// mma.sync), mask / rab / alpha / SiLU applied to the accumulators, which are re-packed in place
// as the A operand of O += P V. The 1/N scale is applied once at the end.
//
// The shaping decision: because HSTU has no softmax there is no running max or row sum, so the
// loop body is just two GEMMs and an element-wise SiLU; all mask logic is a run-time tile
// classification (attention_mask.cuh), and the only compile-time variants are head dim, dtype and
// has_rab.
#pragma once

#include "ops/cuda/sm80/attention_launch.cuh"
#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"

namespace hstu::cuda::attn {

template <typename T, int kHeadDim, bool kHasRab>
struct FwdKernel {
  using Tiles = AttnTiles<kHeadDim>;
  using Cfg = std::conditional_t<kHasRab, typename Tiles::FwdRab, typename Tiles::Fwd>;
  static constexpr bool kFastSigmoid = kTanhSilu<T>;
  static constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kHD = kHeadDim, kMT = Cfg::kMT;
  static constexpr int kThreads = Cfg::kNThreads;
  static constexpr int kNT = kBN / 8;  // accumulator atoms of a score row block
  static_assert(kBM == 16 * kMT * Cfg::kNWarps, "kMT 16-row slabs per warp");
  static_assert(Cfg::kStages == 2, "the forward pipeline is two-stage");
  // Shared memory: Q [kBM][kHD] | (K [kBN][kHD], V [kBN][kHD]) x 2 stages | partial-tile mask
  // [kBM][kBN / 32] u32 | rab: thresholds (or the time table), the tile's bias (used without
  // precomputed buckets) [kBM][kRabPitch] f32, and (16-byte aligned) two stages of precomputed
  // buckets [kBM][kBN + 16] u8, loaded with K / V.
  static constexpr int kQElems = kBM * kHD, kKVElems = kBN * kHD;
  static constexpr int kMaskWords = kBM * mask_words<kBN>();
  static constexpr int kRabPitch = rab_pitch<kBN>();
  static constexpr size_t kSmemBytes =
      sizeof(T) * (kQElems + 4 * kKVElems) + sizeof(uint32_t) * kMaskWords +
      (kHasRab ? sizeof(int64_t) * (kMaxTimeTable + 1) + sizeof(float) * kBM * kRabPitch + 16 +
                     2 * bkt_tile_bytes<kBM, kBN>()
               : 0);
};

// P = SiLU(alpha (S + rab)) on the accumulators of one score tile of kind kKind (tile_visible),
// masked elements set to 0. Accumulator row mt*16 + ... is tile row wrow + mt*16 + ..., query
// i0 + mt*16 + ...; bias (kHasRab): the warp's rows of the tile's rab (pitch kPitch), or with
// kDirect the warp's rows of the staged buckets (pitch kBkPitch; rab_pair with the time table
// ttab); mask: the tile's mask_tile bits, read only for partial tiles.
template <bool kHasRab, bool kDirect, int kKind, bool kFastSigmoid, int kMT, int kNT, int kPitch,
          int kBkPitch>
__device__ __forceinline__ void fwd_scores(float (&s)[kMT][kNT][4], const HstuAttnParams& p,
                                           const float* bias, const uint8_t* bk, const float* ttab,
                                           const uint32_t* mask, int wrow, int i0, int j0,
                                           int lane) {
  const float half_alpha = 0.5f * p.alpha;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      float2 rab[2] = {};
      if constexpr (kHasRab) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = mt * 16 + (lane >> 2) + hf * 8, c = nt * 8 + (lane & 3) * 2;
          if constexpr (kDirect) {
            rab[hf] = rab_pair(p, ttab, bk + r * kBkPitch + c, i0 + r, j0 + c);
          } else {
            rab[hf] = *reinterpret_cast<const float2*>(bias + r * kPitch + c);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = mt * 16 + (lane >> 2) + (e >> 1) * 8;
        const int c = nt * 8 + (lane & 3) * 2 + (e & 1);
        float x = s[mt][nt][e];
        const bool ok =
            tile_visible<kKind, mask_words<kNT * 8>()>(mask, wrow + r, c, i0 + r, j0 + c);
        if constexpr (kHasRab) x += (e & 1) ? rab[e >> 1].y : rab[e >> 1].x;
        float y;
        if constexpr (kFastSigmoid) {
          y = silu_fast_half(x * half_alpha);
        } else {
          x *= p.alpha;
          y = x * sigmoid_accurate(x);
        }
        s[mt][nt][e] = ok ? y : 0.f;
      }
    }
}

template <typename T, int kHeadDim, bool kHasRab, bool kVecIn>
__global__ void __launch_bounds__(FwdKernel<T, kHeadDim, kHasRab>::kThreads,
                                  FwdKernel<T, kHeadDim, kHasRab>::Cfg::kMinCtas)
    hstu_attn_fwd_kernel(const __grid_constant__ HstuAttnParams p) {
  using K = FwdKernel<T, kHeadDim, kHasRab>;
  constexpr int kBM = K::kBM, kBN = K::kBN, kHD = K::kHD, kNT = K::kNT, kMT = K::kMT;
  constexpr int kThreads = K::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sKV = sQ + K::kQElems;  // stage st: K at sKV + 2 st kKVElems, V right after
  uint32_t* s_mask = reinterpret_cast<uint32_t*>(sKV + 4 * K::kKVElems);
  int64_t* s_thr = reinterpret_cast<int64_t*>(s_mask + K::kMaskWords);
  float* s_bias = reinterpret_cast<float*>(s_thr + kMaxTimeTable + 1);  // rab only
  uint8_t* s_bk = align16(s_bias + kBM * K::kRabPitch);                 // rab: 2 stages
  const float* ttab = reinterpret_cast<const float*>(s_thr);            // with precomputed buckets
  constexpr int kBkPitch = kBN + 16;                                    // of the staged buckets
  // Without precomputed buckets the bias goes through a shared tile (rab_tile).
  const bool bias_tile = kHasRab && !p.rab_bkt;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // NOTE: heavy (late, causal) query blocks first, so the tail of the grid is short blocks.
  const CtaCoords cta = cta_coords(p);
  const int m_block = cta.blocks - 1 - cta.j, h = cta.h;
  const SeqInfo si = seq_info(p, cta.b);
  const int m0 = m_block * kBM;
  if (m0 >= si.L) return;

  const T* gq = p.q.head<const T>(si.start + m0, h);
  const T* gk = p.k.head<const T>(si.start, h);
  const T* gv = p.v.head<const T>(si.start, h);
  const int rows_q = min(kBM, si.L - m0);

  load_tile<kBM, kHD, kThreads, kVecIn>(sQ, gq, p.q.row_stride, rows_q, p.d_qk, p.q.vec, tid);

  const int n_blocks = (si.L + kBN - 1) / kBN;
  auto next_visible = [&](int n) {
    while (n < n_blocks && tile_kind(si, p, m0, kBM, n * kBN, kBN) == kTileSkip) ++n;
    return n;
  };
  auto load_kv = [&](int n, int st) {
    const int rows = min(kBN, si.L - n * kBN);
    T* sK = sKV + 2 * st * K::kKVElems;
    load_tile<kBN, kHD, kThreads, kVecIn>(sK, gk + int64_t(n) * kBN * p.k.row_stride,
                                          p.k.row_stride, rows, p.d_qk, p.k.vec, tid);
    load_tile<kBN, kHD, kThreads, kVecIn>(sK + K::kKVElems, gv + int64_t(n) * kBN * p.v.row_stride,
                                          p.v.row_stride, rows, p.d_v, p.v.vec, tid);
    if constexpr (kHasRab)
      load_bkt_tile<kBM, kBN, kThreads>(p, si, m0, n * kBN, s_bk + st * bkt_tile_bytes<kBM, kBN>(),
                                        tid);
  };

  int n = next_visible(0);
  if (n < n_blocks) load_kv(n, 0);
  cp_async_commit();
  if constexpr (kHasRab) load_rab_tables<kThreads>(p, s_thr, tid);

  const int wrow = warp * 16 * kMT;  // the warp's first query row in the tile

  float acc_o[kMT][kHD / 8][4];
  zero(acc_o);
  int st = 0;
  while (n < n_blocks) {
    const int n_next = next_visible(n + 1);
    cp_async_wait<0>();
    __syncthreads();
    // NOTE: the next K/V block streams in while this one is computed (two stages).
    if (n_next < n_blocks) load_kv(n_next, st ^ 1);
    cp_async_commit();
    const T* sK = sKV + 2 * st * K::kKVElems;
    const T* sV = sK + K::kKVElems;

    // The bias (without precomputed buckets) and partial-tile mask of this tile (the barrier
    // above retired the last ones).
    const int kind = tile_kind(si, p, m0, kBM, n * kBN, kBN);
    const uint8_t* bk = s_bk + st * bkt_tile_bytes<kBM, kBN>();
    if (bias_tile)
      rab_tile<kBM, kBN, kThreads, false>(p, si, s_thr, m0, n * kBN, s_bias, nullptr, tid, bk);
    if (kind == kTilePartial) mask_tile<kBM, kBN, kThreads, false>(p, si, m0, n * kBN, s_mask, tid);

    float s[kMT][kNT][4];
    zero(s);
    gemm_nt<T, kMT, kNT, kHD, kHD, kHD>(s, sQ, wrow, sK, 0, lane);
    if (bias_tile || kind == kTilePartial) __syncthreads();
    const float* bias = s_bias + wrow * K::kRabPitch;
    const uint8_t* wbk = bk + wrow * kBkPitch;
    with_tile_kind(kind, [&](auto kd) {
      constexpr int kKind = decltype(kd)::value;
      if constexpr (kHasRab) {
        if (!bias_tile) {
          fwd_scores<true, true, kKind, K::kFastSigmoid, kMT, kNT, K::kRabPitch, kBkPitch>(
              s, p, bias, wbk, ttab, s_mask, wrow, m0 + wrow, n * kBN, lane);
          return;
        }
      }
      fwd_scores<kHasRab, false, kKind, K::kFastSigmoid, kMT, kNT, K::kRabPitch, kBkPitch>(
          s, p, bias, wbk, ttab, s_mask, wrow, m0 + wrow, n * kBN, lane);
    });
    uint32_t pa[kMT][kNT / 2][4];
    acc_to_a<T>(s, pa);
    gemm_rs<T, kMT, kHD / 8, kNT / 2, kHD>(acc_o, pa, sV, 0, 0, lane);
    n = n_next;
    st ^= 1;
  }

  // Epilogue: scale, convert, stage in the warp's own rows of sQ (no other warp reads them),
  // then write 16-byte chunks of whole rows. The barrier covers a loop that never ran (Q's
  // copies, issued by every thread, must have landed before rows are overwritten).
  cp_async_wait<0>();
  __syncthreads();
  acc_to_smem<T, kHD>(sQ, acc_o, wrow, 0, p.scale, lane);
  __syncthreads();
  T* go = p.o.head<T>(si.start + m0, h);
  store_tile<kBM, kHD, kThreads>(go, p.o.row_stride, sQ, rows_q, p.d_v, p.o.vec, tid);
}

template <typename T, int kHeadDim>
void run_fwd(const HstuAttnParams& p, cudaStream_t stream) {
  auto go = [&](auto has_rab, auto vec_in) {
    constexpr bool kRab = decltype(has_rab)::value, kVec = decltype(vec_in)::value;
    using K = FwdKernel<T, kHeadDim, kRab>;
    launch<hstu_attn_fwd_kernel<T, kHeadDim, kRab, kVec>>(sm80_grid(p, K::kBM), K::kThreads,
                                                          K::kSmemBytes, stream, p);
  };
  with_vec_in(p.q.vec && p.k.vec && p.v.vec, [&](auto vec_in) {
    if (p.rab_pos) {
      go(std::true_type{}, vec_in);
    } else {
      go(std::false_type{}, vec_in);
    }
  });
}

}  // namespace hstu::cuda::attn
