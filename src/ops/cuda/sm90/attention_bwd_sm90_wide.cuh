// attention_bwd_sm90_wide.cuh — the Hopper (sm_90a) HSTU attention backward for head widths
// padded to 256: the split scheme of attention_bwd_sm90.cuh (a key-major dK/dV kernel beside a
// query-major dQ kernel, each output written once: deterministic, no atomics), with the work of a
// CTA divided between its two consumer warpgroups by head-width half instead of by rows.
//
// Why: at d 256 a warpgroup owning 64 rows of both dK and dV needs 2 x 64 x 256 fp32
// accumulators = 256 registers a thread, more than a thread has. Here a CTA owns kBM = 64
// resident rows and each consumer warpgroup w owns columns [128 w, 128 w + 128) of the outputs
// of all of them (dK and dV: 2 x 64 registers, as the d 128 kernel):
//   - warpgroup 0 computes X = R1 S1^T (S^T = K Q^T, or S = Q K^T), warpgroup 1 computes
//     Y = R2 S2^T (dP^T = V dO^T, or dP = dO V^T), side by side (wgmma m64n64k256, both operands
//     in shared memory);
//   - each sends the other, through shared memory in register order (both fragments have the
//     same layout, so thread t reads exactly the elements it holds), the half of its fp32
//     accumulators the other needs: warpgroup 0 then holds X and Y for elements [0, 16) of its
//     32, warpgroup 1 for [16, 32); each applies the pointwise step (bwd_apply: masks, SiLU,
//     SiLU') to its half, packs P and dS to 16-bit pairs and sends them to the other;
//   - dV[:, half] += P^T dO[:, half], dK[:, half] += dS^T Q[:, half] (or dQ[:, half] += dS
//     K[:, half]) with P / dS from registers (wgmma RS, m64n128k64) and the streamed operand's
//     column half read MN-major from shared memory.
// GEMMs per tile pair: 4 in the dK/dV kernel and 3 in the dQ kernel (7 for the 5 counted), as
// the d 64 / 128 split form. Shared memory: resident 2 x 32 KB, streamed 2 stages x 2 x 32 KB,
// exchange 2 x 16 KB = 224 KB.
//
// Measured (B32 L4096 H4 causal bf16, deterministic backward, TFLOPS): 281.6 on an H200 and
// 290.0 on an H100 (sm80: 114.5 / 117.2); each warpgroup applying the whole pointwise step
// (no second exchange, twice the special-function work): 251.6 (H200). NOTE: tried and
// dropped: issuing the next block's S / dP GEMM before this block's pointwise step (FA3's
// intra-warpgroup overlap, one more 64 x 64 accumulator) spilled 960 bytes in the dK/dV kernel
// and ran at 175.2 (H100). ncu (H200, the dK/dV kernel): 5.3 ms of the 9.8, DRAM 6 % busy,
// special-function pipe 11 %, FMA pipe 9 %, stalls per issued instruction: barrier 2.3, wait
// 2.0, long scoreboard 0.7 (the tensor-pipe metric was not read): the GEMMs and the pointwise
// step take turns. The next step is overlap that fits the
// registers (e.g. the pointwise halves read from shared memory instead of registers).
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
  static constexpr int kHalf = kHD / 2;  // output columns per consumer warpgroup
  static constexpr int kConsumerWGs = 2;
  static constexpr int kBM = 64;  // resident rows (keys for dK/dV, else queries)
  static constexpr int kBN = 64;  // streamed rows per block
  static constexpr int kStages = 2;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  using OneWG = Layout<Shape<_1, _1, _1>>;
  // X [kBM, kBN] = A B^T (S^T / S or dP^T / dP): both operands K-major in shared memory.
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kBN>, Int<kHD>>>(),
      OneWG{}));
  // Acc [kBM, kHalf] += P [kBM, kBN] B [kBN, kHalf]: P from registers, B^T MN-major in shared
  // memory (one column half of a streamed operand).
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBM>, Int<kHalf>, Int<kBN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      OneWG{}));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutR = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBM>, Int<kHD>>{}));
  using SmemLayoutS =
      decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBN>, Int<kHD>, Int<kStages>>{}));
  // (column within a half, streamed row, stage) -> SmemLayoutS: the transposed view of columns
  // [0, kHalf); columns [kHalf, kHD) are the same layout kHalfOffset elements further (the
  // 8 x 64 swizzle atoms repeat over rows first, so a 128-column step is 2 x kBN x 64 elements,
  // a multiple of the 1 KB swizzle period).
  using SmemLayoutStHalf = decltype(composition(
      SmemLayoutS{},
      Layout<Shape<Int<kHalf>, Int<kBN>, Int<kStages>>, Stride<Int<kBN>, _1, Int<kBN * kHD>>>{}));
  static constexpr int kHalfOffset = kBN * kHalf;

  using GShape = Shape<int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                       GShape{}, GStride{}));
  using TmaR = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemLayoutR{},
                                      Shape<Int<kBM>, Int<kHD>>{}, _1{}));
  using TmaS = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemLayoutS{}),
                                      Shape<Int<kBN>, Int<kHD>>{}, _1{}));

  // Exchange: warpgroup w's [kBM, kBN] fp32 accumulators in register order (float4 k of thread
  // t at xch[w][4 (128 k + t)]: consecutive threads, consecutive 16-byte words).
  // A block's exchange puts half of those floats there, then the packed P / dS words from float
  // kXchWords on.
  static constexpr int kAccPerThread = kBM * kBN / 128;
  static constexpr int kXchWords = 128 * kAccPerThread / 2;

  using Pipe = cutlass::PipelineTmaAsync<kStages>;
  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r1;  // then dK / dQ
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutR>, 1024> r2;  // then dV
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s1;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutS>, 1024> s2;
    alignas(16) float xch[kConsumerWGs][kBM * kBN];
    typename Pipe::SharedStorage pipe;
    alignas(8) uint64_t barrier_r;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "sm90 wide backward: shared memory of one CTA");
  static constexpr uint32_t kRBytes = kBM * kHD * sizeof(Element);
  static constexpr uint32_t kSBytes = kBN * kHD * sizeof(Element);
};

