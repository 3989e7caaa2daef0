// attention_bwd_sm90.cuh — the Hopper (sm_90a) HSTU attention backward: TMA loads into an
// mbarrier pipeline fed by a producer warpgroup, two consumer warpgroups with setmaxnreg, wgmma
// with register accumulators for all four GEMMs of a tile, HSTU's pointwise math in between.
//
//   S  = alpha (Q K^T + rab)  (recomputed)   P  = SiLU(S)       (1/N scale applied last)
//   dP = dO V^T                              dS = dP * SiLU'(S)
//   dV = scale P^T dO     dK = alpha scale dS^T Q     dQ = alpha scale dS K
//   d_rab[i,j] = alpha scale dS[i,j], summed into the position / time-bucket tables.
//
// Deterministic by construction (the sm80 path's scheme, attention_bwd.cuh): two kernels of one
// template, each writing its outputs once, no atomics, launched on two streams side by side.
//   - dK/dV kernel (kDkdv = true): one CTA per block of kBM = 128 keys of one (sequence, head),
//     resident K and V; it streams the visible query blocks (Q, dO: kBN rows each) and computes
//     S^T = K Q^T and dP^T = V dO^T (wgmma, both operands in shared memory), so P^T and dS^T come
//     out of the accumulators already as the register A operands of dV += P^T dO and
//     dK += dS^T Q (wgmma, dO / Q as MN-major B operands of the same shared buffers).
//   - dQ kernel (kDkdv = false): one CTA per block of kBM = 128 queries, resident Q and dO; it
//     streams the visible key blocks (K, V) and computes S = Q K^T, dP = dO V^T, dQ += dS K.
// The dQ kernel recomputes S and dP (7 GEMMs per tile pair instead of 5): the price of a dQ
// written once, in a fixed order, without atomics.
//
// Fused form (kFusedDq, the default at d 64 / 128; attention_bwd_sm90_dq.cuh has the accumulator
// and the ordering): the dK/dV kernel alone, 5 GEMMs per tile pair. Both warpgroups write dS^T to
// shared memory and each computes its part of the tile's dQ = dS K over all 128 keys with a fifth
// wgmma (d 128: 64 of the columns; d 64, transposed, 64 of the queries), stages it in shared
// memory (double-buffered per warpgroup, full / empty mbarriers) and goes on. Writer threads of
// the producer warpgroup (two per consumer warpgroup, one per buffer) add each staged chunk to the
// fp32 accumulator with ONE bulk reduce-add (cp.reduce.async.bulk), in descending key-block order
// per (sequence, head, 64-query block) behind a ticket semaphore, waiting for completion before
// passing the ticket on: bit-identical run to run. Asked for no determinism, the writers skip the
// tickets (unordered adds into a zeroed accumulator). A convert kernel writes dq (ordered: from
// each query block's last add on, overlapping the kernel's last wave; attention_bwd_sm90_dq.cuh).
//   - d 64 streams 128 queries a tile (kQ128): the S / dP / dV / dK accumulators have the d 128
//     kernel's shape (192 registers a thread), a tile's fixed costs (the GEMM waits, the dS
//     barrier, the dQ hand-off) are spread over twice the work, and the dQ wgmma has N = 64
//     instead of 32. H200, B32 L4096 H4 causal bf16: 289-292 TFLOPS with 64-query tiles, 360-363
//     with 128 (jagged uniform lengths 270 -> 322). Its warpgroups exchange dS at a barrier
//     every tile. Its dV / dK GEMMs run in two halves of the streamed rows (kSplitO), the first
//     issued as soon as the pointwise step's first half is packed, so the tensor cores work
//     through the second half (H200, same machine: 377 -> 380-383 TFLOPS, jagged 331-334 ->
//     338; the same split at d 128 measured 460 against 472-477).
//   - d 128 (kDqLate) computes a tile's dQ ONE TILE LATER, after the next tile's pointwise step:
//     the two dS buffers have full / free mbarriers, so neither warpgroup waits for the other's
//     current tile and the two are not held in step (421-432 -> 445-462 TFLOPS; the same form
//     measured slower at d 64: 281 against 291 with 64-query tiles, 342-343 against 360-361
//     with 128, jagged uniform lengths 303 against 320; H200, session 23).
// What keeps ptxas from serialising the wgmmas (C7512) or spilling: S^T / dP^T declared per tile
// (a loop-carried accumulator stays live across the dK / dV / dQ wgmmas), dS addressed through
// ds_byte_offset (checked against cute's indexing by tools/check_sm90_ds_offset.cu) rather than
// cute's hoisted swizzled pointers, the pointwise step in two halves, the thread's coordinates
// re-derived per tile (opaque_tid), and every mbarrier wait placed where no wgmma is in flight.
//
// Where a fused tile's time goes (session 20, H200, d 64, 64-query tiles): ~4000 cycles a tile
// per SM, against ~1230 of GEMM at the tensor cores' rate and, before the tanh form (kTanhSilu),
// ~1024 of MUFU: the consumer warpgroups run their pointwise steps in step and the tensor cores
// idle through them; the rest is waiting on GEMMs, the dS / dQ fences and the barrier. Measured
// and dropped: issuing the next tile's S / dP GEMMs before this tile's dQ is staged (257 TFLOPS
// against 263 without); 15% fewer instructions a tile (warp_uniform) left the time as it was.
//
// Each consumer warpgroup owns 64 rows of the resident block; the producer warp issues the
// resident loads once and the streamed block pair (one mbarrier per stage, both operands'
// bytes) into a two-stage circular buffer (cutlass::PipelineTmaAsync).
//
// Masks follow attention_mask.cuh exactly: tiles are classified at run time (tile_kind, query
// rows first); skipped tiles are neither loaded nor computed; interior full tiles test nothing,
// full tiles at the sequence's end test the bounds (TMA zero-fills only past the whole tensor, so
// rows past the end hold the next sequence), causal tiles one compare, partial tiles call
// hstu_attend per element.
//
// rab (kHasRab; attention_bwd_sm90_rab.cuh): both kernels add the bias to S before SiLU from the
// call's precomputed u8 buckets (each warpgroup copies its 64 x 64 part of the next tile with
// cp.async while it computes this one), the time table and a window of the position table in
// shared memory; the dK/dV kernel also reduces dS per diagonal and per time bucket in registers
// while its dV / dK GEMMs run and adds the sums to fixed-point accumulators (deterministic). The
// fused d 128 kernel's rab form (kRabFused, up to kSm90BwdRabFusedMaxSeqlen tokens) adds the
// bias the same way (one dQ staging slot a warpgroup instead of two makes room for the tables in
// shared memory) and leaves the gradient to a reduction kernel: a producer thread stores each
// tile's dS buffer to p.rab_ds once both warpgroups have written it (ds_full) and frees it after
// the copy has read it (ds_free counts it), and hstu_attn_rab_grad_sm90_kernel sums the tiles
// per diagonal and time bucket.
//
// Not here: head widths above 128 (the dK + dV accumulators of 64 x 256 per warpgroup need 256
// registers a thread: attention_bwd_sm90_wide.cuh splits the columns between the warpgroups);
// and, sent to the sm80 kernels by sm90_bwd_supported, rab at d 256 or beyond 4096 tokens
// (shared memory), and operands TMA cannot address. The entry point is
// attention_bwd_sm90_run.cuh.
//
// Shapes: q/k/v/d_o are strided column views [T, H * stride]; each becomes a rank-3 TMA tensor
// (token, column, head) with the true head width as its column extent (gmem_view of the forward).
#pragma once

#include "ops/cuda/sm90/attention_bwd_sm90_dq.cuh"
#include "ops/cuda/sm90/attention_bwd_sm90_rab.cuh"
#include "ops/cuda/sm90/attention_fwd_sm90.cuh"

namespace hstu::cuda::attn::sm90 {

// kDkdv: the key-major kernel (dK, dV; with kFusedDq also dQ through the ordered fp32
// accumulation); else the query-major dQ kernel of the split scheme. kRab: the fused kernel's rab
// form (d 128; kRabFused below).
template <typename T, int kHeadDim, bool kDkdv, bool kFusedDq = false, bool kRab = false>
struct BwdTraits {
  using Element = typename CuteElem<T>::type;
  static constexpr int kHD = kHeadDim;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kBM = 64 * kConsumerWGs;  // resident rows (keys for dK/dV, else queries)
  // Streamed rows per block: 64, or 128 queries in the fused d 64 kernel (kQ128: see the file
  // comment; its registers then have the d 128 kernel's shape).
  static constexpr bool kQ128 = kDkdv && kFusedDq && kHeadDim == 64;
  static constexpr int kBN = kQ128 ? 128 : 64;
  static_assert(kBM == sm90_bwd_block_rows(kHeadDim), "attention_sm90.h's block rows");
  static constexpr int kStages = 2;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // Fused dQ: the producer warpgroup's writer threads walk the tiles too: 56 / 224 registers
  // (setmaxnreg: the consumers' increase must come from what the producer releases,
  // 2 (224 - 168) = 168 - 56; 48 / 232 asks for 1024 registers more than that and HUNG on an
  // H200 at the first tile; 40 / 232 fits too but ptxas spilled 44 bytes, 16-24 here).
  static constexpr int kProducerRegs = kDkdv && kFusedDq ? 56 : 24;
  static constexpr int kConsumerRegs = kDkdv && kFusedDq ? 224 : 240;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "sm90 backward: head widths 64 and 128");

