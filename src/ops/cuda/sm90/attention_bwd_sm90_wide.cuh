// attention_bwd_sm90_wide.cuh — the Hopper (sm_90a) HSTU attention backward for head widths
// padded to 256: the split scheme of attention_bwd_sm90.cuh (a key-major dK/dV kernel beside a
// query-major dQ kernel, each output written once: deterministic, no atomics), with the work of a
// CTA divided between its two consumer warpgroups by operand ("roles") instead of by rows.
//
// Why: at d 256 a warpgroup owning 64 rows of both dK and dV needs 2 x 64 x 256 fp32
// accumulators = 256 registers a thread, more than a thread has. Here a CTA owns kBM = 64
// resident rows (keys for dK/dV, queries for dQ) and streams kBN = 64-row blocks:
//   - warpgroup 0 computes X = K Q^T (S^T; S = Q K^T in the dQ kernel) and the whole pointwise
//     step (bwd_apply: masks, SiLU, SiLU'): P stays in its registers for dV += P^T dO
//     (wgmma RS m64n256k64, dK/dV kernel only) and F = SiLU'(S), masked, goes to shared memory
//     (fp32, in register order: both warpgroups' fragments have the same layout);
//   - warpgroup 1 computes Y = V dO^T (dP^T; dP = dO V^T), reads F, forms dS = Y F and runs
//     dK += dS^T Q (dQ += dS K), wgmma RS m64n256k64; so warpgroup 0 owns dV [64, 256] and
//     warpgroup 1 dK or dQ [64, 256] (128 registers each).
// The hand-off is one-way: warpgroup 0 never waits for warpgroup 1's results, only for a free F
// buffer (two, so it may run a block ahead); warpgroup 1 waits for F. One named barrier pair per
// buffer (full: 0 arrives, 1 waits; free: 1 arrives, 0 waits) instead of the column split's three
// two-way barriers per block. The dQ kernel's warpgroup 0 releases a stage once X is done.
// GEMMs per tile pair: 4 in the dK/dV kernel and 3 in the dQ kernel (7 for the 5 counted).
// Shared memory: resident 2 x 32 KB, streamed 2 stages x 2 x 32 KB, F 2 x 16 KB = 224 KB.
//
// Measured (H200, B32 H4 causal bf16, deterministic backward, TFLOPS, roles / the column split
// it replaced, same run): 287.2 / 282.8 at L 4096, 239.2 / 232.6 at 1024, 202.3 / 196.1 at 128 x
// 512; ncu at 4096: dK/dV kernel 5.01 / 5.26 ms (barrier stalls per issued instruction 1.29 /
// 2.30, wait 2.38 / 1.99), dQ kernel 4.48 / 4.47 ms. The column split (before): each warpgroup
// owned output columns [128 w, 128 w + 128) of dK and dV, computed one of X / Y (m64n64k256),
// exchanged half its fp32 accumulators and then half the packed P / dS words with the other
// (three two-way barriers a block: the GEMMs and the pointwise step took turns); H100 290.0.
// NOTE: tried and dropped:
//   - FlashAttention-3's intra-warpgroup overlap on top of the roles (the next block's X / Y
//     GEMM issued before this block's dV / dK / dQ GEMM, the next pointwise step while the latter
//     runs, as the forward does): 220.2 vs 284.0 for the column split (H200, same run); ncu: dK/dV
//     6.42 ms, dQ 6.03 ms, tensor pipe 36 % / 29 % active, long-scoreboard stalls 1.6 / 2.0 per
//     issued instruction (from 0.5). Getting it to compile without serialised wgmma took a
//     peeled last block (issues and waits under one run-time test: ptxas C7514; a wgmma in
//     flight across the back edge: C7515) and F made in chunks of 8 (104 bytes of spills).
//   - column split, each warpgroup applying the whole pointwise step (no second exchange):
//     251.6 (H200); the column split with the next S / dP GEMM before the pointwise step:
//     960 bytes of spills, 175.2 (H100).
// Where the time goes (ncu, dK/dV kernel, roles): 4.5 K cycles per 64 x 64 tile against 2 K of
// tensor work at the peak rate; warpgroup 0 (GEMM, the whole pointwise step, GEMM, in turn) is
// the long pole (warpgroup 1 waits on F: barrier stalls), DRAM 7 % busy. Next: balance the
// pointwise step between the warpgroups without a two-way wait, or a fused dQ (5 GEMMs).
//
// Fused form (WideBwdTraits<T, true, true>; HSTU_ATTN_SM90_FUSED=1, not the default: measured
// slower, below): the dK/dV kernel alone, 5 GEMMs per tile pair instead of 7, dQ added to the fp32
// accumulator of attention_bwd_sm90_dq.cuh ([H, 4, T, 64], tickets in descending key order,
// bulk reduce-adds: bit-identical run to run; unordered when no determinism is asked), then the
// convert kernel in 32-row blocks. Changes against the split dK/dV kernel:
//   - kBN = 32 streamed queries per block (Q, dO: 2 stages of 16 KB each), because one tile's
//     dQ partial [kBN, 256] fp32 must be staged in shared memory and double-buffered (the writer
//     of a slot may wait for its ticket): at kBN = 64 that is 2 x 64 KB beside 224 KB of
//     operands. Shared memory: 64 (K, V) + 64 (Q, dO) + 16 (F) + 8 (dS, 2 buffers) + 64 (dQ, 2
//     slots) = 216 KB.
//   - warpgroup 1 computes the dQ GEMM (keeps the one-way hand-off: warpgroup 0 never waits for
//     it): dS^T goes from its registers to shared memory (key-contiguous, ds_byte_offset_wide;
//     16-bit stores), then dQ^T [256, kBN] = K^T dS^T as four m64 n32 k64 wgmmas (A: the
//     resident K read MN-major; B: dS^T, K-major), 16 accumulator registers each, two in flight
//     while the other two are staged ([quarter][query][64 floats], dq_col_pos: conflict-free
//     64-bit stores). Warpgroup 1 thus issues 3 of the 5 GEMMs and warpgroup 0 the
//     pointwise step (the split kernel's balance: warpgroup 0 was the long pole).
//   - writers: threads 32 and 64 of the producer warpgroup (setmaxnreg 56 / 224, as the fused
//     d 64 / 128 kernel), one per slot: wait for the staged tile, the ticket, four bulk adds (one
//     per quarter, rows x 256 bytes each), completion, pass the ticket, free the slot. The
//     tickets: one per (sequence, head, 32-query tile), the 2 per 64-query block that dq_sem
//     holds (attention_sm90.h).
//   - per-tile accumulators and coordinates (opaque_tid), the stage and buffers from the tile
//     count, the tile kind from the search (next_kind): ptxas (CUDA 13.0) reports 0 spills and no
//     C751x for bf16 and fp16; SASS: 7 wgmma groups (arrive) and 4 waits per tile.
// Estimate (per SM; H100/H200: 4096 dense bf16 FLOP and 128 bytes of shared memory a cycle), per
// 64 x 64 (keys x queries) pair of the causal 32 x 4096 x 4 x 256 problem:
//                         tensor cycles   shared-memory bytes (cycles)
//   split (2 kernels)     7 x 512 = 3584  288 K (dK/dV) + 256 K (dQ) = 544 K (4352)
//   fused (2 tiles)       5 x 512 = 2560  2 x 292 K = 584 K (4672)
// fused per 64 x 32 tile: X, Y 48 K each (A = K / V, 32 K, read again for every 32 queries), dV,
// dK 16 K each, dQ 48 K (K^T 32 K + dS^T), TMA 32 K, F 16 K, dS 4 K, dQ staging 32 K written +
// 32 K read by the bulk adds. So the fused form saves 29 % of the tensor work but not shared-memory
// traffic (+7 %): the split form ran at 8.4 K cycles per pair (9.5 ms, H200), 52 % of its
// shared-memory bound, 43 % of its tensor bound. Break-even needs the fused kernel at >= 56 % of
// its shared-memory bound; 400 TFLOPS needs ~78 %. Also: the dQ adds move 64 KB of fp32 per pair
// through L2 (2.2 TB/s over 132 SMs at 7 K cycles per pair), twice the d 128 fused form's ratio.
// The expectation was 0.9x to 1.3x the split form. Measured (H200, B32 L4096 H4 causal bf16,
// session 22): 320 TFLOPS against the split form's 351 (jagged uniform lengths 310 against 373),
// so split is the default (sm90_fused_faster).
// Masks, tile classification, the producer and the epilogue's stores are those of
// attention_bwd_sm90.cuh (bwd_apply, bwd_produce, store_tile). No rab (sm90_bwd_supported keeps
// rab on sm80). Shapes: q/k/v/d_o strided column views [T, H * stride], TMA views (token, column,
// head) with the true head widths as column extents (zero-filled up to 256).
#pragma once