// Named barriers of the wide kernel's two consumer warpgroups (CUTLASS offsets the ids past its
// reserved ones).
enum WideBarrier : int {
  kWideXchFree = 1,
  kWideXchFull = 2,
  kWideXchWords = 3,
  kWideEpiFree = 4,
  kWideEpiFull = 5
};

// One thread's accumulators [kE0, kE1) to / from its slots of an exchange buffer (float4 k of
// thread t at float4 slot 128 k + t).
template <int kE0 = 0, int kE1 = -1, typename TX>
__device__ __forceinline__ void xch_put(const TX& tX, float* buf, int t) {
  constexpr int kEnd = kE1 < 0 ? int(decltype(size(std::declval<const TX&>()))::value) : kE1;
  float4* b = reinterpret_cast<float4*>(buf);
#pragma unroll
  for (int e = kE0; e < kEnd; e += 4)
    b[128 * ((e - kE0) / 4) + t] = make_float4(tX(e), tX(e + 1), tX(e + 2), tX(e + 3));
}
template <int kE0 = 0, int kE1 = -1, typename TX>
__device__ __forceinline__ void xch_get(TX& tX, const float* buf, int t) {
  constexpr int kEnd = kE1 < 0 ? int(decltype(size(std::declval<const TX&>()))::value) : kE1;
  const float4* b = reinterpret_cast<const float4*>(buf);
#pragma unroll
  for (int e = kE0; e < kEnd; e += 4) {
    const float4 v = b[128 * ((e - kE0) / 4) + t];
    tX(e) = v.x;
    tX(e + 1) = v.y;
    tX(e + 2) = v.z;
    tX(e + 3) = v.w;
  }
}
// Words [kW0, kW1) of the P and dS fragments (packed pairs of 16-bit values) to / from an
// exchange buffer: P's at uint4 slots 128 k + t, dS's after them.
template <int kW0, int kW1, bool kWithP>
__device__ __forceinline__ void words_put(const uint32_t* wp, const uint32_t* wd, float* buf,
                                          int t) {
  constexpr int kQ = (kW1 - kW0) / 4;
  uint4* b = reinterpret_cast<uint4*>(buf);
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int w0 = kW0 + 4 * q;
    if constexpr (kWithP) b[128 * q + t] = make_uint4(wp[w0], wp[w0 + 1], wp[w0 + 2], wp[w0 + 3]);
    b[128 * (kQ + q) + t] = make_uint4(wd[w0], wd[w0 + 1], wd[w0 + 2], wd[w0 + 3]);
  }
}
template <int kW0, int kW1, bool kWithP>
__device__ __forceinline__ void words_get(uint32_t* wp, uint32_t* wd, const float* buf, int t) {
  constexpr int kQ = (kW1 - kW0) / 4;
  const uint4* b = reinterpret_cast<const uint4*>(buf);
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int w0 = kW0 + 4 * q;
    if constexpr (kWithP) {
      const uint4 v = b[128 * q + t];
      wp[w0] = v.x;
      wp[w0 + 1] = v.y;
      wp[w0 + 2] = v.z;
      wp[w0 + 3] = v.w;
    }
    const uint4 v = b[128 * (kQ + q) + t];
    wd[w0] = v.x;
    wd[w0 + 1] = v.y;
    wd[w0 + 2] = v.z;
    wd[w0 + 3] = v.w;
  }
}
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
  using NamedBarrier = cutlass::arch::NamedBarrier;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kHD = Tr::kHD, kHalf = Tr::kHalf;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SS& ss = *reinterpret_cast<SS*>(smem_raw);
  const HstuAttnParams& p = P.p;

  // Heavy blocks first under causal masks: early key blocks (dK/dV), late query blocks (dQ).
  const int blk = kDkdv ? int(blockIdx.x) : int(gridDim.x - 1 - blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqInfo si = seq_info(p, b);
  const int r0 = blk * kBM;
  if (r0 >= si.L) return;  // the whole CTA, before any barrier
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

  // ---- consumers: warpgroup w = wg - 1 owns output columns [kHalf w, kHalf (w + 1))
  cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, t = tid & 127, w = wg - 1;
  Tensor sR1 = make_tensor(make_smem_ptr(ss.r1.data()), typename Tr::SmemLayoutR{});
  Tensor sR2 = make_tensor(make_smem_ptr(ss.r2.data()), typename Tr::SmemLayoutR{});
  Tensor sS1 = make_tensor(make_smem_ptr(ss.s1.data()), typename Tr::SmemLayoutS{});
  Tensor sS2 = make_tensor(make_smem_ptr(ss.s2.data()), typename Tr::SmemLayoutS{});
  Tensor sS1h = make_tensor(make_smem_ptr(ss.s1.data() + w * Tr::kHalfOffset),
                            typename Tr::SmemLayoutStHalf{});
  Tensor sS2h = make_tensor(make_smem_ptr(ss.s2.data() + w * Tr::kHalfOffset),
                            typename Tr::SmemLayoutStHalf{});
  typename Tr::TiledMmaS mmaS;
  typename Tr::TiledMmaO mmaO;
  auto thrS = mmaS.get_thread_slice(t);
  auto thrO = mmaO.get_thread_slice(t);
  Tensor tXrR1 = thrS.partition_fragment_A(sR1);  // descriptors
  Tensor tXrR2 = thrS.partition_fragment_A(sR2);
  Tensor tXrS1 = thrS.partition_fragment_B(sS1);  // (.., stage)
  Tensor tXrS2 = thrS.partition_fragment_B(sS2);
  Tensor tOrS1h = thrO.partition_fragment_B(sS1h);  // (.., stage)
  Tensor tOrS2h = thrO.partition_fragment_B(sS2h);
  // accB: dK [kBM, kHalf] (dK/dV kernel) or dQ; accA: dV (dK/dV kernel only).
  Tensor accA = partition_fragment_C(mmaO, Shape<Int<kBM>, Int<kHalf>>{});
  Tensor accB = partition_fragment_C(mmaO, Shape<Int<kBM>, Int<kHalf>>{});
  if constexpr (kDkdv) clear(accA);
  clear(accB);
  Tensor tXcX = thrS.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kBN>>{}));
  Tensor tXrX = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});  // S^T / S
  Tensor tXrY = partition_fragment_C(mmaS, Shape<Int<kBM>, Int<kBN>>{});  // dP^T / dP
  static_assert(size(decltype(tXrX){}) == Tr::kAccPerThread, "exchange slots");
  using FragLayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBN / 16>>>;
  Tensor tOrP = make_tensor<typename Tr::Element>(FragLayout{});
  Tensor tOrD = make_tensor<typename Tr::Element>(FragLayout{});
  static_assert(size(FragLayout{}) == size(decltype(tXrX){}), "A fragment size");
  float* mine = ss.xch[w];
  const float* other = ss.xch[1 - w];

  reinterpret_cast<Barrier*>(&ss.barrier_r)->wait(0);
  cutlass::PipelineState<Tr::kStages> rd;