  using AtomLayout = Layout<Shape<Int<kConsumerWGs>, _1, _1>>;
  // X [kBM, kBN] = A B^T (S or S^T, dP or dP^T): both operands K-major in shared memory.
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kBN>, Int<kHD>>>(),
      AtomLayout{}));
  // Acc [kBM, kHD] += P [kBM, kBN] B [kBN, kHD]: P from registers, B^T MN-major in shared memory.
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kHD>, Int<kBN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      AtomLayout{}));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutR = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBM>, Int<kHD>>{}));
  using SmemLayoutS =
      decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBN>, Int<kHD>, Int<kStages>>{}));
  using SmemLayoutSt = decltype(composition(
      SmemLayoutS{},
      make_ordered_layout(Shape<Int<kHD>, Int<kBN>, Int<kStages>>{}, Step<_2, _1, _3>{})));

  using GShape = Shape<int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                       GShape{}, GStride{}));
  using TmaR = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemLayoutR{},
                                      Shape<Int<kBM>, Int<kHD>>{}, _1{}));
  using TmaS = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemLayoutS{}),
                                      Shape<Int<kBN>, Int<kHD>>{}, _1{}));

  // Fused dQ (kFusedDq; attention_bwd_sm90_dq.cuh): dS^T of both warpgroups goes from the
  // accumulators to shared memory, dS [kBN queries, kBM keys, 2 buffers], and each warpgroup
  // computes its part of the tile's dQ [kBN, kHD] = dS K over all kBM keys with a fifth wgmma:
  //   d 128: columns [64 w, 64 w + 64): dQ_w [64 queries, 64] = dS [64, kBM] K_w [kBM, 64]; dS
  //          query-contiguous (the MN-major A operand), K_w^T the resident K read MN-major.
  //   d 64:  queries [64 w, 64 w + 64) of the 128-query tile (kQ128), transposed: dQ_w^T
  //          [64 (hd), 64] = K^T [64, kBM] dS_w^T [kBM, 64]; K^T the resident K read MN-major
  //          (A), dS key-contiguous (the K-major B operand): a 64-wide head has no 32-column half
  //          in a 128-byte swizzle atom. Each warpgroup's chunk is one whole 64-query block of
  //          the accumulator (kSm90BwdQueryBlock), added only by the key blocks that see it.
  static constexpr bool kFused = kDkdv && kFusedDq;
  static constexpr bool kDqT = kHD == 64;
  static constexpr bool kDqLate = kFused && !kDqT;  // dQ one tile later (file comment)
  // The dV / dK GEMMs in two halves, the first issued before the second half's pointwise step
  // (file comment): d 64 only (H200: 377 -> 380-383 TFLOPS; d 128 476 -> 460).
  static constexpr bool kSplitO = kFused && kQ128;
  static constexpr int kDqN = kDqT ? kBN / 2 : 64;      // N of the dQ wgmma per warpgroup
  static constexpr int kDqRows = kDqT ? kBN / 2 : kBN;  // query rows of a warpgroup's chunk
  static constexpr int kDqHalves = kHD / 64;            // 64-column halves of the accumulator
  static constexpr int kStageFloats = kDqRows * 64;     // one warpgroup's staged chunk
  // The fused kernel's rab form (d 128, kDqLate; the kernel's kHasRab): the bias added from the
  // split kernels' tables (attention_bwd_sm90_rab.cuh) and each tile's dS stored to p.rab_ds for
  // the gradient's reduction kernel. Its shared memory: one dQ slot a warpgroup instead of two
  // (32 KB) makes room for the bucket blocks and tables.
  static constexpr bool kRabFused = kFused && kRab;
  static_assert(!kRab || (kFused && kDqLate), "the fused rab form: the fused d 128 kernel");
  static constexpr int kDqSlots = kRabFused ? 1 : 2;  // staged chunks a warpgroup
  using TiledMmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector < Element, Element, float, Shape<_64, Int<kDqN>, Int<kBM>>,
      GMMA::Major::MN, kDqT ? GMMA::Major::K : GMMA::Major::MN > (), Layout<Shape<_1, _1, _1>>{}));
  using SmemLayoutdS =
      decltype(tile_to_shape(std::conditional_t<kDqT, GMMA::Layout_K_SW128_Atom<Element>,
                                                GMMA::Layout_MN_SW128_Atom<Element>>{},
                             Shape<Int<kBN>, Int<kBM>, _2>{}));
  // dS as warpgroup w's operand: (queries of the operand, key, w, buffer).
  using SmemLayoutdSOp = decltype(composition(
      SmemLayoutdS{}, Layout<Shape<Int<kDqRows>, Int<kBM>, _2, _2>,
                             Stride<_1, Int<kBN>, Int<kDqT ? kDqRows : 0>, Int<kBN * kBM>>>{}));
  // The resident K (key, hd) as warpgroup w's operand: (hd column, key, w).
  using SmemLayoutKOp = decltype(composition(
      SmemLayoutR{},
      Layout<Shape<_64, Int<kBM>, _2>, Stride<Int<kBM>, _1, Int<kDqT ? 0 : kBM * 64>>>{}));

  using Pipe = cutlass::PipelineTmaAsync<kStages>;
  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r1;  // then dK / dQ
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r2;  // then dV
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s1;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s2;
    alignas(1024) cute::array_aligned<Element, kFused ? cosize_v<SmemLayoutdS> : 8, 1024> ds;
    // Fused dQ: [slot kDqSlots][warpgroup 2][kStageFloats] staged chunks and their full / empty
    // barriers.
    alignas(128) cute::array_aligned<float, kFused ? 2 * kDqSlots * kStageFloats : 4, 128> dq_stage;
    typename Pipe::SharedStorage pipe;
    alignas(8) uint64_t barrier_r;
    uint64_t dq_full[kFused ? 2 * kDqSlots : 1], dq_empty[kFused ? 2 * kDqSlots : 1];
    // kDqLate: dS buffer b holds both warpgroups' dS of a tile (ds_full: all 256 consumer
    // threads wrote theirs) / was read by both warpgroups' dQ GEMMs (ds_free; kRabFused: and by
    // the dS store's bulk copy).
    uint64_t ds_full[kDqLate ? 2 : 1], ds_free[kDqLate ? 2 : 1];
    // Persistent form: the tile the producer claimed (-1: none left), published by its arrive on
    // barrier_r; r_free: the consumers are past their last resident read of the tile and the
    // writers have read its index, so the next tile's K, V (and index) may come.
    int item;
    uint64_t r_free;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static constexpr uint32_t kRBytes = kBM * kHD * sizeof(Element);
  static constexpr uint32_t kSBytes = kBN * kHD * sizeof(Element);
};

// Resident operands r1, r2 and streamed s1, s2: (K, V; Q, dO) for dK/dV, (Q, dO; K, V) for dQ.
// Fused dQ: p.dq_accum (fp32 [H, kHD / 64, T, 64], attention_bwd_sm90_dq.cuh; needs no zeroing)
// receives every key block's partial dQ; dq_sem[((b H + h) sem_blocks + m) 2 + w] (zeroed; null:
// unordered adds into a zeroed accumulator) is the ticket of part w of query block m of sequence
// b, head h.
template <typename Tr>
struct BwdParams {
  HstuAttnParams p;
  typename Tr::TmaR tma_r1, tma_r2;
  typename Tr::TmaS tma_s1, tma_s2;
  int* dq_sem = nullptr;
  int sem_blocks = 0;
  // Persistent fused form (kPersist): the CTAs claim the n_items tiles of the one-CTA-per-tile
  // grid (items_x wide; numbered as its blockIdx, x fastest) from *item_counter (zeroed).
  int* item_counter = nullptr;
  int n_items = 0, items_x = 0;
};

// In place on one thread's accumulators: x = Q.K -> P / scale = SiLU(alpha (x + rab)),
// y = dO.V -> dS / (alpha scale) = y SiLU'(alpha (x + rab)); masked elements 0. Tile element
// (r, c) of coordinates tc is (query, key) = (c0 + c, r0 + r) when kKeyMajor, else
// (r0 + r, c0 + c). Elements [kE0, kE1) only (kE1 < 0: to the end), taken as pairs (elements
// 2k, 2k + 1 are columns c, c + 1 of one row, c even). kHasRab: alpha times the bias from rv
// (bwd_rab_bias_pair; its bucket and position indices are the tile's own coordinates), added in
// the multiply's FMA. kFast (bf16; rab: tables scaled by alpha / 2): SiLU and SiLU' in the tanh
// form (silu_and_grad_fast_half: one MUFU op a score instead of two; the d 64 backward's pointwise
// step was bound by the MUFU pipe, 16 ops a clock per SM).
template <int kKind, bool kKeyMajor, bool kHasRab, int kBktPitch, int kE0 = 0, int kE1 = -1,
          bool kFast = false, typename TX, typename TC>