#include "ops/cuda/sm90/attention_bwd_sm90.cuh"

namespace hstu::cuda::attn::sm90 {

// kDkdv: the key-major dK/dV kernel, else the query-major dQ kernel. kFusedDq (dK/dV kernel
// only): the fused form, which also adds each tile's partial dQ to the fp32 accumulator (see the
// header: kBN = 32, the dQ GEMM on warpgroup 1, staged chunks, writer threads, tickets).
template <typename T, bool kDkdv, bool kFusedDq = false>
struct WideBwdTraits {
  using Element = typename CuteElem<T>::type;
  static constexpr bool kFused = kDkdv && kFusedDq;
  static constexpr int kHD = 256;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kBM = 64;  // resident rows (keys for dK/dV, else queries)
  static_assert(kBM == sm90_bwd_block_rows(kHD), "attention_sm90.h's block rows");
  static constexpr int kBN = kFused ? 32 : 64;  // streamed rows per block
  static constexpr int kStages = 2;
  static constexpr int kFBufs = 2;  // F buffers: warpgroup 0 runs up to one block ahead
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // Fused: the producer warpgroup's two writer threads walk the tiles too (56 / 224, the valid
  // split of the fused d 64 / 128 kernel: 2 (224 - 168) = 168 - 56).
  static constexpr int kProducerRegs = kFused ? 56 : 24;
  static constexpr int kConsumerRegs = kFused ? 224 : 240;

