// attention_launch.cuh — the entry points that the per-(head dim, dtype) instantiation files
// define, and the launch helper they share.
//
// The shaping decision: the API file (cuda/hstu_attention.cu) sees only these declarations, so it
// never instantiates a kernel; CMake generates one hstu_attention_{fwd,bwd}_hd<D>_<dtype>.cu per
// pair from hstu_attention_instance.cu.in (CMakeLists.txt: hstu_attention_instances), and the
// files compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/sm80/attention_params.cuh"

namespace hstu::cuda::attn {

// Forward: o = scale * sum_j SiLU(S) v over the visible keys (kHeadDim = padded head width).
template <typename T, int kHeadDim>
void run_fwd(const HstuAttnParams& p, cudaStream_t stream);
// Backward: dk, dv (and d_rab) from a key-major kernel; dq from fp32 atomics (deterministic =
// false) or from a separate query-major kernel (deterministic = true) launched on dq_stream,
// which the caller has made wait for `stream` and joins back afterwards.
template <typename T, int kHeadDim>
void run_bwd(const HstuAttnParams& p, bool deterministic, cudaStream_t stream,
             cudaStream_t dq_stream);

// Calls f(std::bool_constant<v>): kernels whose streamed inputs all move in 16-byte chunks (the
// common case: head strides padded to 8 elements) are compiled without the element-wise load path,
// whose registers would otherwise count inside the main loop.
template <typename F>
void with_vec_in(bool v, F&& f) {
  if (v) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// The sm_80 kernels' grid for resident blocks of `rows` rows (ceil(max_seqlen / rows) blocks,
// ordered by each kernel heaviest first) and the CTA's coordinates in it: j = the block's rank in
// that order (0 = the heaviest: the dK/dV kernel's first key block, the forward's and dQ kernel's
// last query block), h the head, b the sequence. p.block_major puts j slowest.
// NOTE (ML-1M HSTU-large on an H200, ncu): at 200 tokens the grid is ~2 waves of CTAs whose causal
// work differs up to 7x (7 query tiles for key block 0, 1 for key block 3); in the (block, head,
// sequence) order the dK/dV kernel's SMs were active 64% of its 56 us and the dQ kernel's 53% of
// its 32 us: the tail. Block-major is the longest-processing-time-first order when the lengths are
// alike.
inline dim3 sm80_grid(const HstuAttnParams& p, int rows) {
  const unsigned nb = static_cast<unsigned>((p.max_seqlen + rows - 1) / rows);
  const unsigned h = static_cast<unsigned>(p.num_heads), b = static_cast<unsigned>(p.batch);
  return p.block_major ? dim3(h, b, nb) : dim3(nb, h, b);
}
struct CtaCoords {
  int j, h, b, blocks;  // blocks: ceil(max_seqlen / rows), the j's
};
__device__ __forceinline__ CtaCoords cta_coords(const HstuAttnParams& p) {
  if (p.block_major) return {int(blockIdx.z), int(blockIdx.x), int(blockIdx.y), int(gridDim.z)};
  return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), int(gridDim.x)};
}

// Launches kKernel with `smem` bytes of dynamic shared memory, raising its limit once per device.
template <auto kKernel>
void launch(dim3 grid, int threads, size_t smem, cudaStream_t stream, const HstuAttnParams& p) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (smem > 48 * 1024) {
    static std::atomic<uint64_t> raised{0};  // bit d: limit raised on device d
    int dev = 0;
    HSTU_CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t(1) << (dev & 63);
    if (!(raised.load(std::memory_order_relaxed) & bit)) {
      int optin = 0;
      HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
      HSTU_CHECK(static_cast<int64_t>(smem) <= optin, "HSTU attention kernel needs ", smem,
                 " bytes of shared memory per block; this GPU allows ", optin,
                 " (use a smaller head dim)");
      HSTU_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
      raised.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  kKernel<<<grid, threads, smem, stream>>>(p);
  HSTU_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hstu::cuda::attn
