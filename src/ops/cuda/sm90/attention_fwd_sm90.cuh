// attention_fwd_sm90.cuh — the Hopper (sm_90a) HSTU attention forward: FlashAttention-3's
// structure (TMA, mbarrier pipelines, a producer warpgroup and 2-3 consumer warpgroups with
// setmaxnreg, wgmma with register accumulators, intra-warpgroup GEMM / pointwise overlap),
// HSTU's pointwise math.
//
// One CTA = kBM = 64 x (consumer warpgroups) query rows of one (sequence, head): 128 rows and
// 2 consumer warpgroups at d = 128 / 256, 192 rows and 3 at d = 64. Warpgroup 0 is the
// producer (one thread issues every TMA load: Q once, then K and V of each visible key block into
// a two-stage circular buffer guarded by full / empty mbarriers, cutlass::PipelineTmaAsync);
// each consumer warpgroup owns 64 query rows. Per key block a consumer computes
// S = Q K^T (wgmma, both operands in shared memory, fp32 accumulators in registers), applies
// alpha (S + rab), SiLU and the mask to the accumulators, converts them in place to the A
// fragments of O += P V (wgmma, P from registers, V^T from shared memory as an MN-major operand)
// and releases the stage; S of the next key block is issued before P V of this one, so the
// pointwise epilogue overlaps the tensor cores (FA3 §3.2). The 1/N scale is applied once at the
// end; O goes registers -> shared memory (Q's buffer) -> predicated 16-byte global stores (jagged
// rows end inside a tile).
//
// Persistent form (kPersist; calls without rab at d 64 / 128; by default those with the
// longest-first launch list, i.e. jagged batches, where it measured faster: HSTU_ATTN_SM90_PERSIST
// in attention_sm90.h): a grid of min(tiles, SMs x CTAs per SM) CTAs, each running tiles until
// none are left, so one tile's prologue (Q's load, the K / V pipeline fill) and epilogue (O
// through shared memory to global) overlap its neighbours' GEMMs. The tiles are numbered as the
// one-CTA-per-tile grid's blockIdx would be (the list: x; the grid: x fastest, then head, then
// sequence, heavy blocks first); CTA c starts with tile c, then claims gridDim.x +
// atomicAdd(counter, 1) (the dispatcher's counter, zero at the launch: a dynamic schedule
// balances tiles of 1 .. 32 key blocks where a static stride c, c + G, ... does not:
// 4096-token causal batches put the same block column on the same CTA whenever G is a multiple
// of the blocks per sequence, a host simulation gave 1.8x the greedy makespan at d 64, and on an
// H200 the static stride ran at 491 / 231 TFLOPS against 528 / 365 at d 128 / 64). Per tile the
// code is the one-CTA-per-tile kernel's (the same loops, run once there), so the outputs are the
// same bits. Protocol, beyond the K / V pipelines (their states simply run on across tiles):
//   - the producer skips tiles without rows (m0 >= L, list entries past the end) itself: no
//     barrier traffic, the consumers never see them;
//   - Q is double-buffered: the it-th tile the CTA runs uses buffer it & 1 with its full
//     mbarrier (Q's transaction bytes, parity (it >> 1) & 1) and its empty mbarrier (all 128 x
//     consumer-warpgroups consumer threads arrive, parity ((it >> 1) - 1) & 1 for the producer's
//     wait before the load of tile it + 2 into the buffer). The producer writes the tile's index
//     into the buffer's slot (ss.tile) before arriving on the full barrier (release; the
//     consumers' wait acquires), and -1 with a plain arrive when no tile is left: the consumers
//     exit on it. The consumers read the index there at the tile's start and again in the
//     epilogue (sequence start and head re-derived, not held across the main loop);
//   - O of a tile is staged in the tile's own Q buffer (d 64 / 128: each warpgroup's rows where
//     its own Q rows were, q_elem_offset, free once that warpgroup has passed its last S = Q K^T;
//     d 256: once every consumer warpgroup has, the named barrier before the staging), stored,
//     then each consumer thread fences the generic-proxy accesses against the TMA's async proxy
//     (fence.proxy.async) and arrives on the buffer's empty barrier. So tile t + 1's Q and its
//     first K / V blocks load while tile t computes its last key blocks and its epilogue;
//   - the ping-pong turns (below) run on across tiles: no arrive is skipped at a tile's end;
//     warpgroup 0 takes the last warpgroup's final arrive with one extra wait after the loop.
//
// Masks and rab follow the sm80 kernel (attention_mask.cuh): tiles are classified at run time
// (hstu_tile_kind); skipped key blocks are neither loaded nor computed; full tiles test nothing
// (except the last key block, whose rows past the sequence's end belong to the next sequence —
// TMA zero-fills only past the whole tensor — and are masked by a column bound), causal tiles
// one compare, partial tiles call hstu_attend per element. rab is added per element in the
// consumer from three shared-memory reads (RabSmem): the time bucket from the call's precomputed
// u8 buckets (rab_buckets.cuh; each consumer warpgroup copies its 64 rows of the next key block
// with cp.async while it computes this one), the time table, and the CTA's window of the position
// table (one entry per diagonal j - i its tiles touch). Calls without precomputed buckets (tables
// of more than kMaxBktTable entries) and sequences whose window does not fit shared memory run
// on the sm80 kernels (sm90_fwd_supported).
//
// Shapes: q/k/v are strided column views [T, H * stride]; each becomes a rank-3 TMA tensor
// (token, column, head) with strides (row_stride, 1, head_stride) and the true head width as
// its column extent, so TMA zero-fills the columns between the width and kHeadDim itself.
#pragma once

// clang-format off
#include <cute/tensor.hpp>  // first: the atoms below need it
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
// clang-format on
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <atomic>
#include <cutlass/pipeline/sm90_pipeline.hpp>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_primitives.cuh"
#include "ops/cuda/sm90/attention_sm90.h"
#include "ops/cuda/sm90/named_barrier.cuh"

