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
