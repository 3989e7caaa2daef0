// rab_buckets.cuh — the per-call precompute of the relative attention bias's time buckets: one
// u8 per (sequence, query, key), which every head and both backward kernels then read instead of
// computing a bucket from two timestamps per element per head.
//
// Layout: rab_bkt[(b * S + i) * S + j] (u8 [B, S, S], S = rab_bucket_stride(max_seqlen), a
// multiple of kBktAlign so rows start on 16 bytes) holds rab_time_bucket(ts_query[i] - ts_key[j])
// for query i and key j of sequence b, exactly the CPU reference's bucket (time_bucket:
// a float log guess corrected against the exact thresholds). Entries outside the sequence, and
// every entry of a 64 x 64 block in which hstu_attend admits no pair, are 0: the kernels never
// use them (masked), and computing them would double the work of causal batches.
//
// The shaping decision: buckets, not biases. The bias differs per layer (each layer has its own
// tables) but the buckets are the same for every layer of a step, for the forward and the
// backward and for every head; the tables themselves (<= 256 floats + 2 max_len positions) stay
// in shared memory / L1 in the attention kernels. u8 limits this to <= kMaxBktTable time
// entries; bigger tables keep the in-kernel bucket function.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "ops/cuda/sm80/attention_mask.cuh"
#include "ops/hstu_attention.h"

namespace hstu::cuda::attn {

// Row pitch (bytes) of the bucket tensor for batches of sequences up to max_seqlen long (the
// host's formula, ops/hstu_attention.h, which the trainer's scratch sizing also uses).
inline int64_t rab_bucket_stride(int max_seqlen) {
  static_assert(kBktAlign == 16, "hstu_rab_bucket_stride rounds to 16");
  return hstu_rab_bucket_stride(max_seqlen);
}
// Whether a call's rab can use precomputed buckets (u8 indices into a table in shared memory).
inline bool rab_buckets_possible(const HstuAttnParams& p) {
  return p.rab_pos != nullptr && p.time_table && p.rab_time_len <= kMaxBktTable;
}

constexpr int kBktBlock = 64;  // rows and columns of one block of the precompute

// One CTA = a 64 x 64 block (queries x keys) of one sequence; 256 threads, 16 consecutive keys
// of one query each, written as one 16-byte store. Blocks nothing attends to store zeros and load
// nothing; the others stage their 64 query and 64 key timestamps and the thresholds in shared
// memory (load_time_thresholds: one address per warp instruction).
__global__ void __launch_bounds__(256)
    rab_buckets_kernel(const __grid_constant__ HstuAttnParams p, uint8_t* out) {
  __shared__ int64_t s_thr[kMaxTimeTable + 1];
  __shared__ int64_t s_ts[2 * kBktBlock];  // queries i0.., then keys j0..
  const int tid = threadIdx.x;
  const int b = blockIdx.z, i0 = blockIdx.y * kBktBlock, j0 = blockIdx.x * kBktBlock;
  const int64_t S = p.rab_bkt_stride;
  const int i = i0 + tid / 4, j = j0 + (tid % 4) * 16;
  const SeqInfo si = seq_info(p, b);
  uint32_t w[4] = {0, 0, 0, 0};
  if (tile_kind(si, p, i0, kBktBlock, j0, kBktBlock) != kTileSkip) {  // uniform over the CTA
    load_time_thresholds(p, s_thr, tid, 256);
    if (tid < 2 * kBktBlock) {
      const int pos = (tid < kBktBlock ? i0 : j0 - kBktBlock) + tid;
      const int64_t* ts = tid < kBktBlock ? p.ts_query : p.ts_key;
      s_ts[tid] = pos < si.L ? __ldg(ts + si.start + pos) : 0;
    }
    __syncthreads();
    if (i < si.L && j < si.L) {
      const int nb = p.rab_time_len - 1;
      const int64_t tq = s_ts[i - i0];
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        if (j + q < si.L) {
          const uint32_t bk = time_bucket_table(nb, s_thr, tq - s_ts[kBktBlock + j - j0 + q]);
          w[q / 4] |= bk << (8 * (q % 4));
        }
      }
    }
  }
  // S is a multiple of 16: a 16-byte chunk is all in or all out.
  if (i < S && j < S)
    *reinterpret_cast<uint4*>(out + (int64_t(b) * S + i) * S + j) =
        make_uint4(w[0], w[1], w[2], w[3]);
}

// Fills p.rab_bkt (hstu_rab_buckets_bytes(p.batch, p.max_seqlen) bytes, p.rab_bkt_stride set) on
// `stream`. Needs rab_buckets_possible(p).
inline void launch_rab_buckets(const HstuAttnParams& p, cudaStream_t stream) {
  const int64_t S = p.rab_bkt_stride;
  const int64_t nb = (S + kBktBlock - 1) / kBktBlock;
  if (p.batch == 0 || nb == 0) return;
  const dim3 grid(static_cast<unsigned>(nb), static_cast<unsigned>(nb),
                  static_cast<unsigned>(p.batch));
  rab_buckets_kernel<<<grid, 256, 0, stream>>>(p, const_cast<uint8_t*>(p.rab_bkt));
  HSTU_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hstu::cuda::attn
