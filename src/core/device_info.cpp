// device_info.cpp — CUDA device discovery through the runtime API (CUDA builds only).
#include "core/device_info.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#if defined(HSTU_WITH_CUDA)
#include <cublasLt.h>
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

int64_t cuda_memory_free_bytes() {
#if defined(HSTU_WITH_CUDA)
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<int64_t>(free_b);
#else
  return -1;
#endif
}

double cuda_bf16_peak_tflops() {
#if defined(HSTU_WITH_CUDA)
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
    return 0;
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

#if defined(HSTU_WITH_CUDA)
namespace {
// "80,90a" -> {"80", "90a"}: the architectures this build has native code for.
std::vector<std::string> compiled_archs() {
  std::vector<std::string> out;
  std::stringstream ss(HSTU_CUDA_ARCHS_STR);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}
std::string version(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
}  // namespace
#endif

std::string describe_cuda_build() {
#if defined(HSTU_WITH_CUDA)
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const size_t lt = cublasLtGetVersion();
  std::string archs;
  for (const std::string& a : compiled_archs()) archs += (archs.empty() ? "sm_" : ", sm_") + a;
  std::string out = "  CUDA         runtime " + version(runtime) + ", driver " +
                    (driver > 0 ? version(driver) : std::string("none")) + ", cuBLASLt " +
                    std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." +
                    std::to_string(lt % 100) + "\n";
  out += "  code for     " + archs +
         " (and the first one's PTX, which the driver compiles for newer GPUs)\n";
  out +=
      "  kernels      HSTU attention fwd/bwd on mma.sync tensor cores (bf16, fp16; head widths\n"
      "               padded to 32/64/128/256; every mask, rab), cuBLASLt GEMMs, fused\n"
      "               LayerNorm / SiLU / sampled softmax / ranking losses, sparse optimisers,\n"
      "               on-GPU negatives and evaluation\n";
  return out;
#else
  return std::string("  CUDA         not compiled in (") + HSTU_CPU_ONLY_REASON +
         "); --device cpu only\n";
#endif
}

std::string describe_cuda_devices() {
#if defined(HSTU_WITH_CUDA)
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return std::string("  no CUDA device: ") + cudaGetErrorString(err) + "\n";
  }
  const std::vector<std::string> archs = compiled_archs();
  std::string out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    // Native SASS runs on the same major version at an equal or higher minor (sm_80 on 8.6).
    const int cc = p.major * 10 + p.minor;
    bool native = false;
    for (const std::string& name : archs) {
      const int a = std::atoi(name.c_str());  // "90a" -> 90
      native = native || (a / 10 == p.major && a <= cc);
    }
    char line[512];
    std::snprintf(line, sizeof line,
                  "  GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB, %s\n", i, p.name,
                  p.major, p.minor, p.multiProcessorCount,
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                  native ? "native code" : "PTX compiled by the driver at first use");
    out += line;
  }
  return n == 0 ? "  no CUDA device found\n" : out;
#else
  return "  CUDA not compiled in\n";
#endif
}

}  // namespace hstu
