// cmd_info.cpp — `hstu info`: the build (compiler, CUDA, BLAS, OpenMP) and the devices.
#include <omp.h>

#include <cstdio>

#include "cli/commands.h"
#include "core/device_info.h"

namespace hstu::cli {
namespace {

int run_info() {
  std::printf("hstu build\n");
  std::printf("  compiler     %s %d.%d.%d, __cplusplus %ld\n",
#if defined(__clang__)
              "clang", __clang_major__, __clang_minor__, __clang_patchlevel__,
#else
              "gcc", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__,
#endif
              static_cast<long>(__cplusplus));
#if defined(HSTU_WITH_CBLAS)
  std::printf("  CPU BLAS     OpenBLAS (cblas)\n");
#else
  std::printf("  CPU BLAS     built-in fallback GEMM (install libopenblas-dev for speed)\n");
#endif
  std::printf("  OpenMP       %d threads available\n", omp_get_max_threads());
  std::printf("%s", describe_cuda_build().c_str());
#if defined(HSTU_WITH_CUDA)
  std::printf("%s", describe_cuda_devices().c_str());
#endif
  return 0;
}

}  // namespace

void add_info(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand("info", "build, BLAS, OpenMP, CUDA devices and kernels");
  commands.push_back({app, run_info});
}

}  // namespace hstu::cli