__device__ __forceinline__ void bwd_pointwise(TX& tX, TX& tY, const TC& tc, const HstuAttnParams& p,
                                              const SeqInfo& si, const BwdRabView& rv, int r0,
                                              int c0) {
  constexpr int kEnd = kE1 < 0 ? int(size(TX{})) : kE1;
  static_assert(kE0 % 2 == 0 && kEnd % 2 == 0, "accumulator pairs");
  const float half_alpha = 0.5f * p.alpha;
#pragma unroll
  for (int e0 = kE0; e0 < kEnd; e0 += 2) {
    const int tr = get<0>(tc(e0)), tcol0 = get<1>(tc(e0));
    float bias[2] = {0.f, 0.f};
    if constexpr (kHasRab) bwd_rab_bias_pair<kKeyMajor, kBktPitch>(rv, tr, tcol0, bias);
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int e = e0 + b;
      const int rr = r0 + tr, cc = c0 + tcol0 + b;
      const int i = kKeyMajor ? cc : rr, j = kKeyMajor ? rr : cc;
      bool ok = true;
      if constexpr (kKind == kSFullEdge) ok = i < si.L && j < si.L;
      if constexpr (kKind == kSCausal) ok = i < si.L && j <= i;
      if constexpr (kKind == kSPartial)
        ok = i < si.L && j < si.L &&
             hstu_attend(i, j, si.L, si.c, si.t, p.target_group_size, p.window, p.causal);
      float silu, dsilu;
      if constexpr (kFast) {
        // rab: the tables are scaled by alpha / 2 (Rab::fill).
        silu_and_grad_fast_half(kHasRab ? fmaf(tX(e), half_alpha, bias[b]) : tX(e) * half_alpha,
                                silu, dsilu);
      } else {
        silu_and_grad(kHasRab ? fmaf(tX(e), p.alpha, bias[b]) : tX(e) * p.alpha, silu, dsilu);
      }
      tX(e) = ok ? silu : 0.f;
      tY(e) = ok ? tY(e) * dsilu : 0.f;
    }
  }
}

// The pointwise step of one tile of kind `kind` (resident rows from r0, streamed from c0).
// NOTE: a function, not a lambda (see apply_scores of the forward).
template <bool kKeyMajor, int kBM, int kBN, int kE0 = 0, int kE1 = -1, bool kHasRab = false,
          int kBktPitch = 0, bool kFast = false, typename TX, typename TC>
__device__ __forceinline__ void bwd_apply(TX& tX, TX& tY, const TC& tc, const HstuAttnParams& p,
                                          const SeqInfo& si, int r0, int c0, int kind,
                                          const BwdRabView& rv = BwdRabView{}) {
  if (kind == kTileFull) {
    if (r0 + kBM <= si.L && c0 + kBN <= si.L) {
      bwd_pointwise<kSFull, kKeyMajor, kHasRab, kBktPitch, kE0, kE1, kFast>(tX, tY, tc, p, si, rv,
                                                                            r0, c0);
    } else {
      bwd_pointwise<kSFullEdge, kKeyMajor, kHasRab, kBktPitch, kE0, kE1, kFast>(tX, tY, tc, p, si,
                                                                                rv, r0, c0);
    }
  } else if (kind == kTileCausal) {
    bwd_pointwise<kSCausal, kKeyMajor, kHasRab, kBktPitch, kE0, kE1, kFast>(tX, tY, tc, p, si, rv,
                                                                            r0, c0);
  } else {
    bwd_pointwise<kSPartial, kKeyMajor, kHasRab, kBktPitch, kE0, kE1, kFast>(tX, tY, tc, p, si, rv,
                                                                             r0, c0);
  }
}

// a if kFirst, else b (a reference; compile-time choice between two objects of different types).
template <bool kFirst, typename A, typename B>
__device__ __forceinline__ auto& pick(A& a, B& b) {
  if constexpr (kFirst) {
    return a;
  } else {
    return b;
  }
}

// The thread index, read so that the compiler cannot hoist what is derived from it out of a loop
// (asm volatile): coordinates recomputed in each iteration instead of kept live across it.
__device__ __forceinline__ int opaque_tid() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// opaque_tid() - 128 for a thread of the consumer warpgroups (tids 128 .. 128 + kThreads), its
// range stated: the coordinate arithmetic on it compiles unsigned (shifts and masks; the signed
// division's sign fix-ups took ~25 instructions a tile and warp).
template <int kThreads>
__device__ __forceinline__ int opaque_consumer_tid() {
  const int t = opaque_tid() - 128;
  __builtin_assume(t >= 0 && t < kThreads);
  return t;
}

// opaque_ctaid_x / y / z: attention_fwd_sm90.cuh.

// Converts one thread's [64, kBN] accumulators to the A fragments of an rs wgmma in place order
// (pairs of 8-column atoms make one 16-wide k block: see the forward's to_p).
// Words [kW0, kW1) only (kW1 < 0: to the end).
template <typename T, int kW0 = 0, int kW1 = -1, typename TAcc, typename TFrag>
__device__ __forceinline__ void acc_to_frag(const TAcc& acc, TFrag& frag) {
  uint32_t* w = reinterpret_cast<uint32_t*>(raw_pointer_cast(frag.data()));
#pragma unroll
  for (int e = kW0; e < (kW1 < 0 ? int(size(acc)) / 2 : kW1); ++e)
    w[e] = Mma<T>::pack(acc(2 * e), acc(2 * e + 1));
}

// The producer thread of a backward CTA (resident block blk of (sequence si, head h)): the
// resident operands r1, r2 [kBM, kHD] once on ss.barrier_r, then the streamed pair s1, s2
// [kBN, kHD] of every visible streamed block (next_visible) into the pipeline's stages. Shared
// by the kernels of this file and of attention_bwd_sm90_wide.cuh (Tr: their traits; bwd_produce).
// wr: the pipeline's write state (a persistent CTA's, carried across its tiles). The first kAhead
// streamed blocks load before the resident ones, which wait for before_resident().
template <int kAhead, typename Tr, typename SS, typename Pipe, typename Next, typename State,
          typename Before>
__device__ __forceinline__ void bwd_produce_tile(const BwdParams<Tr>& P, SS& ss, Pipe& pipe,
                                                 const SeqInfo& si, int blk, int h, int n_blocks,
                                                 Next&& next_visible, State& wr,
                                                 Before&& before_resident) {
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kHD = Tr::kHD;
  const HstuAttnParams& p = P.p;
  Tensor sR1 = make_tensor(make_smem_ptr(ss.r1.data()), typename Tr::SmemLayoutR{});
  Tensor sR2 = make_tensor(make_smem_ptr(ss.r2.data()), typename Tr::SmemLayoutR{});
  Tensor sS1 = make_tensor(make_smem_ptr(ss.s1.data()), typename Tr::SmemLayoutS{});
  Tensor sS2 = make_tensor(make_smem_ptr(ss.s2.data()), typename Tr::SmemLayoutS{});
  const int tokens = static_cast<int>(p.total_tokens), start = static_cast<int>(si.start);
  // Widths: r1 / s1 are q or k (d_qk), r2 / s2 are v or d_o (d_v).
  Tensor mR1 = P.tma_r1.get_tma_tensor(make_shape(tokens, p.d_qk, p.num_heads))(_, _, h);
  Tensor mR2 = P.tma_r2.get_tma_tensor(make_shape(tokens, p.d_v, p.num_heads))(_, _, h);
  Tensor mS1 = P.tma_s1.get_tma_tensor(make_shape(tokens, p.d_qk, p.num_heads))(_, _, h);
  Tensor mS2 = P.tma_s2.get_tma_tensor(make_shape(tokens, p.d_v, p.num_heads))(_, _, h);
  auto off = make_coord(start, _0{});
  Tensor gR1 =
      local_tile(domain_offset(off, mR1), Shape<Int<kBM>, Int<kHD>>{}, make_coord(blk, _0{}));
  Tensor gR2 =
      local_tile(domain_offset(off, mR2), Shape<Int<kBM>, Int<kHD>>{}, make_coord(blk, _0{}));
  Tensor gS1 = local_tile(domain_offset(off, mS1), Shape<Int<kBN>, Int<kHD>>{},
                          make_coord(_, _0{}));  // (kBN, kHD, n)
  Tensor gS2 =
      local_tile(domain_offset(off, mS2), Shape<Int<kBN>, Int<kHD>>{}, make_coord(_, _0{}));
  auto [tR1g, tR1s] = tma_partition(P.tma_r1, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sR1),
                                    group_modes<0, 2>(gR1));
  auto [tR2g, tR2s] = tma_partition(P.tma_r2, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sR2),
                                    group_modes<0, 2>(gR2));
  auto [tS1g, tS1s] = tma_partition(P.tma_s1, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sS1),
                                    group_modes<0, 2>(gS1));
  auto [tS2g, tS2s] = tma_partition(P.tma_s2, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sS2),
                                    group_modes<0, 2>(gS2));
  auto resident = [&] {
    reinterpret_cast<Barrier*>(&ss.barrier_r)->arrive_and_expect_tx(2 * Tr::kRBytes);
    copy(P.tma_r1.with(ss.barrier_r, 0), tR1g, tR1s);
    copy(P.tma_r2.with(ss.barrier_r, 0), tR2g, tR2s);
  };
  auto stream = [&](int n) {
    pipe.producer_acquire(wr);
    copy(P.tma_s1.with(*pipe.producer_get_barrier(wr), 0), tS1g(_, n), tS1s(_, wr.index()));
    copy(P.tma_s2.with(*pipe.producer_get_barrier(wr), 0), tS2g(_, n), tS2s(_, wr.index()));
    ++wr;
  };
  if constexpr (kAhead > 0) {  // (two forms: each kernel's SASS as measured)
    int n = next_visible(0);
#pragma unroll 1
    for (int i = 0; i < kAhead && n < n_blocks; ++i, n = next_visible(n + 1)) stream(n);
    before_resident();
    resident();
#pragma unroll 1
    for (; n < n_blocks; n = next_visible(n + 1)) stream(n);
  } else {
    before_resident();
    resident();
#pragma unroll 1
    for (int n = next_visible(0); n < n_blocks; n = next_visible(n + 1)) stream(n);
  }
}