  using OneWG = Layout<Shape<_1, _1, _1>>;
  // X / Y [kBM, kBN] = A B^T: both operands K-major in shared memory.
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kBN>, Int<kHD>>>(),
      OneWG{}));
  // Acc [kBM, kHD] += A [kBM, kBN] B [kBN, kHD]: A (P or dS) from registers, B^T MN-major in
  // shared memory (a whole streamed operand).
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kHD>, Int<kBN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      OneWG{}));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutR = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBM>, Int<kHD>>{}));
  using SmemLayoutS =
      decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBN>, Int<kHD>, Int<kStages>>{}));
  // (column, streamed row, stage) -> SmemLayoutS: the transposed view for the MN-major B operand.
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

  static constexpr int kAccPerThread = kBM * kBN / 128;

  // Fused dQ (warpgroup 1): dQ^T [kHD, kBN] = K^T [kHD, kBM] dS^T [kBM, kBN], four quarters of 64
  // head columns, each one m64 n32 k64 wgmma: K^T the resident K read MN-major (A), dS^T from
  // shared memory, key-contiguous (the K-major B operand: dS [kBN queries, kBM keys, 2 buffers],
  // ds_byte_offset_wide). Staged per tile as [quarter 4][query kBN][64] floats (dq_col_pos).
  static constexpr int kDqQuarters = kHD / 64;
  static constexpr int kStageFloats = kDqQuarters * kBN * 64;  // one tile's dQ (32 KB)
  using TiledMmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBN>, Int<kBM>>, GMMA::Major::MN,
                           GMMA::Major::K>(),
      OneWG{}));
  using SmemLayoutdS = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                              Shape<Int<kBN>, Int<kBM>, _2>{}));
  // The resident K (key, hd) as the dQ GEMM's A operand: (hd column of a quarter, key, quarter).
  using SmemLayoutKOp = decltype(composition(
      SmemLayoutR{},
      Layout<Shape<_64, Int<kBM>, Int<kDqQuarters>>, Stride<Int<kBM>, _1, Int<kBM * 64>>>{}));

  using Pipe = cutlass::PipelineTmaAsync<kStages>;
  struct SharedStorageSplit {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r1;  // then dK / dQ
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r2;  // then dV
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s1;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s2;
    // F [kBM, kBN] of a block in register order: float4 k of thread t at f[buf][4 (128 k + t)].
    alignas(16) float f[kFBufs][kBM * kBN];
    typename Pipe::SharedStorage pipe;
    alignas(8) uint64_t barrier_r;
  };
  // Fused: 64 + 32 (2 stages of 32-row Q, dO) + 16 (F) + 8 (dS) + 64 (dQ, 2 slots) = 216 KB.
  struct SharedStorageFused {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r1;  // then dK
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r2;  // then dV
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s1;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s2;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutdS>, 1024> ds;
    alignas(16) float f[kFBufs][kBM * kBN];
    // [slot 2][kStageFloats]: the dQ of the k-th visited block in slot k & 1.
    alignas(128) cute::array_aligned<float, 2 * kStageFloats, 128> dq_stage;
    typename Pipe::SharedStorage pipe;
    alignas(8) uint64_t barrier_r;
    uint64_t dq_full[2], dq_empty[2];
  };
  using SharedStorage = std::conditional_t<kFused, SharedStorageFused, SharedStorageSplit>;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "sm90 wide backward: shared memory of one CTA");
  static constexpr uint32_t kRBytes = kBM * kHD * sizeof(Element);
  static constexpr uint32_t kSBytes = kBN * kHD * sizeof(Element);
};

// Named barriers of the two consumer warpgroups (CUTLASS offsets the ids past its reserved
// ones): F buffer b full (warpgroup 0 arrives, 1 waits) and free (1 arrives, 0 waits); the
// epilogue's two.
// Fused: warpgroup 1's dS stores before its dQ wgmma (kWideDs).
enum WideBarrier : int {
  kWideFFull = 1,
  kWideFFree = 3,
  kWideEpiFree = 5,
  kWideEpiFull = 6,
  kWideDs = 7
};