namespace hstu::cuda::attn::sm90 {

using namespace cute;
using cute::Tensor;  // not hstu::Tensor

template <typename T>
struct CuteElem;
template <>
struct CuteElem<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CuteElem<__half> {
  using type = cutlass::half_t;
};

template <typename T, int kHeadDim>
struct FwdTraits {
  using Element = typename CuteElem<T>::type;
  static constexpr int kHD = kHeadDim;
  // d 64: 3 consumer warpgroups (192-row tiles, as NVIDIA's and Meta's kernels): the pointwise
  // work, not the tensor cores, bounds this width. H200, 32 x 4096 x 4 x 64: 325 TFLOPS with 2
  // warpgroups and no overlap, 371 with 3 and the overlap (the two changes were not timed apart).
  static constexpr int kConsumerWGs = kHeadDim <= 64 ? 3 : 2;
  static constexpr int kBM = 64 * kConsumerWGs;           // 64 query rows per consumer warpgroup
  static constexpr int kBN = kHeadDim <= 128 ? 128 : 64;  // d 256: the O accumulator takes 128 regs
  static_assert(kBM == sm90_fwd_block_rows(kHeadDim), "attention_sm90.h's block rows");
  static constexpr int kStages = 2;
  // Warp-scheduler barriers between the consumer warpgroups (FA3 §3.3). NOTE: no measurable gain
  // yet: 544.8 / 367.3 / 631.6 TFLOPS (d 128 / 64 / 256, B32 L4096 H4) with them on an H100,
  // 544.8 / 373.3 / 627.2 without on an H200 (same tensor rate; not the same card). Kept on: it is
  // the configuration the GPU tests ran last.
  static constexpr bool kPingPong = true;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // setmaxnreg budgets (65,536 registers): 24 / 240 with two consumer warpgroups, 32 / 160 with 3.
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

  using AtomLayout = Layout<Shape<Int<kConsumerWGs>, _1, _1>>;
  // S [kBM, kBN] = Q [kBM, kHD] K^T: both operands K-major in shared memory.
  using TiledMma0 = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kBN>, Int<kHD>>>(),
      AtomLayout{}));
  // O [kBM, kHD] += P [kBM, kBN] V [kBN, kHD]: P from registers, V^T MN-major in shared memory.
  using TiledMma1 = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kHD>, Int<kBN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      AtomLayout{}));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBM>, Int<kHD>>{}));
  using SmemLayoutK =
      decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBN>, Int<kHD>, Int<kStages>>{}));
  using SmemLayoutVt = decltype(composition(
      SmemLayoutK{},
      make_ordered_layout(Shape<Int<kHD>, Int<kBN>, Int<kStages>>{}, Step<_2, _1, _3>{})));

  // Global views: (token, column, head) with strides (row_stride, 1, head_stride).
  using GShape = Shape<int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                       GShape{}, GStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemLayoutQ{},
                                      Shape<Int<kBM>, Int<kHD>>{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemLayoutK{}),
                                       Shape<Int<kBN>, Int<kHD>>{}, _1{}));

  using Pipe = cutlass::PipelineTmaAsync<kStages>;
  // kQBufs Q buffers (each then O of its tile), each with its full barrier (Q's TMA bytes).
  template <int kQBufs>
  struct Storage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ> * kQBufs, 1024> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> v;
    typename Pipe::SharedStorage pipe_k, pipe_v;
    alignas(8) uint64_t q_full[kQBufs];
  };
  using SharedStorage = Storage<1>;
  // The persistent form: two Q buffers, each with an empty barrier (every consumer thread arrives
  // once its tile's O left the buffer) and the linear index of the tile it holds (-1: no more
  // tiles), written by the producer before it arrives on the buffer's full barrier.
  struct SharedStoragePersist : Storage<2> {
    uint64_t q_empty[2];
    int tile[2];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static constexpr int kSmemBytesPersist = int(sizeof(SharedStoragePersist));
  static_assert(kHeadDim > 128 || kSmemBytesPersist <= 227 * 1024, "two Q buffers fit at d <= 128");
  // rab: dynamic shared memory after SharedStorage (RabSmem): per consumer warpgroup two buffers
  // of its 64 rows x kBN keys of u8 buckets (pitch kBN + 16: the 8 rows one warp's accumulators
  // span fall in distinct banks), the time table (kMaxBktTable floats), the position window.
  static constexpr int kBktPitch = kBN + 16;
  static constexpr int kBktBytes = kConsumerWGs * 2 * 64 * kBktPitch;
  // Position-window entries for sequences up to max_seqlen long: key blocks reach
  // round_up(max_seqlen, kBN), rows go kBM - 1 back.
  __host__ __device__ static int pos_window(int max_seqlen) {
    return (max_seqlen + kBN - 1) / kBN * kBN + kBM;
  }
  static int rab_smem_bytes(int max_seqlen) {
    return kBktBytes + 4 * kMaxBktTable + 4 * pos_window(max_seqlen);
  }
  static constexpr uint32_t kQBytes = kBM * kHD * sizeof(Element);
  static constexpr uint32_t kKVBytes = kBN * kHD * sizeof(Element);
};

template <typename Tr>
struct FwdParams {
  HstuAttnParams p;
  typename Tr::TmaQ tma_q;
  typename Tr::TmaKV tma_k, tma_v;
  // The persistent form: the tiles of the one-CTA-per-tile grid, numbered as its blockIdx would be
  // (the list: x; the grid: x fastest, then head, then sequence), tiles_x = its gridDim.x; counter
  // (zero at the launch, and again at its end): each CTA's next tile is gridDim.x +
  // atomicAdd(counter, 1) (fwd_next_tile).
  int num_tiles = 0, tiles_x = 0;
  int* counter = nullptr;
};

// Per-element variants of the score epilogue.
enum ScoreKind : int { kSFull = 0, kSFullEdge = 1, kSCausal = 2, kSPartial = 3 };

// The consumer's view of the rab shared memory for one key block (RabSmem): bias of tile element
// (row, col) times the scores' multiplier = pw[col - row] + ttab[bkt[row * kBktPitch + col]]
// (both tables scaled by the kernel's fill; bkt and pw pre-offset by the caller: rows of the
// warpgroup's buffer, the block's first key).
struct RabView {
  const uint8_t* bkt;
  const float* ttab;
  const float* pw;
};

// The biases (times the scores' multiplier: the tables are scaled by the kernel's fill) of
// elements (r, c) and (r, c + 1), c even, of a query-major bucket block (rows r are queries,
// columns keys; pitch kBktPitch bytes): pw[col - row] + ttab[bucket], the two neighbouring
// buckets one 2-byte read. Shared by the forward (RabView) and the query-major backward
// (bwd_rab_bias_pair).
template <int kBktPitch>
__device__ __forceinline__ void rab_bias_pair(const uint8_t* bkt, const float* ttab,
                                              const float* pw, int r, int c, float (&bias)[2]) {
  const uint32_t pair = *reinterpret_cast<const uint16_t*>(bkt + r * kBktPitch + c);
  bias[0] = pw[c - r] + ttab[pair & 0xffu];
  bias[1] = pw[c + 1 - r] + ttab[pair >> 8];
}