// bwd_produce_tile for a CTA's one tile.
template <typename Tr, typename SS, typename Pipe, typename Next>
__device__ __forceinline__ void bwd_produce(const BwdParams<Tr>& P, SS& ss, Pipe& pipe,
                                            const SeqInfo& si, int blk, int h, int n_blocks,
                                            Next&& next_visible) {
  auto wr = cutlass::make_producer_start_state<typename Tr::Pipe>();
  bwd_produce_tile<0>(P, ss, pipe, si, blk, h, n_blocks, next_visible, wr, [] {});
}

// kHasRab: relative attention bias from the precomputed buckets (attention_bwd_sm90_rab.cuh; its
// shared memory follows SharedStorage), with its gradient in the dK/dV kernel when
// p.drab_accum is set.
// kPersist (the fused d 64 kernel, ordered adds; sm90_bwd_persist): one CTA an SM, each
// claiming the tiles of the one-CTA-per-tile grid in their launch order from P.item_counter, so
// a CTA's launch, barrier set-up and last dQ hand-offs overlap its neighbours' work. Every
// claimed tile is held by a running CTA and waits only for tickets of tiles claimed before it:
// no deadlock, whatever runs beside. The producer claims the next tile once this one's loads are
// issued, loads its first streamed blocks (every pipeline stage), and publishes it (ss.item, with
// its K, V on barrier_r) once the consumers are past their last reads of r1 / r2 and the writers
// have read this one's index (r_free); the consumers store dK, dV (staged in a dS buffer) while
// the next K, V load.
template <typename T, typename Tr, bool kDkdv, bool kHasRab, bool kPersist = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    hstu_attn_bwd_sm90_kernel(const __grid_constant__ BwdParams<Tr> P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Pipe = typename Tr::Pipe;
  using SS = typename Tr::SharedStorage;
  using Element = typename Tr::Element;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kHD = Tr::kHD;
  static_assert(Tr::kRabFused == (kHasRab && Tr::kFused), "rab in the fused kernel: kRabFused");
  static_assert(!kPersist || (Tr::kQ128 && 2 * kHD <= kBN),
                "the persistent form: the fused d 64 kernel (dK, dV staged in one dS buffer)");
  // Persistent: 8 registers more a consumer thread (2 (232 - 224) = 56 - 40; the tile loop keeps
  // a few values live across the tiles). NOTE: ptxas's consumer code of this form moves with the
  // rest of the kernel (registers, the producer's and writers' code); H200, 32 x 4096 x 4 x 64, its
  // backward ran 386 TFLOPS as it is, 366 at 224 / 56 and 344-347 with a producer that waited for
  // a free stage before claiming (session 27), 375 with the claimed tile's coordinates published
  // in shared memory for the consumers and writers (session 28: the producer spilled more, the
  // consumers' code was renumbered): compare its SASS with the measured build's after any change
  // to this kernel.
  constexpr int kProducerRegs = kPersist ? 40 : Tr::kProducerRegs;
  constexpr int kConsumerRegs = kPersist ? 232 : Tr::kConsumerRegs;
  // The fused kernel names the split kernels' shape; its rab form (kRabFused) takes the bias's
  // part only (the gradient is reduced from the stored dS).
  using Rab = BwdRabSmem<kBM, Tr::kFused ? 64 : kBN, Tr::kConsumerWGs, kDkdv && !Tr::kFused>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SS& ss = *reinterpret_cast<SS*>(smem_raw);
  const HstuAttnParams& p = P.p;
  // Fused: the dQ convert kernel (launched after this one as a programmatic dependent,
  // attention_bwd_sm90_dq.cuh) may start once every CTA of this grid has started: it converts each
  // query block as soon as the block's last partial dQ is added.
  if constexpr (Tr::kFused)
    if (threadIdx.x == 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  // NOTE: heavy blocks first under causal masks (early key blocks, late query blocks), except in
  // the fused kernel: there a key block adds its partial dQ after every later key block of the
  // same query block (the order in which they reach it), so those must launch first (a CTA
  // only ever waits for CTAs launched before it: no deadlock).
  // With p.tile_order (attn_tile_order.h) the same order within each (sequence, head), and
  // sequences longest first: a fused CTA still waits only for CTAs launched before it.
  // Persistent: the tile is set per claimed item (set_item).
  Sm90Tile tl{};
  if constexpr (!kPersist) tl = sm90_tile<kBM, !(kDkdv && !Tr::kFused)>(p);
  int blk = tl.blk;
  int h = tl.h;  // the fused consumers' epilogue reads it again
  int b = tl.si.b;
  SeqInfo si = tl.si;
  int r0 = blk * kBM;
  if (!kPersist && r0 >= si.L) return;  // the whole CTA, before any barrier (past the list's end)
  const int tid = threadIdx.x, wg = tid / 128;
  // Streamed blocks: the query kernel stops after the last key block its rows can see.
  int n_blocks = kDkdv ? (si.L + kBN - 1) / kBN : key_block_end(si, p, r0, kBM, kBN);
  // Persistent: tile `item` of the grid's numbering (blockIdx x fastest, then head, then
  // sequence; with p.tile_order the list's); whether it has rows.
  auto set_item = [&](int item) {
    const int gx = P.items_x;
    const Sm90LinearCoords c = p.tile_order ? Sm90LinearCoords{item, 0, 0, 0}
                                            : Sm90LinearCoords{item % gx, (item / gx) % p.num_heads,
                                                               item / gx / p.num_heads, gx};
    const Sm90Tile t = sm90_tile_at<kBM, true, -1>(p, c);
    blk = t.blk;
    h = t.h;
    b = t.si.b;
    si = t.si;
    r0 = blk * kBM;
    n_blocks = (si.L + kBN - 1) / kBN;
    return r0 < si.L;
  };
  // Kind of the tile (resident block, streamed block n); tile_kind takes the query range first.
  auto kind_of = [&](int n) {
    return kDkdv ? tile_kind(si, p, n * kBN, kBN, r0, kBM)
                 : tile_kind(si, p, r0, kBM, n * kBN, kBN);
  };
  auto next_visible = [&](int n) {
    while (n < n_blocks && kind_of(n) == kTileSkip) ++n;
    return n;
  };

  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  if (tid == 0) {
    Barrier::init(&ss.barrier_r, 1);
    if constexpr (Tr::kFused) {
      for (int i = 0; i < 2 * Tr::kDqSlots; ++i) {
        cutlass::arch::ClusterBarrier::init(&ss.dq_full[i], 128);  // a warpgroup's threads
        cutlass::arch::ClusterBarrier::init(&ss.dq_empty[i], 1);   // its writer
      }
      if constexpr (Tr::kDqLate) {
        for (int i = 0; i < 2; ++i) {
          cutlass::arch::ClusterBarrier::init(&ss.ds_full[i], 128 * Tr::kConsumerWGs);
          // kRabFused: and the dS store's thread.
          cutlass::arch::ClusterBarrier::init(&ss.ds_free[i],
                                              128 * Tr::kConsumerWGs + (Tr::kRabFused ? 1 : 0));
        }
      }
    }
    // The consumers' threads and the four writers.
    if constexpr (kPersist)
      cutlass::arch::ClusterBarrier::init(&ss.r_free, 128 * Tr::kConsumerWGs + 4);
  }
  typename Pipe::Params pp;
  pp.transaction_bytes = 2 * Tr::kSBytes;  // both streamed operands on one barrier
  pp.role = wg == 0 ? Pipe::ThreadCategory::Producer : Pipe::ThreadCategory::Consumer;
  pp.is_leader = tid == 0;
  pp.num_consumers = 128 * Tr::kConsumerWGs;
  Pipe pipe(ss.pipe, pp, Shape<_1, _1, _1>{});
  // rab: the tables in shared memory; window entry 0 of the positions is diagonal j - i = dmin
  // (keys r0.. against queries up to lpad for dK/dV, queries r0.. against keys up to lpad for dQ).
  const int lpad = (p.max_seqlen + kBN - 1) / kBN * kBN;
  const int dmin = kDkdv ? r0 - lpad + 1 : -(r0 + kBM - 1);
  typename Rab::Ptrs rs{};
  if constexpr (kHasRab) rs = Rab::carve(smem_raw + sizeof(SS), p.max_seqlen);
  __syncthreads();  // barriers initialised

  Tensor sR1 = make_tensor(make_smem_ptr(ss.r1.data()), typename Tr::SmemLayoutR{});
  Tensor sR2 = make_tensor(make_smem_ptr(ss.r2.data()), typename Tr::SmemLayoutR{});
  Tensor sS1 = make_tensor(make_smem_ptr(ss.s1.data()), typename Tr::SmemLayoutS{});
  Tensor sS2 = make_tensor(make_smem_ptr(ss.s2.data()), typename Tr::SmemLayoutS{});
  Tensor sS1t = make_tensor(make_smem_ptr(ss.s1.data()), typename Tr::SmemLayoutSt{});
  Tensor sS2t = make_tensor(make_smem_ptr(ss.s2.data()), typename Tr::SmemLayoutSt{});

  if (wg == 0) {  // ---- producer: warp 0 loads; fused dQ: warps 1, 2 write warpgroup 0's, 1's dQ
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid == 0) {
      auto wr = cutlass::make_producer_start_state<Pipe>();  // continues across tiles
      if constexpr (kPersist) {
#pragma unroll 1
        for (int it = 0;; ++it) {
          // The next claimed tile with rows (ones without are skipped here, unseen by the others).
          int item;
          do {
            item = atomicAdd(P.item_counter, 1);
          } while (item < P.n_items && !set_item(item));
          const bool done = item >= P.n_items;
          // Once the tile before has left the resident buffers and its index was read: the
          // tile published (ss.item, by the arrive on barrier_r: release).
          auto publish = [&] {
            if (it > 0) cutlass::arch::ClusterBarrier::wait(&ss.r_free, (it - 1) & 1);
            compiler_fence();
            ss.item = done ? -1 : item;
            compiler_fence();
          };
          if (done) {
            publish();
            Barrier::arrive(&ss.barrier_r);
            break;
          }
          // The first streamed blocks (every stage) load while the consumers finish the tile
          // before; then its K, V once they have left r1 / r2.
          bwd_produce_tile<Tr::kStages>(P, ss, pipe, si, blk, h, n_blocks, next_visible, wr,
                                        publish);
        }
      } else {
        bwd_produce(P, ss, pipe, si, blk, h, n_blocks, next_visible);
      }
    }
    if constexpr (Tr::kFused) {
      // Writer of warpgroup w's chunks in slot sl (lanes 0 and 16 of warp 1 + w): the k-th visited
      // block's chunk, k = sl mod 2. Two writers per warpgroup, so one chunk's ordered add
      // (turn, copy, completion, release) may take two tiles' time (kRabFused: one slot and one
      // writer, lane 0, per warpgroup).
      if ((tid & 15) == 0 && tid >= 32 && tid < 96 && (Tr::kDqSlots == 2 || (tid & 16) == 0)) {
        const int w = tid / 32 - 1, sl = (tid / 16) & 1;
        const bool ordered = P.dq_sem != nullptr;
        // Each tile of the CTA (persistent: each published one): the chunks of its visited
        // blocks k = sl mod 2, k counting the CTA's visited blocks. Loops, not a lambda per
        // chunk; the two forms' own steps (SASS compared: each form's code as measured).
        int k = 0;
#pragma unroll 1
        for (int it = 0;; ++it) {
          if constexpr (kPersist) {
            Barrier::wait(&ss.barrier_r, it & 1);
            const int item = *reinterpret_cast<volatile int*>(&ss.item);
            cutlass::arch::ClusterBarrier::arrive(&ss.r_free);
            if (item < 0) break;
            set_item(item);
          }
          const int key_blocks = (si.L + kBM - 1) / kBM;
          const int64_t sem0 = (int64_t(b) * p.num_heads + h) * P.sem_blocks;
          int n = next_visible(0);
          if ((k & (Tr::kDqSlots - 1)) != sl && n < n_blocks) n = next_visible(n + 1), ++k;
#pragma unroll 1
          while (n < n_blocks) {
            cutlass::arch::ClusterBarrier::wait(&ss.dq_full[2 * sl + w],
                                                (k >> (Tr::kDqSlots - 1)) & 1);
            // Query rows of this chunk (d 64: warpgroup w has queries kDqRows w..; d 128 all 64),
            // within the 64-query block m0 (kSm90BwdQueryBlock), whose semaphore part is the
            // chunk's 32-query half (d 64, 64-query tiles), its column half (d 128), or the whole
            // block (d 64, 128-query tiles). A key block adds to a 64-query block only where it
            // sees it: with 128-query tiles one of a tile's two blocks may be all masked (a zero
            // chunk, not added: the ticket chain counts the key blocks that see the block).
            const int q0 = n * kBN + (Tr::kDqT ? Tr::kDqRows * w : 0);
            const int m0 = q0 & ~(kSm90BwdQueryBlock - 1);
            const int part = Tr::kDqT ? (q0 - m0) / 32 : w;
            const int rows = min(Tr::kDqRows, si.L - q0);
            const bool sees =
                !Tr::kQ128 || tile_kind(si, p, m0, kSm90BwdQueryBlock, blk * kBM, kBM) != kTileSkip;
            if (rows > 0 && sees) {
              float* dst =
                  p.dq_accum + ((int64_t(h) * Tr::kDqHalves + (Tr::kDqT ? 0 : w)) * p.total_tokens +
                                si.start + q0) *
                                   64;
              const float* src = ss.dq_stage.data() + (2 * sl + w) * Tr::kStageFloats;
              if (ordered) {
                // Ticket = key_blocks - (the key block that added last), 0 before the first: wait
                // for the next visible key block above this one (it adds just before). NOTE:
                // descending, because under a causal mask key block k reaches query block n after
                // (n - 2 k) steps: later key blocks get there first (ascending order, measured with
                // the per-element-atomic form: 84.5 vs 133 TFLOPS, H200, 32 x 4096 x 4 x 128).
                int* sem = P.dq_sem + (sem0 + m0 / kSm90BwdQueryBlock) * 2 + part;
                int above = blk + 1;
                while (above < key_blocks &&
                       tile_kind(si, p, m0, kSm90BwdQueryBlock, above * kBM, kBM) == kTileSkip)
                  ++above;
                const int turn = above < key_blocks ? key_blocks - above : 0;
                wait_ticket(sem, turn);
                fence_proxy_async_global();
                if (turn == 0) {
                  bulk_to_global<false>(dst, src, rows * 256);  // the first: a store
                } else {
                  bulk_to_global<true>(dst, src, rows * 256);
                }
                bulk_wait_all();
                fence_proxy_async_global();
                st_release(sem, key_blocks - blk);
              } else {  // unordered (zeroed accumulator): free the slot once the copy has read it
                bulk_to_global<true>(dst, src, rows * 256);
                bulk_wait_read();
              }
            }
            cutlass::arch::ClusterBarrier::arrive(&ss.dq_empty[2 * sl + w]);
            n = next_visible(n + 1);
            if constexpr (kPersist) {  // k: exact on leaving (the next tile continues it)
              ++k;
              if (n < n_blocks) n = next_visible(n + 1), ++k;
            } else {
              if constexpr (Tr::kDqSlots == 2) {
                if (n < n_blocks) n = next_visible(n + 1);
              }
              k += Tr::kDqSlots;
            }
          }
          if constexpr (!kPersist) break;
        }
        bulk_wait_all();
      }
      if constexpr (Tr::kRabFused) {
        // The dS store (lane 0 of warp 3; kRabFused): each visited tile's dS, both warpgroups'
        // halves in buffer k & 1 once ds_full says so, copied whole (the buffer's swizzled image)
        // to the tile's slot of p.rab_ds (rab_ds_tile), for the gradient's reduction kernel; the
        // buffer is freed (ds_free) once the copy has read it. Rab without gradients (no
        // p.rab_ds): it only frees the buffers.
        if (tid == 96) {
          int k = 0;
#pragma unroll 1
          for (int n = next_visible(0); n < n_blocks; n = next_visible(n + 1), ++k) {
            cutlass::arch::ClusterBarrier::wait(&ss.ds_full[k & 1], (k >> 1) & 1);
            if (p.rab_ds) {
              bulk_to_global<false>(
                  reinterpret_cast<float*>(rab_ds_tile(p, b, h, blk, n)),
                  reinterpret_cast<const float*>(ss.ds.data()) + (k & 1) * (kRabDsTileBytes / 4),
                  kRabDsTileBytes);
              bulk_wait_read();
            }
            cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[k & 1]);
          }
          bulk_wait_all();
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg >= 1 owns resident rows [64 (wg - 1), 64 wg)
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int ctid = tid - 128, w = wg - 1;
  if constexpr (kHasRab) {
    // The rab tables and accumulators, filled by the consumers while the producer's first loads
    // are in flight (by the whole CTA before __syncthreads, they delayed those loads by their
    // global round trips); barrier id 0 (all consumers, as the epilogue's) orders the fill before
    // any consumer uses them.
    Rab::fill(rs, p, p.max_seqlen, dmin, ctid, 128 * Tr::kConsumerWGs,
              kTanhSilu<T> ? 0.5f * p.alpha : p.alpha);
    named_bar_sync(128 * Tr::kConsumerWGs, 0);
  }
  typename Tr::TiledMmaS mmaS;
  typename Tr::TiledMmaO mmaO;
  auto thrS = mmaS.get_thread_slice(ctid);
  auto thrO = mmaO.get_thread_slice(ctid);
  // The shared-memory operands' descriptors depend on the warpgroup only: sliced by its first
  // thread, from the uniform index (warp_uniform).
  const int wu = uniform_warpgroup() - 1;
  auto thrSd = mmaS.get_thread_slice(128 * wu);
  auto thrOd = mmaO.get_thread_slice(128 * wu);
  Tensor tXrR1 = thrSd.partition_fragment_A(sR1);  // descriptors
  Tensor tXrR2 = thrSd.partition_fragment_A(sR2);
  Tensor tXrS1 = thrSd.partition_fragment_B(sS1);  // (.., stage)
  Tensor tXrS2 = thrSd.partition_fragment_B(sS2);
  Tensor tOrS1t = thrOd.partition_fragment_B(sS1t);  // (.., stage)
  Tensor tOrS2t = thrOd.partition_fragment_B(sS2t);
  // accB: dK (dK/dV kernel) or dQ; accA: dV (dK/dV kernel only).
  Tensor accA = partition_fragment_C(mmaO, Shape<Int<kBM>, Int<kHD>>{});
  Tensor accB = partition_fragment_C(mmaO, Shape<Int<kBM>, Int<kHD>>{});
  if constexpr (kDkdv) clear(accA);
  clear(accB);
  Tensor tXcX = thrS.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));
  // S^T / dP^T (S / dP) of the split kernels: declared once, so (the wgmma's accumulator operand
  // being read-write) the registers stay live across the loop, as they always were. The fused
  // kernel declares its own per tile below (not loop-carried: dead once converted to P / dS).
  Tensor tXrXl = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});
  Tensor tXrYl = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});
  using FragLayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBN / 16>>>;
  Tensor tOrP = make_tensor<Element>(FragLayout{});
  Tensor tOrD = make_tensor<Element>(FragLayout{});
  static_assert(size(FragLayout{}) == size(decltype(tXrXl){}), "A fragment size");
  // Fused dQ operands (unused otherwise): dS (.., buffer) and the resident K as this warpgroup's
  // A / B operands (d 64: B / A), the accumulator coordinates (row, column) of its chunk.
  typename Tr::TiledMmaDq mmaDq;
  auto thrDq = mmaDq.get_thread_slice(tid & 127);
  Tensor sdSw =
      make_tensor(make_smem_ptr(ss.ds.data()), typename Tr::SmemLayoutdSOp{})(_, _, wu, _);
  Tensor sKw = make_tensor(make_smem_ptr(ss.r1.data()), typename Tr::SmemLayoutKOp{})(_, _, wu);
  Tensor tDrdS = [&] {
    if constexpr (Tr::kDqT) {
      return thrDq.partition_fragment_B(sdSw);
    } else {
      return thrDq.partition_fragment_A(sdSw);
    }
  }();
  Tensor tDrK = [&] {
    if constexpr (Tr::kDqT) {
      return thrDq.partition_fragment_A(sKw);
    } else {
      return thrDq.partition_fragment_B(sKw);
    }
  }();

  // rab: the buckets of this warpgroup's 64 x 64 part of a tile, copied with cp.async into one of
  // its two buffers (the k-th visited streamed block into buffer k & 1): the copy of the next
  // block is issued once every thread of the warpgroup has passed the barrier that follows its
  // reads of the block before (bkt_ready), and lands while this block's pointwise step and GEMMs
  // run.
  const bool rab_grad = kHasRab && kDkdv && !Tr::kFused && p.drab_accum != nullptr;
  const float grad_mul = p.alpha * p.scale;
  uint8_t* my_bkt = kHasRab ? rs.bkt + w * 2 * Rab::kBlockBytes : nullptr;
  auto bkt_load = [&](int nb, int buf) {
    if constexpr (kHasRab) {
      const int res0 = r0 + 64 * w, str0 = nb * kBN;  // (queries, keys) of the part
      Rab::load_block(p, si, my_bkt + buf * Rab::kBlockBytes, kDkdv ? str0 : res0,
                      kDkdv ? res0 : str0, tid & 127);
    }
  };
  auto bkt_ready = [&] {  // the warpgroup's copies of the current block landed, all visible
    if constexpr (kHasRab) {
      cp_async_wait<0>();
      named_bar_sync(128, 8 + w);  // ids 8, 9: free (0..5 are taken)
    }
  };
  auto rab_view = [&](int nb, int buf) {  // indexed by tile coordinates (BwdRabView)
    BwdRabView v;
    if constexpr (kHasRab) {
      const uint8_t* part = my_bkt + buf * Rab::kBlockBytes;  // resident rows 64 w.. of the tile
      v.bkt = kDkdv ? part - 64 * w : part - 64 * w * Rab::kBktPitch;
      const int base = kDkdv ? lpad - 1 - nb * kBN : nb * kBN + kBM - 1;
      v.ttab = rs.ttab;
      v.pw = rs.pw + base;
      v.pacc = rs.pacc + base;
    }
    return v;
  };

  // Every GEMM in flight done; the fences pin the accumulators' and operands' uses after it.
  auto wait_gemms = [&] {
    warpgroup_wait<0>();
    warpgroup_fence_operand(accA);
    warpgroup_fence_operand(accB);
    warpgroup_fence_operand(tOrP);
    warpgroup_fence_operand(tOrD);
  };
  // kSplitO: the k blocks (16 streamed rows each) of the dV / dK GEMMs issued during the
  // second half of the pointwise step.
  constexpr int kKbHalf = kBN / 32;
  // Fused: the dQ of visited tile kq (its dS complete in buffer kq & 1): this warpgroup's part
  // (dQ_w = dS K_w; d 64: dQ_w^T = K^T dS_w^T), then — every GEMM in flight done —
  // after_wait() (the caller's stage release), then the chunk staged for the writer warp
  // (attention_bwd_sm90_dq.cuh): rows of 64 floats, columns permuted by dq_col_pos, slot kq & 1.
  auto dq_step = [&](int kq, auto&& after_wait) {
    if constexpr (Tr::kFused) {
      const int b = kq & 1;  // the dS buffer, and with two slots the staging slot
      const int sl = Tr::kDqSlots == 2 ? b : 0;
      Tensor accQ = partition_fragment_C(mmaDq, Shape<_64, Int<Tr::kDqN>>{});
      if constexpr (Tr::kDqT) {
        wg_gemm<true>(mmaDq, tDrK, tDrdS(_, _, _, b), accQ);
      } else {
        wg_gemm<true>(mmaDq, tDrdS(_, _, _, b), tDrK, accQ);
      }
      wait_gemms();
      warpgroup_fence_operand(accQ);
      if constexpr (Tr::kDqLate) cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[b]);
      after_wait();
      cutlass::arch::ClusterBarrier::wait(&ss.dq_empty[2 * sl + w],
                                          Tr::kDqSlots == 2 ? ((kq >> 1) & 1) ^ 1 : (kq & 1) ^ 1);
      float* stage = ss.dq_stage.data() + (2 * sl + w) * Tr::kStageFloats;
      // The accumulator coordinates of the chunk (opaque_tid, as tXcXu).
      Tensor tDcQ = mmaDq.get_thread_slice(opaque_tid() & 127)
                        .partition_C(make_identity_tensor(Shape<_64, Int<Tr::kDqN>>{}));
      if constexpr (Tr::kDqT) {  // (r, c) = (hd, query): rows are queries
        stage_dq_transposed<kHD>(stage, accQ, tDcQ);
      } else {
#pragma unroll
        for (int e = 0; e < size(accQ); e += 2) {
          const int r = get<0>(tDcQ(e)), c = get<1>(tDcQ(e));
          *reinterpret_cast<float2*>(stage + r * 64 + dq_col_pos<kHD>(r, c)) =
              make_float2(accQ(e), accQ(e + 1));
        }
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> the bulk copy's reads
      cutlass::arch::ClusterBarrier::arrive(&ss.dq_full[2 * sl + w]);
    }
  };

  int dq_k = 0;  // fused: the visited tiles (persistent: of all the CTA's tiles)
  // The CTA's resident block (persistent: each published one). A loop, not a lambda: a lambda
  // holding this loop changed the default kernel's code (9904 -> 9952 SASS instructions; with
  // session 26's other lambdas the d 64 backward ran 362 TFLOPS against 381, H200).
