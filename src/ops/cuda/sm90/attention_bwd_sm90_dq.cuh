// attention_bwd_sm90_dq.cuh — the dQ side of the fused sm_90a attention backward
// (attention_bwd_sm90.cuh, kFusedDq): how a consumer warpgroup's partial dQ tile is staged in
// shared memory, the bulk (TMA engine) store / reduce-add that moves it into the fp32
// accumulator, the semaphore that orders those adds, and the kernel that converts the
// accumulator to dq.
//
// Accumulator (p.dq_accum, fp32, 4 T H kHD bytes, dq_accum_head_stride = kHD): per head, per
// 64-column half of the head width, one row of 64 floats per token: [H, kHD / 64, T, 64]. The
// rows of one query block are contiguous, so a partial tile of `rows` query rows is ONE
// contiguous run of rows * 256 bytes: one cp.reduce.async.bulk per tile, truncated at the
// sequence's end (a jagged tile never touches the next sequence's rows, and no padding is needed).
// Within a row the 64 columns are permuted (dq_col_pos) so that the consumers' shared-memory
// writes of their accumulator fragments are free of bank conflicts; the convert kernel undoes it.
//
// Ordering (deterministic): the chunk of (sequence, head, query block m, part w) gets one
// semaphore (int32, zeroed before the kernel) holding a ticket, key_blocks - (the key block that
// added last). The writer of key block kb waits until the ticket names the next visible key block
// above kb (descending key order; 0 if none), adds, waits for the add to complete
// (cp.async.bulk.wait_group 0) and stores its own ticket with release semantics. The first
// writer stores instead of adding, so the accumulator needs no zeroing; the convert kernel
// writes zeros for query blocks no key block sees. The convert is a programmatic dependent of the
// fused kernel (griddepcontrol): it starts once every CTA of that kernel has started and converts
// each query block when the block's tickets are final, overlapping the kernel's last wave.
// Unordered (no semaphores: the non-deterministic option): every writer adds into a zeroed
// accumulator and only waits for its copy to have read the staged chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/cuda/sm80/attention_params.cuh"