// The rab tables of a CTA in shared memory (forward: RabSmem; backward: BwdRabSmem), times mul (the
// scores' multiplier, the kernel's fill): ttab[k] = rab_time[k] (k < rab_time_len, else 0) for
// k < kMaxBktTable, then, right after it, the position window pw[k] = rab_pos[half - 1 + dmin + k]
// (clamped to the table; window entry k is diagonal j - i = dmin + k) for k < n_pw. Threads t of
// n (the consumers: the producer's loads do not wait for this). Each thread issues its loads in
// batches of kBatch before any store: one global round trip at 1K tokens, three at 4K (256
// consumers), where one per entry a thread fills (6 / 18 of them) was ptxas's loop before.
__device__ __forceinline__ void rab_fill_tables(float* ttab, const HstuAttnParams& p, int n_pw,
                                                int dmin, int t, int n, float mul) {
  constexpr int kBatch = 8;
  const int total = kMaxBktTable + n_pw, half = (p.rab_pos_len + 1) / 2;
#pragma unroll 1
  for (int k0 = t; k0 < total; k0 += kBatch * n) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int k = k0 + u * n;
      v[u] = 0.f;
      if (k < kMaxBktTable) {
        if (k < p.rab_time_len) v[u] = __ldg(p.rab_time + k);
      } else if (k < total) {
        int idx = half - 1 + dmin + (k - kMaxBktTable);
        idx = idx < 0 ? 0 : (idx >= p.rab_pos_len ? p.rab_pos_len - 1 : idx);
        v[u] = __ldg(p.rab_pos + idx);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (k0 + u * n < total) ttab[k0 + u * n] = v[u] * mul;
  }
}

// P = SiLU(alpha (S + rab)) on one thread's accumulators tSrS (coordinates tScS within the tile
// whose first query is i0 and first key j0), masked elements set to 0.
// Elements 2k and 2k + 1 of the accumulators are neighbouring columns of one row (the wgmma
// accumulator layout: 2k at an even column), so they are taken as a pair: their two buckets are
// one 2-byte read (written per element, nvcc read the odd one's byte again, with its own address
// arithmetic). The tables in rv hold the bias times the scores' multiplier (alpha, or alpha / 2
// for the tanh form: the kernel's fill), so the bias goes into the multiply's FMA. Elements
// outside the sequence get a finite bias (zero-filled buckets, clamped positions) and are masked
// or never stored.
template <int kKind, bool kHasRab, bool kFast, int kBktPitch, typename TS, typename TC>
__device__ __forceinline__ void fwd_scores(TS& tSrS, const TC& tScS, const HstuAttnParams& p,
                                           const SeqInfo& si, const RabView& rv, int i0, int j0) {
  const float half_alpha = 0.5f * p.alpha;
  static_assert(size(TS{}) % 2 == 0, "accumulator pairs");
#pragma unroll
  for (int e0 = 0; e0 < size(tSrS); e0 += 2) {
    const int row = get<0>(tScS(e0)), col0 = get<1>(tScS(e0));  // col0 even
    float bias[2] = {0.f, 0.f};
    if constexpr (kHasRab) rab_bias_pair<kBktPitch>(rv.bkt, rv.ttab, rv.pw, row, col0, bias);
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int e = e0 + b, col = col0 + b;
      const int i = i0 + row, j = j0 + col;
      float x = tSrS(e);
      bool ok = true;
      if constexpr (kKind == kSFullEdge) ok = j < si.L;
      if constexpr (kKind == kSCausal) ok = j <= i;
      if constexpr (kKind == kSPartial)
        ok = i < si.L && j < si.L &&
             hstu_attend(i, j, si.L, si.c, si.t, p.target_group_size, p.window, p.causal);
      float y;
      if constexpr (kFast) {
        y = silu_fast_half(kHasRab ? fmaf(x, half_alpha, bias[b]) : x * half_alpha);
      } else {
        x = kHasRab ? fmaf(x, p.alpha, bias[b]) : x * p.alpha;
        y = x * sigmoid_accurate(x);
      }
      tSrS(e) = ok ? y : 0.f;
    }
  }
}

// The score epilogue of the key block at j0 (kind: its tile kind), in place on tSrS.
// NOTE: a function, not a lambda: nvcc did not inline the rab variant's lambda, which sent S to
// local memory and made ptxas serialise every wgmma of the kernel (C7514).
template <bool kHasRab, bool kFast, int kBN, int kBktPitch, typename TS, typename TC>
__device__ __forceinline__ void apply_scores(TS& tSrS, const TC& tScS, const HstuAttnParams& p,
                                             const SeqInfo& si, const RabView& rv, int m0, int j0,
                                             int kind) {
  if (kind == kTileFull) {
    if (j0 + kBN <= si.L) {
      fwd_scores<kSFull, kHasRab, kFast, kBktPitch>(tSrS, tScS, p, si, rv, m0, j0);
    } else {
      fwd_scores<kSFullEdge, kHasRab, kFast, kBktPitch>(tSrS, tScS, p, si, rv, m0, j0);
    }
  } else if (kind == kTileCausal) {
    fwd_scores<kSCausal, kHasRab, kFast, kBktPitch>(tSrS, tScS, p, si, rv, m0, j0);
  } else {
    fwd_scores<kSPartial, kHasRab, kFast, kBktPitch>(tSrS, tScS, p, si, rv, m0, j0);
  }
}

// Element offset of (r, c) in a Q buffer (FwdTraits::SmemLayoutQ: K-major 128-byte swizzled GMMA
// atoms of 8 rows x 64 columns, stacked along the rows first): the 64-column block, the 128-byte
// row, the 16-byte chunk XOR-ed with r % 8. The epilogue writes each warpgroup's O rows where its
// own Q rows were, so no warpgroup waits for another's last GEMM (tools/check_sm90_ds_offset.cu
// checks this against cute).
template <int kBM>
__host__ __device__ __forceinline__ int q_elem_offset(int r, int c) {
  return (c >> 6) * (kBM * 64) + r * 64 + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7);
}

// C = A B over the k blocks [kKb0, kKb1) of the operands (kKb1 < 0: all of them; wgmma;
// zero_init overwrites C), committed as one group; the caller waits.
template <bool kZeroInit, int kKb0 = 0, int kKb1 = -1, typename Mma, typename TA, typename TB,
          typename TC>
__device__ __forceinline__ void wg_gemm(Mma& mma, const TA& tA, const TB& tB, TC& tC) {
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int kb = kKb0; kb < (kKb1 < 0 ? int(size<2>(tA)) : kKb1); ++kb) {
    cute::gemm(mma, tA(_, _, kb), tB(_, _, kb), tC);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(tC);
}