// Fragment words [kW0, kW1) from accumulator pairs (acc_to_frag on a range).
template <typename T, int kW0, int kW1, typename TAcc>
__device__ __forceinline__ void pack_words(const TAcc& acc, uint32_t* w) {
#pragma unroll
  for (int e = kW0; e < kW1; ++e) w[e] = Mma<T>::pack(acc(2 * e), acc(2 * e + 1));
}

// Fused: the writer of dQ slot sl (a thread of the producer warpgroup): for the k-th visited
// streamed block, k = sl mod 2, waits for warpgroup 1's staged tile, then adds its four quarters
// (one bulk reduce-add each: `rows` contiguous rows of 64 floats in the accumulator
// [H, 4, T, 64]) in descending key-block order behind the tile's ticket, waits for completion,
// passes the ticket on and frees the slot. Unordered (no tickets): adds, waits for the reads.
template <typename Tr, typename SS, typename Next>
__device__ __forceinline__ void wide_dq_writer(const BwdParams<Tr>& P, SS& ss, const SeqInfo& si,
                                               int blk, int h, int b, int n_blocks, int sl,
                                               Next&& next_visible) {
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN;
  const HstuAttnParams& p = P.p;
  const int key_blocks = (si.L + kBM - 1) / kBM;
  const int64_t sem0 = (int64_t(b) * p.num_heads + h) * P.sem_blocks;
  const bool ordered = P.dq_sem != nullptr;
  const int64_t quarter = p.total_tokens * 64;  // floats between the accumulator's quarters
  const float* src = ss.dq_stage.data() + sl * Tr::kStageFloats;
  int n = next_visible(0), k = 0;
  if (sl == 1 && n < n_blocks) n = next_visible(n + 1), k = 1;
#pragma unroll 1
  while (n < n_blocks) {
    cutlass::arch::ClusterBarrier::wait(&ss.dq_full[sl], (k >> 1) & 1);
    const int q0 = n * kBN;
    const uint32_t bytes = uint32_t(min(kBN, si.L - q0)) * 256u;
    float* dst = p.dq_accum + (int64_t(h) * Tr::kDqQuarters * p.total_tokens + si.start + q0) * 64;
    if (ordered) {
      // Ticket = key_blocks - (the key block that added last), 0 before the first (as in the
      // d 64 / 128 fused form, attention_bwd_sm90_dq.cuh): wait for the next visible key block
      // above this one.
      int* sem = P.dq_sem + sem0 + n;
      int above = blk + 1;
      while (above < key_blocks && tile_kind(si, p, q0, kBN, above * kBM, kBM) == kTileSkip)
        ++above;
      const int turn = above < key_blocks ? key_blocks - above : 0;
      wait_ticket(sem, turn);
      fence_proxy_async_global();
#pragma unroll 1
      for (int j = 0; j < Tr::kDqQuarters; ++j) {
        if (turn == 0) {
          bulk_to_global<false>(dst + j * quarter, src + j * kBN * 64, bytes);  // the first
        } else {
          bulk_to_global<true>(dst + j * quarter, src + j * kBN * 64, bytes);
        }
      }
      bulk_wait_all();
      fence_proxy_async_global();
      st_release(sem, key_blocks - blk);
    } else {
#pragma unroll 1
      for (int j = 0; j < Tr::kDqQuarters; ++j)
        bulk_to_global<true>(dst + j * quarter, src + j * kBN * 64, bytes);
      bulk_wait_read();
    }
    cutlass::arch::ClusterBarrier::arrive(&ss.dq_empty[sl]);
    n = next_visible(n + 1);
    if (n < n_blocks) n = next_visible(n + 1);
    k += 2;
  }
  bulk_wait_all();
}

// Warpgroup w's shared-memory operands: its resident rows R, its streamed rows S, and the B
// operand of its second GEMM: dO (dV += P^T dO) or Q / K (dK / dQ += dS ..).
template <typename Tr, typename SS>
__device__ __forceinline__ auto wide_operands(SS& ss, int w) {
  return cute::make_tuple(
      make_tensor(make_smem_ptr(w == 0 ? ss.r1.data() : ss.r2.data()), typename Tr::SmemLayoutR{}),
      make_tensor(make_smem_ptr(w == 0 ? ss.s1.data() : ss.s2.data()), typename Tr::SmemLayoutS{}),
      make_tensor(make_smem_ptr(w == 0 ? ss.s2.data() : ss.s1.data()),
                  typename Tr::SmemLayoutSt{}));
}