namespace hstu::cuda::attn::sm90 {

// Position of column c (0..63) of row r within a 64-float staged / accumulator row, so that the
// consumers' shared-memory writes of their accumulator fragments are 64-bit and free of bank
// conflicts:
//   d 128 (rows are queries; the thread holds column pairs c, c + 1 of rows r, r + 8): the
//   8-float group index XOR-ed with r % 8; runs of 4 aligned columns stay contiguous;
//   d 64 and d 256 (their fused dQ is transposed, dQ^T = K^T dS^T: rows are queries, and the
//   thread holds head columns c and c + 8 of queries r, r + 1, r + 8, ..): within each 16-column
//   block, c and c + 8 side by side (2 (c % 8) + (c / 8) % 2), the 16-column block index XOR-ed
//   with (r / 2) % 2. A warp's 64-bit write then covers all 32 banks per 16 lanes, and the
//   thread's 8 writes of a tile differ by constants (one address).
template <int kHD>
__host__ __device__ __forceinline__ int dq_col_pos(int r, int c) {
  if constexpr (kHD == 128) {
    return (((c >> 3) ^ (r & 7)) << 3) | (c & 7);
  } else {
    return ((c & ~15) | ((c & 7) << 1) | ((c >> 3) & 1)) ^ (((r >> 1) & 1) << 4);
  }
}

// The column at position pos of row r (dq_col_pos's inverse).
template <int kHD>
__host__ __device__ __forceinline__ int dq_pos_col(int r, int pos) {
  if constexpr (kHD == 128) {
    return (((pos >> 3) ^ (r & 7)) << 3) | (pos & 7);
  } else {
    const int u = pos ^ (((r >> 1) & 1) << 4);
    return (u & ~15) | ((u & 15) >> 1) | ((u & 1) << 3);
  }
}

// A thread's share of a transposed dQ chunk (d 64 / 256: accQ = dQ^T [64 head columns, kN
// queries], the wgmma accumulator) -> the stage [kN queries][64 floats] (dq_col_pos). tc: the
// accumulator's coordinates (head column, query); elements e, e + 1 are queries c, c + 1 and
// e + 2, e + 3 the same queries at head column r + 8 (the m64nN accumulator layout): one float2
// (r, r + 8) per query.
template <int kHD, typename TAcc, typename TC>
__device__ __forceinline__ void stage_dq_transposed(float* stage, const TAcc& acc, const TC& tc) {
  static_assert(int(size(TAcc{})) % 4 == 0, "(column pair, row pair) quads");
#pragma unroll
  for (int e = 0; e < int(size(acc)); e += 4) {
    const int r = get<0>(tc(e)), c = get<1>(tc(e));  // (head column, query), r % 16 < 8
    *reinterpret_cast<float2*>(stage + c * 64 + dq_col_pos<kHD>(c, r)) =
        make_float2(acc(e), acc(e + 2));
    *reinterpret_cast<float2*>(stage + (c + 1) * 64 + dq_col_pos<kHD>(c + 1, r)) =
        make_float2(acc(e + 1), acc(e + 3));
  }
}

// Byte offset of dS (query q, key k, buffer buf) in the fused kernel's dS buffer (BwdTraits::
// SmemLayoutdS: 128-byte swizzled GMMA atoms, 16-bit elements, [kBN queries, kBM = 128 keys,
// 2 buffers], 1024-byte aligned), the arithmetic that cute's swizzled-pointer indexing performs:
//   kKeyContig false (d 128, kBN = 64, MN-major atoms, queries contiguous): linear 2 q + 128 k +
//   16384 buf;
//   kKeyContig true (d 64, K-major atoms of 8 queries x 64 keys, the 8-query groups then the
//   64-key halves): linear 128 q + 2 (k % 64) + 128 kBN (k / 64) + 256 kBN buf;
// then the 16-byte chunk (bits 4..6) XOR-ed with the 128-byte row (bits 7..9, = k % 8, resp.
// q % 8). Written out because cute's form (64-bit pointer arithmetic per element, its
// loop-invariant parts hoisted by the compiler) kept 8 or more offsets live across the loop and
// made ptxas spill (tools/check_sm90_ds_offset.cu checks this against cute for every element).
template <bool kKeyContig, int kBN = 64>
__host__ __device__ __forceinline__ uint32_t ds_byte_offset(int q, int k, int buf) {
  static_assert(kKeyContig || kBN == 64, "the MN-major dS buffer has 64 queries");
  if constexpr (kKeyContig) {
    const uint32_t lin =
        128u * q + 2u * (k & 63) + 128u * kBN * (k >> 6) + 256u * kBN * uint32_t(buf);
    return lin ^ ((q & 7u) << 4);
  } else {
    const uint32_t lin = 2u * q + 128u * k + 16384u * buf;
    return lin ^ ((k & 7u) << 4);
  }
}

// The address (a byte offset, as ds_byte_offset) lane `lane` gives the j-th stmatrix.x4 of its
// warp's dS^T fragment: the warp holds keys kr0 .. kr0 + 15 (tile rows, kr0 a multiple of 16) x
// the kBN queries, packed in 16-bit pairs (word 2 k + h: key kr0 + 8 h + lane / 4, queries
// 8 k + 2 (lane % 4) + {0, 1}, the wgmma accumulator order). Store j takes words 4 j .. 4 j + 3,
// the 8 x 8 blocks m = 0..3 of keys kr0 + 8 (m & 1) .., queries 8 (2 j + (m >> 1)) ..; lane
// 8 m + r gives row r of block m in memory: the key's 8 queries (kKeyContig false: rows are
// keys) or, stored transposed (.trans), the query's 8 keys (kKeyContig true).
template <bool kKeyContig, int kBN = 64>
__host__ __device__ __forceinline__ uint32_t ds_stsm_offset(int lane, int kr0, int j, int buf) {
  const int m = lane >> 3, r = lane & 7;
  const int h = m & 1, k = 2 * j + (m >> 1);
  if constexpr (kKeyContig) {
    return ds_byte_offset<true, kBN>(8 * k + r, kr0 + 8 * h, buf);
  } else {
    return ds_byte_offset<false, kBN>(8 * k, kr0 + 8 * h + r, buf);
  }
}

// stmatrix.x4 of four 16-bit-pair registers at the shared address a (.trans when kTrans).
template <bool kTrans>
__device__ __forceinline__ void stsm_x4(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2,
                                        uint32_t r3) {
  if constexpr (kTrans) {
    asm volatile(
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a),
        "r"(r0), "r"(r1), "r"(r2), "r"(r3)
        : "memory");
  } else {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
  }
}