// The CTA's (sequence, head, resident block). Grid order (p.tile_order null): blockIdx =
// (block, head, sequence), kDesc: block gridDim.x - 1 - blockIdx.x (heavy first under causal
// masks for query-major kernels), else blockIdx.x. Tile order: entry blockIdx.x / H of the list
// (one 16-byte load that carries the sequence's rows, so seq_info reads only the contexts and
// targets), head blockIdx.x % H, block n - 1 - j (kDesc) or j of the sequence's n blocks; past
// the list's end si.L = 0, so the caller's `blk * kBM >= si.L` test returns.
struct Sm90Tile {
  SeqInfo si;
  int h, blk;
};
// kOrder: 1 the list, 0 the grid, -1 whichever p holds (p.tile_order set or null). The forward
// is compiled for each (its grid form then matches the kernel before the list: the two forms in
// one kernel cost the fp16 d 128 forward 12 bytes more spill stores, ptxas); the backward kernels
// take -1.
// sm90_tile_at: the same for coordinates c (x(), y(), z() and rev_x() = gx - 1 - x() of a grid
// gx wide): Sm90CtaCoords (blockIdx / gridDim: sm90_tile, read where the code always read them)
// or Sm90LinearCoords (the persistent forward's tiles).
struct Sm90CtaCoords {
  __device__ int x() const { return blockIdx.x; }
  __device__ int y() const { return blockIdx.y; }
  __device__ int z() const { return blockIdx.z; }
  __device__ int rev_x() const { return int(gridDim.x - 1 - blockIdx.x); }
};
struct Sm90LinearCoords {
  int cx, cy, cz, gx;
  __device__ int x() const { return cx; }
  __device__ int y() const { return cy; }
  __device__ int z() const { return cz; }
  __device__ int rev_x() const { return gx - 1 - cx; }
};
template <int kBM, bool kDesc, int kOrder, typename C>
__device__ __forceinline__ Sm90Tile sm90_tile_at(const HstuAttnParams& p, const C& c) {
  Sm90Tile t;
  if (kOrder == 1 || (kOrder < 0 && p.tile_order)) {
    const int x = c.x();
    const int4 e = __ldg(reinterpret_cast<const int4*>(p.tile_order) + x / p.num_heads);
    t.h = x % p.num_heads;
    t.si.b = max(e.x, 0);  // past the end: b = -1, len = 0 (returns)
    t.si.start = e.z;
    t.si.L = e.w;
    t.si.c = p.num_contexts ? p.num_contexts[t.si.b] : 0;
    t.si.t = p.num_targets ? p.num_targets[t.si.b] : 0;
    // The builder's count (a sequence past max_seqlen keeps the grid order's blocks); 0 past
    // the end.
    const int n = min(seq_blocks(t.si.L, kBM), seq_blocks(p.max_seqlen, kBM));
    t.blk = kDesc ? max(n - 1 - e.y, 0) : e.y;
  } else {
    t.h = c.y();
    t.si = seq_info(p, c.z());
    t.blk = kDesc ? c.rev_x() : c.x();
  }
  return t;
}
template <int kBM, bool kDesc, int kOrder = -1>
__device__ __forceinline__ Sm90Tile sm90_tile(const HstuAttnParams& p) {
  return sm90_tile_at<kBM, kDesc, kOrder>(p, Sm90CtaCoords{});
}
// The persistent forward's tile `tile` (FwdParams::num_tiles' numbering, gx = tiles_x).
template <int kBM, int kOrder>
__device__ __forceinline__ Sm90Tile sm90_tile_linear(const HstuAttnParams& p, int tile, int gx) {
  if constexpr (kOrder == 1) return sm90_tile_at<kBM, true, 1>(p, Sm90LinearCoords{tile, 0, 0, 0});
  const int r = tile / gx;
  return sm90_tile_at<kBM, true, 0>(
      p, Sm90LinearCoords{tile - r * gx, r % p.num_heads, r / p.num_heads, gx});
}

// v (the same in every lane of the warp) as a value ptxas knows to be warp-uniform: broadcast from
// lane 0, as cutlass::canonical_warp_group_idx does. NOTE: wgmma takes its shared-memory
// descriptors from uniform registers; computed from values ptxas cannot prove uniform (the
// warpgroup from threadIdx.x, a pipeline stage carried across a loop), every descriptor was built
// in regular registers and moved over (R2UR, ~4 instructions per HGMMA). The backward kernels use
// it (15% fewer instructions per tile, the same time: they wait on their GEMMs and barriers,
// session 20); the forward does not: the same change there left d 64 / 128 within 1% and made
// ptxas spill more in the d 256 kernel (28 -> 80 bytes), 3% slower (711 -> 690 TFLOPS, H200).
__device__ __forceinline__ int warp_uniform(int v) {
  return __shfl_sync(0xffffffffu, v, 0);
}

// The thread's warpgroup index, warp-uniform (warp_uniform).
__device__ __forceinline__ int uniform_warpgroup() {
  return warp_uniform(static_cast<int>(threadIdx.x) / 128);
}

// blockIdx.x / .y / .z, read so that the compiler cannot hoist what is derived from them out of
// a loop (asm volatile): values re-derived where needed instead of kept live.
__device__ __forceinline__ int opaque_ctaid_x() {
  int t;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(t));
  return t;
}
__device__ __forceinline__ int opaque_ctaid_y() {
  int t;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(t));
  return t;
}
__device__ __forceinline__ int opaque_ctaid_z() {
  int t;
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(t));
  return t;
}

// threadIdx.x, read so that the compiler cannot keep what is derived from it across a loop.
__device__ __forceinline__ int opaque_tid_x() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// The CTA's sequence start and head again (the values sm90_tile gave), for an epilogue: read
// anew rather than kept live across the main loop.
__device__ __forceinline__ void sm90_tile_start_head(const HstuAttnParams& p, int64_t& start,
                                                     int& h) {
  if (p.tile_order) {
    const int x = opaque_ctaid_x();
    start = p.tile_order[x / p.num_heads].start;
    h = x % p.num_heads;
  } else {
    start = p.cu_seqlens[opaque_ctaid_z()];
    h = opaque_ctaid_y();
  }
}

// sm90_tile_start_head for the persistent forward's tile `tile` (read anew from shared memory by
// the caller).
template <int kOrder>
__device__ __forceinline__ void sm90_tile_start_head_linear(const HstuAttnParams& p, int tile,
                                                            int gx, int64_t& start, int& h) {
  if constexpr (kOrder == 1) {
    start = p.tile_order[tile / p.num_heads].start;
    h = tile % p.num_heads;
  } else {
    const int r = tile / gx;
    start = p.cu_seqlens[r / p.num_heads];
    h = r % p.num_heads;
  }
}

// The launch grid: the tile order's 1-D grid (launchers check p.tile_order_bm == kBM), else
// (ceil(max_seqlen / kBM), H, B).
template <int kBM>
dim3 sm90_grid(const HstuAttnParams& p) {
  if (p.tile_order) {
    HSTU_CHECK(p.tile_order_bm == kBM, "sm90 attention: tile order built for ", p.tile_order_bm,
               "-row blocks, kernel has ", kBM);
    return dim3(static_cast<unsigned>(p.tile_order_n * p.num_heads), 1, 1);
  }
  return dim3((p.max_seqlen + kBM - 1) / kBM, p.num_heads, p.batch);
}