// Fused: the consumer loop (warpgroup w; acc = dV for w = 0, dK for w = 1). Warpgroup 0 as in
// the split kernel (X, pointwise, F, dV); warpgroup 1: Y, dS = Y F, dS^T -> shared memory, dK
// += dS^T Q, then dQ^T = K^T dS^T in quarters of 64 head columns (two wgmmas in flight at a
// time), staged for the writers. Per-tile accumulators and coordinates (opaque_tid), the stage
// and the buffers from the tile count k (the lessons of the fused d 128 kernel: nothing but acc
// and k carried across the loop).
template <typename T, typename Tr, typename SS, typename Pipe, typename TAcc, typename Kind>
__device__ __forceinline__ void wide_fused_consumer(const BwdParams<Tr>& P, SS& ss, Pipe& pipe,
                                                    const SeqInfo& si, int r0, int n_blocks,
                                                    int tiles, int w, TAcc& acc, Kind&& kind_of) {
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kN = Tr::kAccPerThread;
  using Element = typename Tr::Element;
  const HstuAttnParams& p = P.p;
  const int t = threadIdx.x & 127;
  auto [sR, sS, sSt] = wide_operands<Tr>(ss, w);
  Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename Tr::SmemLayoutdS{});
  Tensor sK = make_tensor(make_smem_ptr(ss.r1.data()), typename Tr::SmemLayoutKOp{});
  typename Tr::TiledMmaS mmaS;
  typename Tr::TiledMmaO mmaO;
  typename Tr::TiledMmaDq mmaDq;
  auto thrS = mmaS.get_thread_slice(t);
  auto thrO = mmaO.get_thread_slice(t);
  auto thrDq = mmaDq.get_thread_slice(t);
  Tensor tXrR = thrS.partition_fragment_A(sR);     // descriptors
  Tensor tXrS = thrS.partition_fragment_B(sS);     // (.., stage)
  Tensor tOrSt = thrO.partition_fragment_B(sSt);   // (.., stage)
  Tensor tDrK = thrDq.partition_fragment_A(sK);    // (.., quarter)
  Tensor tDrdS = thrDq.partition_fragment_B(sdS);  // (.., buffer)
  using FragLayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBN / 16>>>;
  static_assert(size(FragLayout{}) == kN, "A fragment size");
  char* ds_base = reinterpret_cast<char*>(ss.ds.data());
  // The next visible block from n and its kind (the search's last tile_kind, not recomputed).
  auto next_kind = [&](int n, int& kind) {
    for (; n < n_blocks; ++n) {
      kind = kind_of(n);
      if (kind != kTileSkip) break;
    }
    return n;
  };
  int k = 0, kind = kTileSkip;