// Byte offset of dS (query q, key k, buffer buf) in the fused d 256 kernel's dS buffer
// (WideBwdTraits::SmemLayoutdS: [kBN = 32 queries, kBM = 64 keys, 2 buffers] of K-major 128-byte
// swizzled GMMA atoms, 8 queries x 64 keys each, 1024-byte aligned): linear 128 q + 2 k + 4096
// buf, then the 16-byte chunk (bits 4..6) XOR-ed with q % 8 (tools/check_sm90_ds_offset.cu checks
// it against cute).
__host__ __device__ __forceinline__ uint32_t ds_byte_offset_wide(int q, int k, int buf) {
  const uint32_t lin = 128u * q + 2u * k + 4096u * buf;
  return lin ^ ((q & 7u) << 4);
}

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ int ld_relaxed(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Spins until the ticket at p reads `turn`, then acquires it. The spin's loads are relaxed: an
// acquire load compiles to a load plus an L1 invalidation (CCTL.IVALL) each turn; one acquire after
// the loop orders this thread's later reads after the release that wrote `turn` (nothing else
// writes the ticket until this thread passes it on).
__device__ __forceinline__ void wait_ticket(const int* p, int turn) {
  while (ld_relaxed(p) != turn) {
  }
  ld_acquire(p);
}

__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Shared -> global bulk copy (kAdd: fp32 reduce-add) of `bytes` (a multiple of 16), one bulk
// group per call.
template <bool kAdd>
__device__ __forceinline__ void bulk_to_global(float* dst, const float* src, uint32_t bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(src));
  if constexpr (kAdd) {
    asm volatile(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
        "r"(s), "r"(bytes)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(s),
                 "r"(bytes)
                 : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until this thread's bulk groups are complete (their global writes performed).
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Waits until this thread's bulk groups have read their shared-memory sources.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Generic <-> async proxy ordering of global memory (the semaphore is a generic-proxy access, the
// bulk adds async-proxy ones).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// kCols output columns of dq as fp16 / bf16 pairs in uint32 words (round to nearest even).
template <typename T, int kCols>
__device__ __forceinline__ void pack_dq(const float (&f)[kCols], uint32_t (&w)[kCols / 2]) {
#pragma unroll
  for (int j = 0; j < kCols / 2; ++j) {
    if constexpr (std::is_same_v<T, __half>) {
      const __half2 h = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
      w[j] = *reinterpret_cast<const uint32_t*>(&h);
    } else {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
      w[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
}

// One CTA's query block of hstu_attn_dq_convert_sm90_kernel (below).
template <typename T, int kHD, int kKeyBlock, int kQBlock>
__device__ __forceinline__ void dq_convert_block(const HstuAttnParams& p, const int* dq_sem,
                                                 int sem_blocks, int parts) {
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo si = seq_info(p, b);
  const int i0 = m * kQBlock;
  if (i0 >= si.L) return;
  // The lowest key block that sees this query block (key_blocks: none; the block was never
  // written and gets zeros).
  const int key_blocks = (si.L + kKeyBlock - 1) / kKeyBlock;
  int kb_min = 0;
  while (kb_min < key_blocks &&
         tile_kind(si, p, i0, kQBlock, kb_min * kKeyBlock, kKeyBlock) == kTileSkip)
    ++kb_min;
  const bool seen = kb_min < key_blocks;
  if (dq_sem && seen) {
    const int* sem = dq_sem + ((int64_t(b) * p.num_heads + h) * sem_blocks + m) * 2;
    if (threadIdx.x < parts)
      while (ld_relaxed(sem + threadIdx.x) != key_blocks - kb_min) {
      }
    __syncthreads();
    ld_acquire(sem);  // each thread's own acquire of the (final) ticket before its reads
  }
  const float mul = p.alpha * p.scale;
  const int rows = min(kQBlock, si.L - i0);
  constexpr int kHalves = kHD / 64;
  constexpr int kCols = kHD == 128 ? 8 : 16;  // columns (and accumulator positions) a thread
  constexpr int kRuns = kHD / kCols;          // runs of a row
  for (int idx = threadIdx.x; idx < rows * kRuns; idx += blockDim.x) {
    const int r = idx / kRuns, col0 = (idx % kRuns) * kCols;  // query row, first column
    if (col0 >= p.d_qk) continue;
    const int half = col0 / 64, c0 = col0 % 64;
    // The run's first position (dq_col_pos of column c0; the run stays contiguous).
    const int pos0 = kHD == 128 ? (((c0 >> 3) ^ (r & 7)) << 3) : (c0 ^ (((r >> 1) & 1) << 4));
    const int64_t tok = si.start + i0 + r;
    float in[kCols] = {};
    if (seen) {
      const float4* row = reinterpret_cast<const float4*>(
          p.dq_accum + ((int64_t(h) * kHalves + half) * p.total_tokens + tok) * 64 + pos0);
#pragma unroll
      for (int i = 0; i < kCols / 4; ++i) {
        const float4 v = row[i];
        in[4 * i] = v.x, in[4 * i + 1] = v.y, in[4 * i + 2] = v.z, in[4 * i + 3] = v.w;
      }
    }
    float out[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) out[j] = mul * in[kHD == 128 ? j : 2 * (j & 7) + (j >> 3)];
    T* dst = p.dq.head<T>(tok, h) + col0;
    if (p.dq.vec && col0 + kCols <= p.d_qk) {
      uint32_t w[kCols / 2];
      pack_dq<T, kCols>(out, w);
#pragma unroll
      for (int i = 0; i < kCols / 8; ++i)
        reinterpret_cast<uint4*>(dst)[i] =
            make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    } else {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (col0 + j < p.d_qk) {
          if constexpr (std::is_same_v<T, __half>) {
            dst[j] = __float2half_rn(out[j]);
          } else {
            dst[j] = __float2bfloat16_rn(out[j]);
          }
        }
      }
    }
  }
}

// dq [T, H, d_qk] from the accumulator: one CTA per (query block of kQBlock rows, head,
// sequence), scaled by alpha * scale. A block that no key block sees (every tile skipped) was
// never written and gets zeros. kQBlock: the fused kernel's query tile (64; d 256: 32).
// A thread takes one run of kCols output columns of a row whose positions are one contiguous run
// of the accumulator row (dq_col_pos): 8 columns at d 128 (an 8-float group), 16 at d 64 / 256
// (a 16-float block, column j at position 2 (j % 8) + j / 8). Its kCols floats are read as
// float4s and written as 16-byte words where dq allows it (HeadsView::vec and the run inside
// d_qk), else element by element.
// NOTE (session 25): the first form moved a float4 and wrote its four columns with 2-byte stores
// (ncu, H200 base clocks, 32 x 1024 x 4 x 128: 50 us for 100 MB, ~2 TB/s, beside 326 us of fused
// backward).
//
// Ordered fused form (dq_sem given; d 64 / 128): launched as a programmatic dependent of the
// fused kernel, so it may run before that kernel ends. Each CTA waits for its block's tickets to
// reach their last value, key_blocks - (the lowest key block that sees the block, which adds
// last), acquiring the adds' results as the adders acquire each other's; `parts` tickets per
// block (d 128: one per column half, d 64: one per 64-query block). Otherwise (dq_sem null) it
// runs after the whole backward kernel (a plain launch).
// CTA 0 waits for the fused kernel to complete (griddepcontrol.wait; at once without PDL) before
// it exits, so this grid completes after that kernel and the stream's later work finds dk and
// dv written, whatever PDL relaxes (one CTA suffices: a grid completes when its last CTA does).
template <typename T, int kHD, int kKeyBlock, int kQBlock = 64>
__global__ void __launch_bounds__(256)
    hstu_attn_dq_convert_sm90_kernel(const __grid_constant__ HstuAttnParams p,
                                     const int* __restrict__ dq_sem, int sem_blocks, int parts) {
  dq_convert_block<T, kHD, kKeyBlock, kQBlock>(p, dq_sem, sem_blocks, parts);
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0)
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace hstu::cuda::attn::sm90