#pragma unroll 1
  for (int n = next_visible(0); n < n_blocks; n = next_visible(n + 1)) {
    pipe.consumer_wait(rd);
    const int st = rd.index();
    // Warpgroup 0 applies the pointwise step to elements [0, kH) (fragment words [0, kH / 2)),
    // warpgroup 1 to the rest: each sends the other the half of its accumulator the other needs,
    // then the P / dS words it made. NOTE: branches, not a register tensor chosen at run time
    // (it would go to local memory).
    constexpr int kN = Tr::kAccPerThread, kH = kN / 2;
    uint32_t* wp = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrP.data()));
    uint32_t* wd = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrD.data()));
    if (w == 0) {
      wg_gemm<true>(mmaS, tXrR1, tXrS1(_, _, _, st), tXrX);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tXrX);
      NamedBarrier::sync(256, kWideXchFree);  // the other warpgroup read the previous block
      xch_put<kH, kN>(tXrX, mine, t);
      NamedBarrier::sync(256, kWideXchFull);
      xch_get<0, kH>(tXrY, other, t);
      bwd_apply<kDkdv, kBM, kBN, 0, kH>(tXrX, tXrY, tXcX, p, si, r0, n * kBN, kind_of(n));
      pack_words<T, 0, kH / 2>(tXrY, wd);
      if constexpr (kDkdv) pack_words<T, 0, kH / 2>(tXrX, wp);
      words_put<0, kH / 2, kDkdv>(wp, wd, mine + Tr::kXchWords, t);
      NamedBarrier::sync(256, kWideXchWords);
      words_get<kH / 2, kN / 2, kDkdv>(wp, wd, other + Tr::kXchWords, t);
    } else {
      wg_gemm<true>(mmaS, tXrR2, tXrS2(_, _, _, st), tXrY);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tXrY);
      NamedBarrier::sync(256, kWideXchFree);
      xch_put<0, kH>(tXrY, mine, t);
      NamedBarrier::sync(256, kWideXchFull);
      xch_get<kH, kN>(tXrX, other, t);
      bwd_apply<kDkdv, kBM, kBN, kH, kN>(tXrX, tXrY, tXcX, p, si, r0, n * kBN, kind_of(n));
      pack_words<T, kH / 2, kN / 2>(tXrY, wd);
      if constexpr (kDkdv) pack_words<T, kH / 2, kN / 2>(tXrX, wp);
      words_put<kH / 2, kN / 2, kDkdv>(wp, wd, mine + Tr::kXchWords, t);
      NamedBarrier::sync(256, kWideXchWords);
      words_get<0, kH / 2, kDkdv>(wp, wd, other + Tr::kXchWords, t);
    }
    warpgroup_fence_operand(tOrD);
    if constexpr (kDkdv) {
      warpgroup_fence_operand(tOrP);
      wg_gemm<false>(mmaO, tOrP, tOrS2h(_, _, _, st), accA);  // dV[:, half] += P^T dO[:, half]
    }
    wg_gemm<false>(mmaO, tOrD, tOrS1h(_, _, _, st), accB);  // dK += dS^T Q | dQ += dS K
    warpgroup_wait<0>();
    warpgroup_fence_operand(accA);
    warpgroup_fence_operand(accB);
    warpgroup_fence_operand(tOrP);
    warpgroup_fence_operand(tOrD);
    pipe.consumer_release(rd);
    ++rd;
  }

  // ---- epilogue: both warpgroups are past their last resident read; r1 takes dK / dQ and r2 dV
  // (the sm80 swizzled row-major layout, swz<kHD>), each warpgroup its column half; then both
  // store the 64 rows.
  NamedBarrier::sync(256, kWideEpiFree);
  T* sB = reinterpret_cast<T*>(ss.r1.data());
  T* sA = reinterpret_cast<T*>(ss.r2.data());
  Tensor tOcO = thrO.partition_C(make_identity_tensor(Shape<Int<kBM>, Int<kHalf>>{}));
  const float mul_b = p.alpha * p.scale;