#pragma unroll 1
  for (int n = next_kind(0, kind); n < n_blocks; n = next_kind(n + 1, kind), ++k) {
    const cutlass::PipelineState<Tr::kStages> rd(k % Tr::kStages, (k / Tr::kStages) & 1, k);
    const int st = rd.index(), buf = k & 1;
    Tensor tXrX = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});  // X or Y, per tile
    Tensor tOrA = make_tensor<Element>(FragLayout{});                       // P or dS
    uint32_t* wa = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrA.data()));
    pipe.consumer_wait(rd);
    wg_gemm<true>(mmaS, tXrR, tXrS(_, _, _, st), tXrX);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tXrX);
    float4* fb = reinterpret_cast<float4*>(ss.f[buf]);
    Tensor tXcX = mmaS.get_thread_slice(opaque_tid() & 127)
                      .partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));
    if (w == 0) {
      Tensor tXrF = make_fragment_like(tXrX);
      fill(tXrF, 1.f);
      bwd_apply<true, kBM, kBN, 0, -1, false, 0, kTanhSilu<T>>(tXrX, tXrF, tXcX, p, si, r0, n * kBN,
                                                               kind);
      if (k >= Tr::kFBufs) named_bar_sync(256, kWideFFree + buf);
#pragma unroll
      for (int e = 0; e < kN; e += 4)
        fb[128 * (e / 4) + t] = make_float4(tXrF(e), tXrF(e + 1), tXrF(e + 2), tXrF(e + 3));
      named_bar_arrive(256, kWideFFull + buf);
      pack_words<T, 0, kN / 2>(tXrX, wa);
      warpgroup_fence_operand(tOrA);
      wg_gemm<false>(mmaO, tOrA, tOrSt(_, _, _, st), acc);  // dV += P^T dO
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      warpgroup_fence_operand(tOrA);
      pipe.consumer_release(rd);
    } else {
      named_bar_sync(256, kWideFFull + buf);
#pragma unroll
      for (int e = 0; e < kN; e += 4) {
        const float4 f = fb[128 * (e / 4) + t];
        wa[e / 2] = Mma<T>::pack(tXrX(e) * f.x, tXrX(e + 1) * f.y);
        wa[e / 2 + 1] = Mma<T>::pack(tXrX(e + 2) * f.z, tXrX(e + 3) * f.w);
      }
      if (k + Tr::kFBufs < tiles) named_bar_arrive(256, kWideFFree + buf);
      // dS^T (key r, queries c, c + 1: the halves of one packed word) -> dS (query, key, buf),
      // key-contiguous; one 16-bit store per element.
      const Element* dh = reinterpret_cast<const Element*>(raw_pointer_cast(tOrA.data()));
#pragma unroll
      for (int e = 0; e < kN; e += 2) {
        const int r = get<0>(tXcX(e)), c = get<1>(tXcX(e));
        *reinterpret_cast<Element*>(ds_base + ds_byte_offset_wide(c, r, buf)) = dh[e];
        *reinterpret_cast<Element*>(ds_base + ds_byte_offset_wide(c + 1, r, buf)) = dh[e + 1];
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> wgmma reads
      named_bar_sync(128, kWideDs);              // every thread's dS before the dQ wgmma
      warpgroup_fence_operand(tOrA);
      wg_gemm<false>(mmaO, tOrA, tOrSt(_, _, _, st), acc);  // dK += dS^T Q
      Tensor accQ0 = partition_fragment_C(mmaDq, Shape<_64, Int<kBN>>{});
      Tensor accQ1 = partition_fragment_C(mmaDq, Shape<_64, Int<kBN>>{});
      wg_gemm<true>(mmaDq, tDrK(_, _, _, 0), tDrdS(_, _, _, buf), accQ0);
      wg_gemm<true>(mmaDq, tDrK(_, _, _, 1), tDrdS(_, _, _, buf), accQ1);
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      warpgroup_fence_operand(tOrA);
      warpgroup_fence_operand(accQ0);
      warpgroup_fence_operand(accQ1);
      pipe.consumer_release(rd);
      // Quarters 2, 3 run while 0, 1 are staged (4 x 16 accumulator registers live here).
      Tensor accQ2 = partition_fragment_C(mmaDq, Shape<_64, Int<kBN>>{});
      Tensor accQ3 = partition_fragment_C(mmaDq, Shape<_64, Int<kBN>>{});
      wg_gemm<true>(mmaDq, tDrK(_, _, _, 2), tDrdS(_, _, _, buf), accQ2);
      wg_gemm<true>(mmaDq, tDrK(_, _, _, 3), tDrdS(_, _, _, buf), accQ3);
      // The slot of the k-th block (its writer freed it after block k - 2), then the quarters:
      // rows are queries, 64 floats each, columns permuted by dq_col_pos.
      cutlass::arch::ClusterBarrier::wait(&ss.dq_empty[buf], ((k >> 1) & 1) ^ 1);
      float* stage = ss.dq_stage.data() + buf * Tr::kStageFloats;
      auto put = [&](const auto& accQ, int j) {
        Tensor tDcQ = mmaDq.get_thread_slice(opaque_tid() & 127)
                          .partition_C(make_identity_tensor(Shape<_64, Int<kBN>>{}));
        stage_dq_transposed<256>(stage + j * kBN * 64, accQ, tDcQ);  // (head column, query)
      };
      put(accQ0, 0);
      put(accQ1, 1);
      warpgroup_wait<0>();
      warpgroup_fence_operand(accQ2);
      warpgroup_fence_operand(accQ3);
      put(accQ2, 2);
      put(accQ3, 3);
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> the bulk copy's reads
      cutlass::arch::ClusterBarrier::arrive(&ss.dq_full[buf]);
    }
  }
}