#pragma unroll 1
  for (int it = 0;; ++it) {
    if constexpr (kPersist) {
      Barrier::wait(&ss.barrier_r, it & 1);
      const int item = *reinterpret_cast<volatile int*>(&ss.item);
      if (item < 0) break;
      set_item(item);
      clear(accA);
      clear(accB);
    } else {
      reinterpret_cast<Barrier*>(&ss.barrier_r)->wait(0);
    }
    // Each visible streamed block: its GEMMs and pointwise step.
    cutlass::PipelineState<Tr::kStages> rd;
    int n = next_visible(0), buf = 0;
    if (n < n_blocks) bkt_load(n, 0);
#pragma unroll 1
    while (n < n_blocks) {
      if constexpr (Tr::kFused) {
        // Fused: the stage and the dS buffer from the tile count dq_k, the one counter carried
        // across the loop (the values ++rd and buf ^= 1 would give: dq_k tiles visited).
        // Warp-uniform (warp_uniform): the stage's and buffer's descriptors stay in uniform
        // registers.
        const int k_u = warp_uniform(dq_k);
        rd = cutlass::PipelineState<Tr::kStages>(k_u % Tr::kStages, (k_u / Tr::kStages) & 1, k_u);
        buf = k_u & 1;
      }
      // Fused: S^T / dP^T of this tile only (their last reads are the conversions to P / dS): 64
      // registers a thread that the dK / dV / dQ wgmmas below do not have to keep allocated.
      Tensor tXrXt = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});
      Tensor tXrYt = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});
      auto& tXrX = pick<Tr::kFused>(tXrXt, tXrXl);
      auto& tXrY = pick<Tr::kFused>(tXrYt, tXrYl);
      // Fused: the thread's (row, column) coordinates of S^T re-derived in each tile (opaque_tid),
      // not kept live across the loop; the split kernels use tXcX, as before.
      Tensor tXcXt = mmaS.get_thread_slice(opaque_consumer_tid<128 * Tr::kConsumerWGs>())
                         .partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));
      const auto& tXcXu = pick<Tr::kFused>(tXcXt, tXcX);
      pipe.consumer_wait(rd);
      // The stage, warp-uniform (warp_uniform; the fused kernel's already is).
      const int st = Tr::kFused ? rd.index() : warp_uniform(rd.index());
      wg_gemm<true>(mmaS, tXrR1, tXrS1(_, _, _, st), tXrX);
      wg_gemm<true>(mmaS, tXrR2, tXrS2(_, _, _, st), tXrY);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tXrX);
      warpgroup_fence_operand(tXrY);
      bkt_ready();
      const int nn = next_visible(n + 1);
      if (nn < n_blocks) bkt_load(nn, buf ^ 1);
      const BwdRabView rv = rab_view(n, buf);
      if constexpr (Tr::kFused) {
        // Fused: the pointwise step in two halves of the thread's elements, each half packed into
        // the P / dS fragments right after (the same elementwise results): S^T / dP^T of the
        // first half are dead while the second is computed.
        constexpr int kHalf = int(size(decltype(tXrXt){})) / 2;
        const int kind = kind_of(n);
        // kRabFused: the bias as in the split kernels (rv).
        constexpr int kPitch = kHasRab ? Rab::kBktPitch : 0;
        bwd_apply<true, kBM, kBN, 0, kHalf, kHasRab, kPitch, kTanhSilu<T>>(tXrX, tXrY, tXcXu, p, si,
                                                                           r0, n * kBN, kind, rv);
        acc_to_frag<T, 0, kHalf / 2>(tXrY, tOrD);
        acc_to_frag<T, 0, kHalf / 2>(tXrX, tOrP);
        // kSplitO: the first half's elements are the tile's first kBN / 2 streamed rows (the
        // accumulator's column atoms in order; acc_to_frag), i.e. k blocks [0, kKbHalf) of P^T /
        // dS^T: its dV and dK GEMMs run on the tensor cores while the second half's pointwise
        // step runs.
        if constexpr (Tr::kSplitO) {
          warpgroup_fence_operand(tOrP);
          warpgroup_fence_operand(tOrD);
          wg_gemm<false, 0, kKbHalf>(mmaO, tOrP, tOrS2t(_, _, _, st), accA);  // dV += P^T dO
          wg_gemm<false, 0, kKbHalf>(mmaO, tOrD, tOrS1t(_, _, _, st), accB);  // dK += dS^T Q
        }
        bwd_apply<true, kBM, kBN, kHalf, -1, kHasRab, kPitch, kTanhSilu<T>>(
            tXrX, tXrY, tXcXu, p, si, r0, n * kBN, kind, rv);
        acc_to_frag<T, kHalf / 2>(tXrY, tOrD);
        acc_to_frag<T, kHalf / 2>(tXrX, tOrP);
      } else {
        bwd_apply<kDkdv, kBM, kBN, 0, -1, kHasRab, Rab::kBktPitch, kTanhSilu<T>>(
            tXrX, tXrY, tXcXu, p, si, r0, n * kBN, kind_of(n), rv);
        acc_to_frag<T>(tXrY, tOrD);
      }
      warpgroup_fence_operand(tOrD);
      if constexpr (Tr::kDqLate) {
        // Before any GEMM of this tile is in flight (a spin on an mbarrier under in-flight wgmmas
        // makes ptxas serialise them all, C7518): dS buffer dq_k & 1 free (both warpgroups' dQ of
        // tile dq_k - 2 read it) and tile dq_k - 1's dS complete (both halves), for its dQ below.
        if (dq_k >= 2)
          cutlass::arch::ClusterBarrier::wait(&ss.ds_free[dq_k & 1], ((dq_k >> 1) & 1) ^ 1);
        if (dq_k >= 1)
          cutlass::arch::ClusterBarrier::wait(&ss.ds_full[(dq_k - 1) & 1], ((dq_k - 1) >> 1) & 1);
      }
      if constexpr (kDkdv) {
        if constexpr (!Tr::kFused) acc_to_frag<T>(tXrX, tOrP);
        warpgroup_fence_operand(tOrP);
        // kSplitO: the second half's k blocks (the first half's are in flight).
        wg_gemm<false, Tr::kSplitO ? kKbHalf : 0>(mmaO, tOrP, tOrS2t(_, _, _, st), accA);  // dV
      }
      // dK += dS^T Q  |  dQ += dS K
      wg_gemm<false, Tr::kSplitO ? kKbHalf : 0>(mmaO, tOrD, tOrS1t(_, _, _, st), accB);
      if constexpr (kHasRab && kDkdv &&
                    !Tr::kFused) {  // while the GEMMs run: dS (fp32) is still in tXrY
        if (rab_grad) {
          bwd_rab_grad<Rab::kBktPitch, Rab::kStagePitch>(
              tXrY, tXcX, rv, rs.stage + (tid / 32 - 4) * Rab::kStageFloats,
              rs.hist + w * Rab::kHistWords, grad_mul);
          named_bar_sync(128, 10 + w);  // ids 10, 11: free
          bwd_rab_flush_tile<Rab::kDiagPitch>(p, rv, rs.stage + w * 4 * Rab::kStageFloats,
                                              rs.hist + w * Rab::kHistWords, tid & 127, 64 * w,
                                              grad_mul);
        }
      }
      if constexpr (Tr::kFused) {
        // dS^T (this warpgroup's 64 keys x kBN queries, the converted pairs of tOrD: adjacent
        // queries) -> dS(query, key, buf) (SmemLayoutdS) while the GEMMs run: stmatrix, four 8 x 8
        // blocks a store (transposed where dS is key-contiguous, d 64), one address a lane from
        // ds_stsm_offset (attention_bwd_sm90_dq.cuh). Per-pair stores with an address each took
        // ~100 (d 128) to ~300 (d 64) of the ~1260 instructions per tile and warp (ncu, session
        // 19).
        const uint32_t* dw = reinterpret_cast<const uint32_t*>(raw_pointer_cast(tOrD.data()));
        const uint32_t ds_base = smem_u32(ss.ds.data());
        const int lane = opaque_tid() & 31, kr0 = get<0>(tXcXu(0)) & ~15;
        static_assert(int(size(std::decay_t<decltype(tXrY)>{})) % 8 == 0,
                      "whole stmatrix.x4 stores");
#pragma unroll
        for (int j = 0; j < int(size(tXrY)) / 8; ++j)
          stsm_x4<Tr::kDqT>(ds_base + ds_stsm_offset<Tr::kDqT, kBN>(lane, kr0, j, buf), dw[4 * j],
                            dw[4 * j + 1], dw[4 * j + 2], dw[4 * j + 3]);
        cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> wgmma reads
        if constexpr (Tr::kDqLate) {
          cutlass::arch::ClusterBarrier::arrive(&ss.ds_full[buf]);
          // dQ of the PREVIOUS tile (its dS, both halves, complete since before this tile's dV /
          // dK GEMMs were issued): a warpgroup never waits here for the other one's current tile,
          // so the two are not held in step (one's pointwise step can run beside the other's
          // GEMMs).
          if (dq_k >= 1) {
            dq_step(dq_k - 1, [&] { pipe.consumer_release(rd); });
          } else {
            wait_gemms();
            pipe.consumer_release(rd);
          }
        } else {
          named_bar_sync(128 * Tr::kConsumerWGs, 3);  // both warpgroups' dS written (id 3: free)
          dq_step(dq_k, [&] { pipe.consumer_release(rd); });
        }
        ++rd;
        ++dq_k;
      } else {
        wait_gemms();
        pipe.consumer_release(rd);
        ++rd;
      }
      n = nn;
      buf ^= 1;
    }

    // kDqLate: the last visited tile's dQ (its dS complete once both warpgroups wrote theirs).
    if constexpr (Tr::kDqLate) {
      if (dq_k >= 1) {
        cutlass::arch::ClusterBarrier::wait(&ss.ds_full[(dq_k - 1) & 1], ((dq_k - 1) >> 1) & 1);
        dq_step(dq_k - 1, [] {});
      }
    }

    // Persistent: the tile read anew after its loop (not kept live across it), before the arrive
    // that lets the producer publish the next one (the next K, V load while dK, dV are
    // stored).
    int cur = 0;
    if constexpr (kPersist) {
      cur = *reinterpret_cast<volatile int*>(&ss.item);
      cutlass::arch::ClusterBarrier::arrive(&ss.r_free);
    }
    // ---- epilogue: both warpgroups are past their last resident read; r1 holds dK / dQ and r2
    // dV (the sm80 swizzled row-major layout, swz<kHD>; persistent: a dS buffer), then each
    // warpgroup stores its own 64 rows.
    named_bar_sync(128 * Tr::kConsumerWGs, 0);
    if constexpr (kHasRab && kDkdv &&
                  !Tr::kFused) {  // every tile's rab gradient is in the CTA's accumulators
      if (rab_grad) Rab::flush(rs, p, p.max_seqlen, dmin, ctid, 128 * Tr::kConsumerWGs);
    }
    // Persistent: staged in the dS buffer the next tile writes second (the last visited tile's:
    // both warpgroups' dQ GEMMs read it before the barrier above), as r1 / r2 take the next
    // tile's K, V meanwhile.
    T* sB = reinterpret_cast<T*>(ss.r1.data());
    T* sA = reinterpret_cast<T*>(ss.r2.data());
    if constexpr (kPersist) {
      sB = reinterpret_cast<T*>(ss.ds.data()) + ((dq_k + 1) & 1) * (kBN * kBM);
      sA = sB + kBM * kHD;
    }
    // Persistent: the coordinates from opaque_tid, so that they are not hoisted out of the tile
    // loop (live across it, ptxas spilled in the pointwise step).
    Tensor tOcO = [&] {
      auto cO = make_identity_tensor(Shape<Int<kBM>, Int<kHD>>{});
      if constexpr (kPersist) {
        return mmaO.get_thread_slice(opaque_consumer_tid<128 * Tr::kConsumerWGs>()).partition_C(cO);
      } else {
        return thrO.partition_C(cO);
      }
    }();
    const float mul_b = p.alpha * p.scale;
