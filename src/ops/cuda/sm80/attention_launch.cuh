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