template <typename T, typename Tr, bool kDkdv>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    hstu_attn_bwd_sm90_wide_kernel(const __grid_constant__ BwdParams<Tr> P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Pipe = typename Tr::Pipe;
  using SS = typename Tr::SharedStorage;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kHD = Tr::kHD, kN = Tr::kAccPerThread;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SS& ss = *reinterpret_cast<SS*>(smem_raw);
  const HstuAttnParams& p = P.p;

  // Heavy blocks first under causal masks: early key blocks (dK/dV), late query blocks (dQ); with
  // p.tile_order (attn_tile_order.h) also sequences longest first. Fused: late key blocks first,
  // as in the fused d 64 / 128 kernel (a key block adds its dQ after every later key block: a CTA
  // only ever waits for CTAs launched before it).
  constexpr bool kDesc = !kDkdv || Tr::kFused;
  const Sm90Tile tl = sm90_tile<kBM, kDesc>(p);
  const int blk = tl.blk, h = tl.h;
  const SeqInfo& si = tl.si;
  const int r0 = blk * kBM;
  if (r0 >= si.L) return;  // the whole CTA, before any barrier (and past the list's end)
  const int tid = threadIdx.x, wg = tid / 128;
  // Streamed blocks: the query kernel stops after the last key block its rows can see.
  const int n_blocks = kDkdv ? (si.L + kBN - 1) / kBN : key_block_end(si, p, r0, kBM, kBN);
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
      for (int i = 0; i < 2; ++i) {
        cutlass::arch::ClusterBarrier::init(&ss.dq_full[i], 128);  // warpgroup 1's threads
        cutlass::arch::ClusterBarrier::init(&ss.dq_empty[i], 1);   // the slot's writer
      }
    }
  }
  typename Pipe::Params pp;
  pp.transaction_bytes = 2 * Tr::kSBytes;  // both streamed operands on one barrier
  pp.role = wg == 0 ? Pipe::ThreadCategory::Producer : Pipe::ThreadCategory::Consumer;
  pp.is_leader = tid == 0;
  pp.num_consumers = 128 * Tr::kConsumerWGs;
  Pipe pipe(ss.pipe, pp, Shape<_1, _1, _1>{});
  __syncthreads();  // barriers initialised

  if (wg == 0) {  // ---- producer
    cutlass::arch::warpgroup_reg_dealloc<Tr::kProducerRegs>();
    if (tid == 0) bwd_produce(P, ss, pipe, si, blk, h, n_blocks, next_visible);
    if constexpr (Tr::kFused) {
      if (tid == 32 || tid == 64)
        wide_dq_writer<Tr>(P, ss, si, blk, h, si.b, n_blocks, tid / 32 - 1, next_visible);
    }
    return;
  }

  // ---- consumers: warpgroup w = wg - 1 (0: X, pointwise, dV; 1: Y, dS, dK / dQ)
  cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, t = tid & 127, w = wg - 1;
  auto [sR, sS, sSt] = wide_operands<Tr>(ss, w);
  typename Tr::TiledMmaS mmaS;
  typename Tr::TiledMmaO mmaO;
  auto thrS = mmaS.get_thread_slice(t);
  auto thrO = mmaO.get_thread_slice(t);
  Tensor tXrR = thrS.partition_fragment_A(sR);    // descriptors
  Tensor tXrS = thrS.partition_fragment_B(sS);    // (.., stage)
  Tensor tOrSt = thrO.partition_fragment_B(sSt);  // (.., stage)
  // acc: dV [kBM, kHD] (warpgroup 0, dK/dV kernel) or dK / dQ (warpgroup 1).
  Tensor acc = partition_fragment_C(mmaO, Shape<Int<kBM>, Int<kHD>>{});
  Tensor tXcX = thrS.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));
  Tensor tXrX = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});  // X or Y
  static_assert(size(decltype(tXrX){}) == kN, "F slots");
  using FragLayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBN / 16>>>;
  Tensor tOrA = make_tensor<typename Tr::Element>(FragLayout{});  // P or dS
  static_assert(size(FragLayout{}) == kN, "A fragment size");
  uint32_t* wa = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrA.data()));
  const bool has_o = kDkdv || w == 1;  // whether the warpgroup runs the second GEMM
  int tiles = 0;  // visible streamed blocks (warpgroup 1 frees an F buffer only for a later one)
  for (int n = next_visible(0); n < n_blocks; n = next_visible(n + 1)) ++tiles;
  clear(acc);
  warpgroup_fence_operand(acc);

  reinterpret_cast<Barrier*>(&ss.barrier_r)->wait(0);
  if constexpr (Tr::kFused) {
    wide_fused_consumer<T, Tr>(P, ss, pipe, si, r0, n_blocks, tiles, w, acc, kind_of);
  } else {
    cutlass::PipelineState<Tr::kStages> rd;
    int k = 0;
#pragma unroll 1
    for (int n = next_visible(0); n < n_blocks; n = next_visible(n + 1), ++k) {
      pipe.consumer_wait(rd);
      wg_gemm<true>(mmaS, tXrR, tXrS(_, _, _, rd.index()), tXrX);  // X or Y
      warpgroup_wait<0>();
      warpgroup_fence_operand(tXrX);
      if (!has_o) pipe.consumer_release(rd);
      float4* fb = reinterpret_cast<float4*>(ss.f[k & 1]);
      if (w == 0) {
        // P = SiLU(S) in place, F = SiLU'(S) (bwd_apply's dS for dP = 1), both masked.
        Tensor tXrF = make_fragment_like(tXrX);
        fill(tXrF, 1.f);
        bwd_apply<kDkdv, kBM, kBN, 0, -1, false, 0, kTanhSilu<T>>(tXrX, tXrF, tXcX, p, si, r0,
                                                                  n * kBN, kind_of(n));
        if (k >= Tr::kFBufs) named_bar_sync(256, kWideFFree + (k & 1));
#pragma unroll
        for (int e = 0; e < kN; e += 4)
          fb[128 * (e / 4) + t] = make_float4(tXrF(e), tXrF(e + 1), tXrF(e + 2), tXrF(e + 3));
        named_bar_arrive(256, kWideFFull + (k & 1));
        if constexpr (kDkdv) pack_words<T, 0, kN / 2>(tXrX, wa);
      } else {
        named_bar_sync(256, kWideFFull + (k & 1));
#pragma unroll
        for (int e = 0; e < kN; e += 4) {
          const float4 f = fb[128 * (e / 4) + t];
          wa[e / 2] = Mma<T>::pack(tXrX(e) * f.x, tXrX(e + 1) * f.y);
          wa[e / 2 + 1] = Mma<T>::pack(tXrX(e + 2) * f.z, tXrX(e + 3) * f.w);
        }
        if (k + Tr::kFBufs < tiles) named_bar_arrive(256, kWideFFree + (k & 1));
      }
      if (has_o) {  // dV += P^T dO | dK += dS^T Q | dQ += dS K
        warpgroup_fence_operand(tOrA);
        wg_gemm<false>(mmaO, tOrA, tOrSt(_, _, _, rd.index()), acc);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc);
        warpgroup_fence_operand(tOrA);
        pipe.consumer_release(rd);
      }
      ++rd;
    }
  }

  // ---- epilogue: both warpgroups are past their last resident read; r1 takes dK / dQ
  // (warpgroup 1) and r2 dV (warpgroup 0), in the sm80 swizzled row-major layout (swz<kHD>);
  // then both store the 64 rows.
  named_bar_sync(256, kWideEpiFree);
  if (has_o) {
    T* so = reinterpret_cast<T*>(w == 1 ? ss.r1.data() : ss.r2.data());
    const float mul = w == 1 ? p.alpha * p.scale : p.scale;
    Tensor tOcO = thrO.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kHD>>{}));