// Orders the compiler's shared-memory accesses around CUTLASS's mbarrier calls, whose asm
// declares no memory clobber (the tile slots are plain shared memory that the barriers publish).
__device__ __forceinline__ void compiler_fence() {
  asm volatile("" ::: "memory");
}

// The persistent form's next tile after `tile` for this CTA (FwdParams::counter). Every CTA
// claims until its claim fails once, so a launch makes num_tiles claims in all (num_tiles -
// gridDim.x tiles, gridDim.x failures): the one that draws num_tiles - 1 is the launch's last
// and sets the counter back to zero, ready for the next launch (a launch plan's counter is
// zeroed once, when the plan is built).
template <typename Tr>
__device__ __forceinline__ int fwd_next_tile(const FwdParams<Tr>& P, int tile) {
  const int claim = atomicAdd(P.counter, 1);
  if (claim == P.num_tiles - 1) atomicExch(P.counter, 0);
  return int(gridDim.x) + claim;
}

// kOrder: 1 the CTAs take p.tile_order's entries, 0 the grid order (sm90_tile). kPersist: the
// persistent form (no rab, d 64 / 128; the header): one tile per turn of the loops below, the
// producer's and the consumers' (without it each loop runs once, for the CTA's own tile).
template <typename T, typename Tr, bool kHasRab, int kOrder, bool kPersist>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    hstu_attn_fwd_sm90_kernel(const __grid_constant__ FwdParams<Tr> P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!(kPersist && kHasRab), "rab: one tile per CTA (its position window)");
  using Element = typename Tr::Element;
  using Pipe = typename Tr::Pipe;
  using SS =
      std::conditional_t<kPersist, typename Tr::SharedStoragePersist, typename Tr::SharedStorage>;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kHD = Tr::kHD;
  constexpr int kQSize = cosize_v<typename Tr::SmemLayoutQ>;  // elements of one Q buffer
  constexpr bool kFast = kTanhSilu<T>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SS& ss = *reinterpret_cast<SS*>(smem_raw);
  const HstuAttnParams& p = P.p;

  // NOTE: heavy (late, causal) query blocks first, so the tail of the grid is short blocks: in
  // the grid order per (sequence, head); with p.tile_order (attn_tile_order.h) also across
  // sequences, longest first, and without the CTAs past a sequence's end.
  // One tile per CTA: the CTA's (the loops below take it); persistent: unused.
  Sm90Tile tl1{};
  if constexpr (!kPersist) {
    tl1 = sm90_tile<kBM, true, kOrder>(p);
    // the whole CTA, before any barrier (and past the list's end)
    if (tl1.blk * kBM >= tl1.si.L) return;
  }
  const int tid = threadIdx.x, wg = tid / 128;

  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  if (tid == 0) {
    Barrier::init(&ss.q_full[0], 1);
    if constexpr (kPersist) {
      Barrier::init(&ss.q_full[1], 1);
      Barrier::init(&ss.q_empty[0], 128 * Tr::kConsumerWGs);
      Barrier::init(&ss.q_empty[1], 128 * Tr::kConsumerWGs);
    }
  }
  typename Pipe::Params pp;
  pp.transaction_bytes = Tr::kKVBytes;
  pp.role = wg == 0 ? Pipe::ThreadCategory::Producer : Pipe::ThreadCategory::Consumer;
  pp.is_leader = tid == 0;
  pp.num_consumers = 128 * Tr::kConsumerWGs;
  Pipe pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipe pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  // rab shared memory (RabSmem), after SharedStorage: buckets, time table, position window (the
  // consumers fill the tables below, while the producer's first loads are in flight).
  uint8_t* s_bkt = smem_raw + sizeof(SS);
  float* s_ttab = reinterpret_cast<float*>(s_bkt + Tr::kBktBytes);
  float* s_pw = s_ttab + kMaxBktTable;
  __syncthreads();  // barriers initialised (fence_barrier_init ran)

  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Tr::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Tr::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Tr::SmemLayoutVt{});

  if (wg == 0) {  // ---- producer
    cutlass::arch::warpgroup_reg_dealloc<Tr::kProducerRegs>();
    if (tid != 0) return;
    auto wr = cutlass::make_producer_start_state<Pipe>();  // continues across tiles
    int tile = kPersist ? int(blockIdx.x) : 0;
#pragma unroll 1
    for (int it = 0;; ++it) {
      const int qb = kPersist ? it & 1 : 0;  // Q buffer of the it-th tile
      Sm90Tile tl = tl1;
      if constexpr (kPersist) {
        // The CTA's next tile with rows (skipped ones: neither loaded nor seen by the consumers).
        for (; tile < P.num_tiles; tile = fwd_next_tile(P, tile)) {
          tl = sm90_tile_linear<kBM, kOrder>(p, tile, P.tiles_x);
          if (tl.blk * kBM < tl.si.L) break;
        }
        // Buffer qb's last tile (it - 2) has left it: its O is stored.
        if (it >= 2) Barrier::wait(&ss.q_empty[qb], ((it >> 1) - 1) & 1);
        const bool done = tile >= P.num_tiles;
        compiler_fence();
        ss.tile[qb] = done ? -1 : tile;  // published by the arrive (release)
        compiler_fence();
        if (done) {
          Barrier::arrive(&ss.q_full[qb]);
          break;
        }
      }
      const int m_block = tl.blk, h = tl.h;
      const SeqInfo& si = tl.si;
      const int m0 = m_block * kBM;
      const int n_blocks = key_block_end(si, p, m0, kBM, kBN);  // producer and consumers alike
      const int tokens = static_cast<int>(p.total_tokens), start = static_cast<int>(si.start);
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + qb * kQSize), typename Tr::SmemLayoutQ{});
      Tensor mQ = P.tma_q.get_tma_tensor(make_shape(tokens, p.d_qk, p.num_heads))(_, _, h);
      Tensor mK = P.tma_k.get_tma_tensor(make_shape(tokens, p.d_qk, p.num_heads))(_, _, h);
      Tensor mV = P.tma_v.get_tma_tensor(make_shape(tokens, p.d_v, p.num_heads))(_, _, h);
      Tensor gQ = local_tile(domain_offset(make_coord(start, _0{}), mQ),
                             Shape<Int<kBM>, Int<kHD>>{}, make_coord(m_block, _0{}));
      Tensor gK = local_tile(domain_offset(make_coord(start, _0{}), mK),
                             Shape<Int<kBN>, Int<kHD>>{}, make_coord(_, _0{}));  // (kBN, kHD, n)
      Tensor gV = local_tile(domain_offset(make_coord(start, _0{}), mV),
                             Shape<Int<kBN>, Int<kHD>>{}, make_coord(_, _0{}));
      auto [tQg, tQs] = tma_partition(P.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(gQ));
      auto [tKg, tKs] = tma_partition(P.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                      group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(P.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                      group_modes<0, 2>(gV));
      Barrier::arrive_and_expect_tx(&ss.q_full[qb], Tr::kQBytes);
      copy(P.tma_q.with(ss.q_full[qb], 0), tQg, tQs);
#pragma unroll 1
      for (int n = 0; n < n_blocks; ++n) {
        if (tile_kind(si, p, m0, kBM, n * kBN, kBN) == kTileSkip) continue;
        pipe_k.producer_acquire(wr);
        copy(P.tma_k.with(*pipe_k.producer_get_barrier(wr), 0), tKg(_, n), tKs(_, wr.index()));
        pipe_v.producer_acquire(wr);
        copy(P.tma_v.with(*pipe_v.producer_get_barrier(wr), 0), tVg(_, n), tVs(_, wr.index()));
        ++wr;
      }
      if constexpr (kPersist) {
        // Claimed once this tile's loads are issued (not before: a tile claimed early waits
        // behind this one while another CTA may go idle). The tile's index is read back from its
        // slot (fewer registers live across the loads above: the producer has kProducerRegs).
        tile = fwd_next_tile(P, *reinterpret_cast<volatile int*>(&ss.tile[qb]));
      } else {
        break;
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg >= 1 owns query rows [64 (wg - 1), 64 wg) of the tile
  cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
  constexpr int kWGs = Tr::kConsumerWGs, kSchedBar = 4;  // ids 0..3: the epilogue
  if constexpr (kHasRab) {
    // Both tables times the scores' multiplier (fwd_scores: alpha, or alpha / 2 for the tanh
    // form), so a score takes its bias in the multiply's FMA; s_pw[k] = the rab_pos entry of the
    // diagonal j - i = k - (m0 + kBM - 1). The consumers fill them while Q and the first K / V
    // load (filled by the whole CTA before __syncthreads, they delayed those loads by their
    // global round trips); barrier id 0 (all consumers, as the d 256 epilogue's) orders the
    // fill before any consumer reads them.
    rab_fill_tables(s_ttab, p, Tr::pos_window(p.max_seqlen), -(tl1.blk * kBM + kBM - 1), tid - 128,
                    128 * kWGs, kFast ? 0.5f * p.alpha : p.alpha);
    named_bar_sync(128 * kWGs, 0);
  }
  // Persistent at d 64: the thread's index read anew per tile (opaque_tid_x), so that its
  // fragment coordinates and barrier ids are recomputed (a few integer ops) rather than held
  // across the epilogue and the next tile's set-up: computed once before the loop, ptxas spilled
  // them (20 bytes, reloaded in the main loop; the consumers have 160 registers there). Not at
  // d 128 (240 registers), where the re-read cost ptxas more spill bytes, not fewer.
  constexpr bool kRereadTid = kPersist && kWGs == 3;
  // The ping-pong schedule (below): the last warpgroup arms warpgroup 0's first turn (persistent:
  // here; else where it always was, after the set-up).
  if constexpr (kPersist && Tr::kPingPong)
    if (wg - 1 == kWGs - 1) named_bar_arrive(256, kSchedBar);
  cutlass::PipelineState<Tr::kStages> rd_k, rd_v;  // continue across tiles
#pragma unroll 1
  for (int it = 0;; ++it) {
    const int qb = kPersist ? it & 1 : 0;  // Q buffer of the it-th tile
    Sm90Tile tl = tl1;
    // NOTE: the order of the set-up below (Q's wait first when persistent, last otherwise; the
    // arm) is the one ptxas compiled with the fewest spill bytes of those tried (persistent d 64
    // bf16: 0 instead of 8; the one-CTA-per-tile kernels: as main's or fewer, the notes).
    if constexpr (kPersist) Barrier::wait(&ss.q_full[qb], (it >> 1) & 1);
    const int ttid = kRereadTid ? opaque_tid_x() : tid;
    const int ctid = ttid - 128;
    typename Tr::TiledMma0 mma0;
    typename Tr::TiledMma1 mma1;
    auto thr0 = mma0.get_thread_slice(ctid);
    auto thr1 = mma1.get_thread_slice(ctid);
    Tensor tSrK = thr0.partition_fragment_B(sK);   // (.., stage)
    Tensor tOrV = thr1.partition_fragment_B(sVt);  // (.., stage)
    Tensor tOrO = partition_fragment_C(mma1, Shape<Int<kBM>, Int<kHD>>{});
    Tensor tScS = thr0.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));

    Tensor tSrS = partition_fragment_C(mma0, Shape<Int<kBM>, Int<kBN>>{});
    // The accumulator's register order equals the A fragments' of m64nXk16 (pairs of 8-column
    // atoms make one 16-wide k block), so P is the accumulators converted pairwise in order.
    Tensor tOrP = make_tensor<Element>(Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBN / 16>>>{});
    static_assert(size(decltype(tOrP){}) == size(decltype(tSrS){}), "P fragment size");
    auto to_p = [&] {
      uint32_t* pw = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrP.data()));
