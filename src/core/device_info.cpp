// device_info.cpp — CUDA device discovery through the runtime API (CUDA builds only).
#include "core/device_info.h"

#include <cstdio>

#if defined(HSTU_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace hstu {

int cuda_device_count() {
#if defined(HSTU_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

int64_t cuda_memory_used_bytes() {
#if defined(HSTU_WITH_CUDA)
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<int64_t>(total_b - free_b);
#else
  return 0;
#endif
}

double cuda_bf16_peak_tflops() {
#if defined(HSTU_WITH_CUDA)
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return 0;
  const std::string name = p.name;
  // Dense (non-sparse) bf16 tensor-core peaks of the SXM parts, from the vendor datasheets.
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989;
  if (name.find("A100") != std::string::npos) return 312;
  if (name.find("B200") != std::string::npos) return 2250;
  if (name.find("L40") != std::string::npos) return 362;
  return 0;
#else
  return 0;
#endif
}

std::string describe_cuda_devices() {
#if defined(HSTU_WITH_CUDA)
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return std::string("  no CUDA device: ") + cudaGetErrorString(err) + "\n";
  std::string out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    char line[512];
    std::snprintf(line, sizeof line, "  GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", i,
                  p.name, p.major, p.minor, p.multiProcessorCount,
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    out += line;
  }
  return n == 0 ? "  no CUDA device found\n" : out;
#else
  return "  CUDA not compiled in\n";
#endif
}

}  // namespace hstu