#pragma unroll
  for (int e = 0; e < size(accB); e += 2) {
    const int r = get<0>(tOcO(e)), c = kHalf * w + get<1>(tOcO(e));
    *reinterpret_cast<uint32_t*>(sB + swz<kHD>(r, c)) =
        Mma<T>::pack(accB(e) * mul_b, accB(e + 1) * mul_b);
    if constexpr (kDkdv)
      *reinterpret_cast<uint32_t*>(sA + swz<kHD>(r, c)) =
          Mma<T>::pack(accA(e) * p.scale, accA(e + 1) * p.scale);
  }
  NamedBarrier::sync(256, kWideEpiFull);
  const int rows = min(kBM, si.L - r0);
  const int64_t row = si.start + r0;
  if constexpr (kDkdv) {
    store_tile<kBM, kHD, 256>(p.dk.head<T>(row, h), p.dk.row_stride, sB, rows, p.d_qk, p.dk.vec,
                              ctid);
    store_tile<kBM, kHD, 256>(p.dv.head<T>(row, h), p.dv.row_stride, sA, rows, p.d_v, p.dv.vec,
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
  const dim3 grid((p.max_seqlen + Tr::kBM - 1) / Tr::kBM, p.num_heads, p.batch);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  auto kernel = hstu_attn_bwd_sm90_wide_kernel<T, Tr, kDkdv>;
  HSTU_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(P);
  HSTU_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hstu::cuda::attn::sm90