#pragma unroll
      for (int e = 0; e < size(tSrS) / 2; ++e) pw[e] = Mma<T>::pack(tSrS(2 * e), tSrS(2 * e + 1));
    };

    // FA3's warp-scheduler barriers (ping-pong, kPingPong): the consumer warpgroups take turns to
    // issue their GEMMs (named barrier kSchedBar + w, armed by the previous warpgroup in the
    // cycle), so one warpgroup's pointwise epilogue runs while the next one's GEMMs use the tensor
    // cores. Every warpgroup has the same number of turns (same key blocks); the last warpgroup's
    // first arrive arms warpgroup 0's first turn and it skips its own final one, so the counts
    // balance. Persistent: turns run on across tiles (every warpgroup takes the same turns in every
    // tile); the last warpgroup skips no arrive, its last one (after its last tile's last turn) is
    // taken by warpgroup 0's one extra wait after the loop. Each arrive on a barrier follows the
    // completion of the wait it answers (the cycle orders them), so none is ever two ahead.
    const int w = ttid / 128 - 1;
    auto turn_wait = [&] {
      if constexpr (Tr::kPingPong) named_bar_sync(256, kSchedBar + w);
    };
    auto turn_pass = [&](bool last) {
      if constexpr (Tr::kPingPong)
        if (kPersist || !(last && w == kWGs - 1)) named_bar_arrive(256, kSchedBar + (w + 1) % kWGs);
    };
    if constexpr (!kPersist && Tr::kPingPong)
      if (w == kWGs - 1) named_bar_arrive(256, kSchedBar);

    if constexpr (kPersist) {
      compiler_fence();  // the slot read after the full barrier's wait (acquire)
      const int tile = ss.tile[qb];
      if (tile < 0) break;
      tl = sm90_tile_linear<kBM, kOrder>(p, tile, P.tiles_x);
    }
    const int m_block = tl.blk, h = tl.h;
    const SeqInfo& si = tl.si;
    const int m0 = m_block * kBM;
    const int n_blocks = key_block_end(si, p, m0, kBM, kBN);  // producer and consumers alike
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + qb * kQSize), typename Tr::SmemLayoutQ{});
    Tensor tSrQ = thr0.partition_fragment_A(sQ);  // descriptors
    clear(tOrO);
    auto next_visible = [&](int n) {
      while (n < n_blocks && tile_kind(si, p, m0, kBM, n * kBN, kBN) == kTileSkip) ++n;
      return n;
    };

    // rab: the buckets of this warpgroup's 64 rows of a key block, copied with cp.async into one
    // of its two buffers (the k-th visited key block into buffer k & 1): the copy of the next block
    // is issued once every thread of the warpgroup has passed the barrier that follows its reads
    // of the block before (bkt_ready), and lands while this block's GEMMs run.
    const uint8_t* seq_bkt = kHasRab ? seq_buckets(p, si) : nullptr;
    uint8_t* my_bkt = s_bkt + w * 2 * 64 * Tr::kBktPitch;
    auto bkt_load = [&](int nb, int buf) {
      if constexpr (kHasRab) {
        constexpr int kCPR = kBN / 16;  // 16-byte chunks per row
        const int64_t S = p.rab_bkt_stride;
#pragma unroll
        for (int c = ttid & 127; c < 64 * kCPR; c += 128) {
          const int r = c / kCPR, cc = (c % kCPR) * 16;
          const int i = m0 + 64 * w + r, j = nb * kBN + cc;
          const bool in = i < si.L && j < si.L;  // then j + 16 <= S: rows are 16-byte padded
          cp_async_16(my_bkt + (buf * 64 + r) * Tr::kBktPitch + cc,
                      in ? seq_bkt + i * S + j : seq_bkt, in ? 16 : 0);
        }
        cp_async_commit();
      }
    };
    auto bkt_ready = [&] {  // the warpgroup's copies of the current block landed, all visible
      if constexpr (kHasRab) {
        cp_async_wait<0>();
        named_bar_sync(128, 8 + w);  // ids 8..10: free (0..6 are taken)
      }
    };
    auto rab_view = [&](int nb, int buf) {  // indexed by tile row / column (RabView)
      return RabView{my_bkt + (buf - w) * 64 * Tr::kBktPitch, s_ttab, s_pw + nb * kBN + kBM - 1};
    };
    if constexpr (!kPersist) Barrier::wait(&ss.q_full[0], 0);

    // FlashAttention-3's intra-warpgroup overlap: S of the next key block is issued before P V of
    // this one, and its pointwise epilogue runs while P V is on the tensor cores.
    int n = next_visible(0);  // a row block always sees its diagonal block: n < n_blocks
    bkt_load(n, 0);
    pipe_k.consumer_wait(rd_k);
    turn_wait();
    wg_gemm<true>(mma0, tSrQ, tSrK(_, _, _, rd_k.index()), tSrS);
    turn_pass(false);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    pipe_k.consumer_release(rd_k);
    ++rd_k;
    bkt_ready();
    int nn = next_visible(n + 1), buf = 0;
    if (nn < n_blocks) bkt_load(nn, 1);
    apply_scores<kHasRab, kFast, kBN, Tr::kBktPitch>(tSrS, tScS, p, si, rab_view(n, 0), m0, n * kBN,
                                                     tile_kind(si, p, m0, kBM, n * kBN, kBN));
    to_p();