#pragma unroll
    for (int e = 0; e < size(accB); e += 2) {
      const int r = get<0>(tOcO(e)), c = get<1>(tOcO(e));
      *reinterpret_cast<uint32_t*>(sB + swz<kHD>(r, c)) =
          Mma<T>::pack(accB(e) * mul_b, accB(e + 1) * mul_b);
      if constexpr (kDkdv)
        *reinterpret_cast<uint32_t*>(sA + swz<kHD>(r, c)) =
            Mma<T>::pack(accA(e) * p.scale, accA(e + 1) * p.scale);
    }
    named_bar_sync(128, 1 + w);
    const int rows = min(64, si.L - r0 - 64 * w);
    if constexpr (!kPersist) {
      if (rows <= 0) return;
    }
    if (rows > 0) {
      // The sequence's start and the head read again here rather than kept live across the
      // tiles (persistent: the published tile; fused: cu_seqlens[b], blockIdx.y, or with the tile
      // order its entry's start and blockIdx.x % H).
      if constexpr (kPersist) set_item(cur);
      int64_t start = si.start;
      if constexpr (Tr::kFused && !kPersist) sm90_tile_start_head(p, start, h);
      const int64_t row = start + r0 + 64 * w;
      if constexpr (kDkdv) {
        store_tile<64, kHD, 128>(p.dk.head<T>(row, h), p.dk.row_stride, sB + 64 * w * kHD, rows,
                                 p.d_qk, p.dk.vec, tid & 127);
        store_tile<64, kHD, 128>(p.dv.head<T>(row, h), p.dv.row_stride, sA + 64 * w * kHD, rows,
                                 p.d_v, p.dv.vec, tid & 127);
      } else {
        store_tile<64, kHD, 128>(p.dq.head<T>(row, h), p.dq.row_stride, sB + 64 * w * kHD, rows,
                                 p.d_qk, p.dq.vec, tid & 127);
      }
    }
    if constexpr (!kPersist) break;
  }