#pragma unroll
    for (int e = 0; e < size(acc); e += 2) {
      const int r = get<0>(tOcO(e)), c = get<1>(tOcO(e));
      *reinterpret_cast<uint32_t*>(so + swz<kHD>(r, c)) =
          Mma<T>::pack(acc(e) * mul, acc(e + 1) * mul);
    }
  }
  named_bar_sync(256, kWideEpiFull);
  const int rows = min(kBM, si.L - r0);
  const int64_t row = si.start + r0;
  const T* sB = reinterpret_cast<const T*>(ss.r1.data());
  if constexpr (kDkdv) {
    store_tile<kBM, kHD, 256>(p.dk.head<T>(row, h), p.dk.row_stride, sB, rows, p.d_qk, p.dk.vec,
                              ctid);
    store_tile<kBM, kHD, 256>(p.dv.head<T>(row, h), p.dv.row_stride,
                              reinterpret_cast<const T*>(ss.r2.data()), rows, p.d_v, p.dv.vec,
                              ctid);
  } else {
    store_tile<kBM, kHD, 256>(p.dq.head<T>(row, h), p.dq.row_stride, sB, rows, p.d_qk, p.dq.vec,
                              ctid);
  }
#endif
}

// kFused (kDkdv only): the fused form (p.dq_accum, dq_sem: the tickets, null for unordered adds).
template <typename T, bool kDkdv, bool kFused = false>
void launch_bwd_wide_pass(const HstuAttnParams& p, int* dq_sem, cudaStream_t stream) {
  using Tr = WideBwdTraits<T, kDkdv, kFused>;
  HSTU_CHECK(p.total_tokens < (int64_t(1) << 31),
             "sm90 attention backward (d 256): ", p.total_tokens,
             " tokens exceed TMA's 32-bit coordinates");
  const HeadsView& r1 = kDkdv ? p.k : p.q;
  const HeadsView& r2 = kDkdv ? p.v : p.d_o;
  const HeadsView& s1 = kDkdv ? p.q : p.k;
  const HeadsView& s2 = kDkdv ? p.d_o : p.v;
  BwdParams<Tr> P;
  P.p = p;
  // Tickets: dq_sem holds 2 per 64-query block (kSm90BwdQueryBlock) and (sequence, head): one
  // per 32-query tile here.
  P.dq_sem = kFused ? dq_sem : nullptr;
  P.sem_blocks = 2 * sm90_bwd_query_blocks(p.max_seqlen);
  const auto tile_r = Shape<Int<Tr::kBM>, Int<Tr::kHD>>{};
  const auto tile_s = Shape<Int<Tr::kBN>, Int<Tr::kHD>>{};
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
  if constexpr (kFused) {
    static_assert(2 * Tr::kBN == 64, "the tickets of attention_sm90.h's dq_sem");
    HSTU_CHECK(p.dq_accum && p.dq_accum_head_stride == Tr::kHD,
               "sm90 attention backward (d 256, fused): needs an fp32 dQ accumulator of head "
               "stride 256");
    HSTU_CHECK(!p.rab_pos, "sm90 attention backward (d 256): no rab");
  }
  auto kernel = hstu_attn_bwd_sm90_wide_kernel<T, Tr, kDkdv>;
  HSTU_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(P);
  HSTU_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hstu::cuda::attn::sm90