#pragma unroll 1
    while (nn < n_blocks) {
      buf ^= 1;
      pipe_k.consumer_wait(rd_k);
      pipe_v.consumer_wait(rd_v);
      turn_wait();
      wg_gemm<true>(mma0, tSrQ, tSrK(_, _, _, rd_k.index()), tSrS);
      warpgroup_fence_operand(tOrP);
      wg_gemm<false>(mma1, tOrP, tOrV(_, _, _, rd_v.index()), tOrO);
      turn_pass(false);
      warpgroup_wait<1>();  // S of block nn is in registers; P V of block n still runs
      // The fences pin the accumulator reads after the waits.
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(rd_k);
      ++rd_k;
      bkt_ready();
      const int nn2 = next_visible(nn + 1);
      if (nn2 < n_blocks) bkt_load(nn2, buf ^ 1);
      apply_scores<kHasRab, kFast, kBN, Tr::kBktPitch>(tSrS, tScS, p, si, rab_view(nn, buf), m0,
                                                       nn * kBN,
                                                       tile_kind(si, p, m0, kBM, nn * kBN, kBN));
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);
      pipe_v.consumer_release(rd_v);
      ++rd_v;
      to_p();
      n = nn;
      nn = nn2;
    }
    pipe_v.consumer_wait(rd_v);
    turn_wait();
    warpgroup_fence_operand(tOrP);
    wg_gemm<false>(mma1, tOrP, tOrV(_, _, _, rd_v.index()), tOrO);
    turn_pass(true);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    warpgroup_fence_operand(tOrP);
    pipe_v.consumer_release(rd_v);
    ++rd_v;

    // ---- epilogue: O is staged in the tile's Q buffer. d 64 / 128 (kOwnRows): each warpgroup's
    // rows where its own Q rows were (q_elem_offset, the Q layout; its S GEMMs read no others),
    // once its own warps are past their last GEMM — without waiting for the other warpgroups'.
    // d 256: the sm80 row-major layout (swz<kHD>) once every warpgroup is past its last Q read.
    // NOTE: the Q layout at d 256 made ptxas spill 176 bytes in the persistent kernel (28 with the
    // row-major form), with or without the CTA-wide barrier.
    constexpr bool kOwnRows = kHD <= 128;
    named_bar_sync(kOwnRows ? 128 : 128 * Tr::kConsumerWGs, kOwnRows ? 1 + w : 0);
    T* sO = reinterpret_cast<T*>(ss.q.data() + qb * kQSize);
    Tensor tOcO = thr1.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kHD>>{}));
