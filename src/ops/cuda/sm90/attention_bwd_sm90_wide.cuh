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
// Masks, tile classification, the producer and the epilogue's stores are those of
// attention_bwd_sm90.cuh (bwd_apply, bwd_produce, store_tile). No rab (sm90_bwd_supported keeps
// rab on sm80). Shapes: q/k/v/d_o strided column views [T, H * stride], TMA views (token, column,
// head) with the true head widths as column extents (zero-filled up to 256).
#pragma once

#include "ops/cuda/sm90/attention_bwd_sm90.cuh"

namespace hstu::cuda::attn::sm90 {

// kDkdv: the key-major dK/dV kernel, else the query-major dQ kernel.
template <typename T, bool kDkdv>
struct WideBwdTraits {
  using Element = typename CuteElem<T>::type;
  static constexpr int kHD = 256;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kBM = 64;  // resident rows (keys for dK/dV, else queries)
  static_assert(kBM == sm90_bwd_block_rows(kHD), "attention_sm90.h's block rows");
  static constexpr int kBN = 64;  // streamed rows per block
  static constexpr int kStages = 2;
  static constexpr int kFBufs = 2;  // F buffers: warpgroup 0 runs up to one block ahead
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

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

  using Pipe = cutlass::PipelineTmaAsync<kStages>;
  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r1;  // then dK / dQ
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r2;  // then dV
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s1;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s2;
    // F [kBM, kBN] of a block in register order: float4 k of thread t at f[buf][4 (128 k + t)].
    alignas(16) float f[kFBufs][kBM * kBN];
    typename Pipe::SharedStorage pipe;
    alignas(8) uint64_t barrier_r;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "sm90 wide backward: shared memory of one CTA");
  static constexpr uint32_t kRBytes = kBM * kHD * sizeof(Element);
  static constexpr uint32_t kSBytes = kBN * kHD * sizeof(Element);
};

// Named barriers of the two consumer warpgroups (CUTLASS offsets the ids past its reserved
// ones): F buffer b full (warpgroup 0 arrives, 1 waits) and free (1 arrives, 0 waits); the
// epilogue's two.
enum WideBarrier : int { kWideFFull = 1, kWideFFree = 3, kWideEpiFree = 5, kWideEpiFull = 6 };

// Fragment words [kW0, kW1) from accumulator pairs (acc_to_frag on a range).
template <typename T, int kW0, int kW1, typename TAcc>
__device__ __forceinline__ void pack_words(const TAcc& acc, uint32_t* w) {
#pragma unroll
  for (int e = kW0; e < kW1; ++e) w[e] = Mma<T>::pack(acc(2 * e), acc(2 * e + 1));
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
  // p.tile_order (attn_tile_order.h) also sequences longest first.
  const Sm90Tile tl = sm90_tile<kBM, !kDkdv>(p);
  const int blk = tl.blk, h = tl.h;
  const SeqInfo& si = tl.si;
  const int r0 = blk * kBM;
  if (r0 >= si.L) return;  // the whole CTA, before any barrier (and past the list's end)
  const int tid = threadIdx.x, wg = tid / 128;
  const int n_blocks = (si.L + kBN - 1) / kBN;
  auto kind_of = [&](int n) {
    return kDkdv ? tile_kind(si, p, n * kBN, kBN, r0, kBM)
                 : tile_kind(si, p, r0, kBM, n * kBN, kBN);
  };
  auto next_visible = [&](int n) {
    while (n < n_blocks && kind_of(n) == kTileSkip) ++n;
    return n;
  };

  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  if (tid == 0) Barrier::init(&ss.barrier_r, 1);
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
    return;
  }

  // ---- consumers: warpgroup w = wg - 1 (0: X, pointwise, dV; 1: Y, dS, dK / dQ)
  cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, t = tid & 127, w = wg - 1;
  Tensor sR =
      make_tensor(make_smem_ptr(w == 0 ? ss.r1.data() : ss.r2.data()), typename Tr::SmemLayoutR{});
  Tensor sS =
      make_tensor(make_smem_ptr(w == 0 ? ss.s1.data() : ss.s2.data()), typename Tr::SmemLayoutS{});
  // The B operand of the warpgroup's second GEMM: dO (dV += P^T dO) or Q / K (dK / dQ += dS ..).
  Tensor sSt =
      make_tensor(make_smem_ptr(w == 0 ? ss.s2.data() : ss.s1.data()), typename Tr::SmemLayoutSt{});
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
      bwd_apply<kDkdv, kBM, kBN>(tXrX, tXrF, tXcX, p, si, r0, n * kBN, kind_of(n));
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

template <typename T, bool kDkdv>
void launch_bwd_wide_pass(const HstuAttnParams& p, cudaStream_t stream) {
  using Tr = WideBwdTraits<T, kDkdv>;
  HSTU_CHECK(p.total_tokens < (int64_t(1) << 31),
             "sm90 attention backward (d 256): ", p.total_tokens,
             " tokens exceed TMA's 32-bit coordinates");
  const HeadsView& r1 = kDkdv ? p.k : p.q;
  const HeadsView& r2 = kDkdv ? p.v : p.d_o;
  const HeadsView& s1 = kDkdv ? p.q : p.k;
  const HeadsView& s2 = kDkdv ? p.d_o : p.v;
  BwdParams<Tr> P;
  P.p = p;
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
  auto kernel = hstu_attn_bwd_sm90_wide_kernel<T, Tr, kDkdv>;
  HSTU_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(P);
  HSTU_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hstu::cuda::attn::sm90