#endif
}

template <typename T, int kHeadDim, bool kDkdv, bool kFusedDq, bool kRab = false>
void launch_bwd_pass(const HstuAttnParams& p, int* dq_sem, cudaStream_t stream) {
  using Tr = BwdTraits<T, kHeadDim, kDkdv, kFusedDq, kRab>;
  HSTU_CHECK(p.total_tokens < (int64_t(1) << 31), "sm90 attention backward: ", p.total_tokens,
             " tokens exceed TMA's 32-bit coordinates");
  const HeadsView& r1 = kDkdv ? p.k : p.q;
  const HeadsView& r2 = kDkdv ? p.v : p.d_o;
  const HeadsView& s1 = kDkdv ? p.q : p.k;
  const HeadsView& s2 = kDkdv ? p.d_o : p.v;
  BwdParams<Tr> P;
  P.p = p;
  P.dq_sem = dq_sem;
  P.sem_blocks = sm90_bwd_query_blocks(p.max_seqlen);
  const auto tile_r = Shape<Int<Tr::kBM>, Int<kHeadDim>>{};
  const auto tile_s = Shape<Int<Tr::kBN>, Int<kHeadDim>>{};
  P.tma_r1 = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(r1, p.total_tokens, p.d_qk, p.num_heads),
                           typename Tr::SmemLayoutR{}, tile_r, _1{});
  P.tma_r2 = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(r2, p.total_tokens, p.d_v, p.num_heads),
                           typename Tr::SmemLayoutR{}, tile_r, _1{});
  P.tma_s1 = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(s1, p.total_tokens, p.d_qk, p.num_heads),
                           take<0, 2>(typename Tr::SmemLayoutS{}), tile_s, _1{});
  P.tma_s2 = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<Tr>(s2, p.total_tokens, p.d_v, p.num_heads),
                           take<0, 2>(typename Tr::SmemLayoutS{}), tile_s, _1{});
  const dim3 grid = sm90_grid<Tr::kBM>(p);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  auto go = [&](auto kernel, int smem, dim3 g) {
    // Every call (a host-side attribute, legal inside stream capture): the rab variant's size
    // varies with max_seqlen.
    HSTU_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<g, Tr::kThreads, smem, stream>>>(P);
    HSTU_CUDA_CHECK(cudaGetLastError());
  };
  if constexpr (!Tr::kFused) {
    if (p.rab_pos) {
      using Rab = BwdRabSmem<Tr::kBM, Tr::kBN, Tr::kConsumerWGs, kDkdv>;
      HSTU_CHECK(p.rab_bkt != nullptr,
                 "sm90 attention backward: rab needs the precomputed time buckets "
                 "(rab_buckets.cuh)");
      const int smem = Tr::kSmemBytes + Rab::bytes(p.max_seqlen);
      HSTU_CHECK(smem <= kSm90MaxSmem, "sm90 attention backward: rab at max_seqlen ", p.max_seqlen,
                 " needs ", smem, " bytes of shared memory, more than ", kSm90MaxSmem,
                 " (sm90_bwd_supported sends such calls to sm80)");
      go(hstu_attn_bwd_sm90_kernel<T, Tr, kDkdv, true>, smem, grid);
      return;
    }
  } else if constexpr (Tr::kRabFused) {
    using Rab = BwdRabSmem<Tr::kBM, 64, Tr::kConsumerWGs, false>;
    static_assert(Tr::kSmemBytes + Rab::bytes(kSm90BwdRabFusedMaxSeqlen) <= kSm90MaxSmem,
                  "kSm90BwdRabFusedMaxSeqlen: the fused rab form's shared memory");
    HSTU_CHECK(p.rab_pos && p.rab_bkt && sm90_bwd_rab_fused_fits(kHeadDim, p.max_seqlen),
               "sm90 attention backward: the fused rab form needs the precomputed buckets and at "
               "most ",
               kSm90BwdRabFusedMaxSeqlen, " tokens a sequence (", p.max_seqlen, ")");
    go(hstu_attn_bwd_sm90_kernel<T, Tr, kDkdv, true>, Tr::kSmemBytes + Rab::bytes(p.max_seqlen),
       grid);
    sm90_count_persist_launch(Sm90Pass::kBwdRabFused);
    return;
  } else {
    HSTU_CHECK(!p.rab_pos, "sm90 attention backward: the fused dQ form takes rab at d 128 only");
    if constexpr (Tr::kQ128) {
      // Persistent (sm90_bwd_persist; ordered adds): one CTA an SM claiming the grid's tiles
      // from the int after the tickets (zeroed with them).
      if (dq_sem && sm90_bwd_persist(p)) {
        P.n_items = static_cast<int>(grid.x * grid.y * grid.z);
        P.items_x = static_cast<int>(grid.x);
        P.item_counter = dq_sem + sm90_bwd_tickets(p.batch, p.num_heads, p.max_seqlen);
        const dim3 g(static_cast<unsigned>(std::min(P.n_items, sm90_sm_count())));
        go(hstu_attn_bwd_sm90_kernel<T, Tr, kDkdv, false, true>, Tr::kSmemBytes, g);
        sm90_count_persist_launch(Sm90Pass::kBwd);
        return;
      }
    }
  }
  if constexpr (!Tr::kRabFused)
    go(hstu_attn_bwd_sm90_kernel<T, Tr, kDkdv, false>, Tr::kSmemBytes, grid);
}

}  // namespace hstu::cuda::attn::sm90