#pragma unroll
    for (int e = 0; e < size(tOrO); e += 2) {
      const int r = get<0>(tOcO(e)), c = get<1>(tOcO(e));
      *reinterpret_cast<uint32_t*>(sO + (kOwnRows ? q_elem_offset<kBM>(r, c) : swz<kHD>(r, c))) =
          Mma<T>::pack(tOrO(e) * p.scale, tOrO(e + 1) * p.scale);
    }
    named_bar_sync(128, 1 + w);
    const int rows = min(64, si.L - m0 - 64 * w);
    // With the tile order the sequence's start and the head are read again here
    // (sm90_tile_start_head), not kept in registers across the loop; the grid form as before.
    // Persistent: from the tile's index in shared memory (reloaded: the barriers clobber memory).
    int64_t o_start = si.start;
    int o_h = h;
    if constexpr (kPersist) {
      sm90_tile_start_head_linear<kOrder>(p, ss.tile[qb], P.tiles_x, o_start, o_h);
    } else if constexpr (kOrder == 1) {
      sm90_tile_start_head(p, o_start, o_h);
    }
    if (rows > 0) {
      T* o = p.o.head<T>(o_start + m0 + 64 * w, o_h);
      if constexpr (kOwnRows) {
        store_tile<64, kHD, 128>(o, p.o.row_stride, sO, rows, p.d_v, p.o.vec, ttid & 127,
                                 [w](int r, int c) { return q_elem_offset<kBM>(64 * w + r, c); });
      } else {
        store_tile<64, kHD, 128>(o, p.o.row_stride, sO + 64 * w * kHD, rows, p.d_v, p.o.vec,
                                 ttid & 127);
      }
    }
    if constexpr (kPersist) {
      // The buffer is free for the producer's TMA (async proxy) once this thread's generic reads
      // and writes of it (and its slot read) are ordered before the arrive.
      compiler_fence();
      cutlass::arch::fence_view_async_shared();
      Barrier::arrive(&ss.q_empty[qb]);
    } else {
      break;
    }
  }
  if constexpr (kPersist && Tr::kPingPong)
    if (wg == 1) named_bar_sync(256, kSchedBar);  // the last warpgroup's last arrive
#endif
}

// TMA view of one operand: (token, column, head) with the true head width as column extent.
template <typename Tr>
auto gmem_view(const HeadsView& v, int64_t tokens, int width, int heads) {
  using Element = typename Tr::Element;
  return make_tensor(make_gmem_ptr(static_cast<const Element*>(v.ptr)),
                     make_shape(static_cast<int32_t>(tokens), static_cast<int32_t>(width),
                                static_cast<int32_t>(heads)),
                     make_stride(v.row_stride, _1{}, v.head_stride));
}

template <typename T, int kHeadDim>
void launch_fwd(const HstuAttnParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<T, kHeadDim>;
  HSTU_CHECK(p.total_tokens < (int64_t(1) << 31), "sm90 attention: ", p.total_tokens,
             " tokens exceed TMA's 32-bit coordinates");
  FwdParams<Tr> P;
  P.p = p;
  P.tma_q = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(p.q, p.total_tokens, p.d_qk, p.num_heads),
                          typename Tr::SmemLayoutQ{}, Shape<Int<Tr::kBM>, Int<kHeadDim>>{}, _1{});
  P.tma_k = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(p.k, p.total_tokens, p.d_qk, p.num_heads),
                          take<0, 2>(typename Tr::SmemLayoutK{}),
                          Shape<Int<Tr::kBN>, Int<kHeadDim>>{}, _1{});
  P.tma_v = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(p.v, p.total_tokens, p.d_v, p.num_heads),
                          take<0, 2>(typename Tr::SmemLayoutK{}),
                          Shape<Int<Tr::kBN>, Int<kHeadDim>>{}, _1{});
  const dim3 grid = sm90_grid<Tr::kBM>(p);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  // The persistent form: the calls the dispatcher gave a tile counter (sm90_fwd_persist_mode's
  // rule), only without rab at d 64 / 128. Not rab: its position window in shared memory is per
  // tile (filled before the barriers, for the tile's diagonals); not d 256: its Q buffer is 64 KB,
  // two do not fit beside the 128 KB of K / V.
  if (kHeadDim <= 128 && !p.rab_pos && p.fwd_tile_counter) {
    const int64_t tiles = int64_t(grid.x) * grid.y * grid.z;
    HSTU_CHECK(tiles < (int64_t(1) << 31), "sm90 attention: ", tiles, " tiles");
    P.num_tiles = static_cast<int>(tiles);
    P.tiles_x = static_cast<int>(grid.x);
    P.counter = p.fwd_tile_counter;
    constexpr int smem = Tr::kSmemBytesPersist;
    auto go_persist = [&](auto kernel, int order) {
      HSTU_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      // CTAs per SM (1: the shared memory), asked once per device and order.
      static std::atomic<int> per_sm_cache[2][64];
      int dev = 0;
      HSTU_CUDA_CHECK(cudaGetDevice(&dev));
      int per_sm = dev >= 0 && dev < 64 ? per_sm_cache[order][dev].load() : 0;
      if (per_sm == 0) {
        HSTU_CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, smem));
        HSTU_CHECK(per_sm > 0, "sm90 attention: the persistent forward fits no SM");
        if (dev >= 0 && dev < 64) per_sm_cache[order][dev].store(per_sm);
      }
      const int ctas =
          static_cast<int>(std::min<int64_t>(tiles, int64_t(sm90_sm_count()) * per_sm));
      if (!p.fwd_tile_counter_zero)
        HSTU_CUDA_CHECK(cudaMemsetAsync(P.counter, 0, sizeof(int), stream));
      kernel<<<ctas, Tr::kThreads, smem, stream>>>(P);
      HSTU_CUDA_CHECK(cudaGetLastError());
      sm90_count_persist_launch(Sm90Pass::kFwd);
    };
    if (p.tile_order) {
      go_persist(hstu_attn_fwd_sm90_kernel<T, Tr, false, 1, true>, 1);
    } else {
      go_persist(hstu_attn_fwd_sm90_kernel<T, Tr, false, 0, true>, 0);
    }
    return;
  }
  auto go = [&](auto kernel, int smem) {
    // Every call (a host-side attribute, legal inside stream capture): both rab variants share
    // this lambda's type, and the rab variant's size varies with max_seqlen.
    HSTU_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<grid, Tr::kThreads, smem, stream>>>(P);
    HSTU_CUDA_CHECK(cudaGetLastError());
  };
  if (p.rab_pos) {
    HSTU_CHECK(p.rab_bkt != nullptr,
               "sm90 attention: rab needs the precomputed time buckets (rab_buckets.cuh)");
    const int smem = Tr::kSmemBytes + Tr::rab_smem_bytes(p.max_seqlen);
    if (p.tile_order) {
      go(hstu_attn_fwd_sm90_kernel<T, Tr, true, 1, false>, smem);
    } else {
      go(hstu_attn_fwd_sm90_kernel<T, Tr, true, 0, false>, smem);
    }
  } else {
    if (p.tile_order) {
      go(hstu_attn_fwd_sm90_kernel<T, Tr, false, 1, false>, Tr::kSmemBytes);
    } else {
      go(hstu_attn_fwd_sm90_kernel<T, Tr, false, 0, false>, Tr::kSmemBytes);
    }
  }
}

}  // namespace hstu::cuda::attn::sm90

namespace hstu::cuda::attn {
template <typename T, int kHeadDim>
void run_fwd_sm90(const HstuAttnParams& p, cudaStream_t stream) {
  sm90::launch_fwd<T, kHeadDim>(p, stream);
}
}  // namespace hstu::cuda::attn
