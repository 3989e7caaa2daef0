// attention_bwd_sm90_run.cuh — run_bwd_sm90 (attention_sm90.h), the sm_90a backward's entry
// point: which kernels of attention_bwd_sm90.cuh (head widths 64 / 128) or
// attention_bwd_sm90_wide.cuh (256) run, on which streams. Included by the per-(width, dtype)
// instance files hstu_attention_bwd_sm90_hd*_*.cu.
#pragma once

#include "ops/cuda/sm90/attention_bwd_sm90.cuh"
#include "ops/cuda/sm90/attention_bwd_sm90_wide.cuh"

namespace hstu::cuda::attn {
template <typename T, int kHeadDim>
void run_bwd_sm90(const HstuAttnParams& p, int* dq_sem, cudaStream_t stream,
                  cudaStream_t dq_stream) {
  if constexpr (kHeadDim == 256) {
    if (p.dq_accum) {  // fused: dK, dV and the dQ accumulation in 32-query tiles, then dQ
      using Tr = sm90::WideBwdTraits<T, true, true>;
      sm90::launch_bwd_wide_pass<T, true, true>(p, dq_sem, stream);
      const dim3 grid((p.max_seqlen + Tr::kBN - 1) / Tr::kBN, p.num_heads, p.batch);
      sm90::hstu_attn_dq_convert_sm90_kernel<T, 256, Tr::kBM, Tr::kBN>
          <<<grid, 256, 0, stream>>>(p, nullptr, 0, 0);
      HSTU_CUDA_CHECK(cudaGetLastError());
    } else {  // split: the roles dK/dV kernel beside the roles dQ kernel
      sm90::launch_bwd_wide_pass<T, true>(p, nullptr, stream);
      sm90::launch_bwd_wide_pass<T, false>(p, nullptr, dq_stream);
    }
  } else if (p.dq_accum) {  // fused: dK, dV and the dQ accumulation (ordered with dq_sem),
                            // then dQ converted
    using Tr = sm90::BwdTraits<T, kHeadDim, true, true>;
    static_assert(Tr::kBN % kSm90BwdQueryBlock == 0, "whole 64-query blocks a tile");
    HSTU_CHECK(p.dq_accum && p.dq_accum_head_stride == kHeadDim,
               "sm90 attention backward: the fused dQ needs an fp32 accumulator of head stride ",
               kHeadDim);
    if constexpr (kHeadDim == 128) {  // rab: the fused kernel's rab form (kRabFused)
      if (p.rab_pos) {
        sm90::launch_bwd_pass<T, kHeadDim, true, true, true>(p, dq_sem, stream);
      } else {
        sm90::launch_bwd_pass<T, kHeadDim, true, true>(p, dq_sem, stream);
      }
    } else {
      sm90::launch_bwd_pass<T, kHeadDim, true, true>(p, dq_sem, stream);
    }
    const dim3 grid((p.max_seqlen + kSm90BwdQueryBlock - 1) / kSm90BwdQueryBlock, p.num_heads,
                    p.batch);
    // Ordered: a programmatic dependent of the fused kernel (it waits per block on the tickets);
    // unordered: after it.
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(256);
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = dq_sem ? 1 : 0;
    HSTU_CUDA_CHECK(cudaLaunchKernelEx(
        &cfg, sm90::hstu_attn_dq_convert_sm90_kernel<T, kHeadDim, Tr::kBM>, p,
        static_cast<const int*>(dq_sem), sm90_bwd_query_blocks(p.max_seqlen), Tr::kDqT ? 1 : 2));
    // The fused rab form's gradient from its stored dS (after the convert, which waited for the
    // fused kernel; attention_bwd_sm90_rab.cuh).
    if constexpr (kHeadDim == 128) {
      if (p.rab_pos && p.rab_ds && p.drab_accum) {
        const dim3 g(sm90_rab_ds_key_blocks(p.max_seqlen) * sm90::kRabGradSplit, p.num_heads,
                     p.batch);
        sm90::hstu_attn_rab_grad_sm90_kernel<T>
            <<<g, 256, sm90::rab_grad_sm90_smem(p.max_seqlen), stream>>>(p);
        HSTU_CUDA_CHECK(cudaGetLastError());
      }
    }
  } else {  // split: dK, dV beside a query-major dQ kernel
    sm90::launch_bwd_pass<T, kHeadDim, true, false>(p, nullptr, stream);
    sm90::launch_bwd_pass<T, kHeadDim, false, false>(p, nullptr, dq_stream);
  }
}
}  // namespace hstu::cuda::attn
