// cuda_check.h — error checks for CUDA runtime, cuBLAS(Lt) and NCCL calls. Each failure throws
// hstu::Error with the call text and the library's own error string. Empty in CPU-only builds.
#pragma once

#include "core/error.h"

#if defined(HSTU_WITH_CUDA)
#include <cublasLt.h>
#include <cuda_runtime.h>

#define HSTU_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    const cudaError_t hstu_err_ = (call);                                       \
    if (hstu_err_ != cudaSuccess)                                               \
      HSTU_THROW("CUDA error in ", #call, ": ", cudaGetErrorString(hstu_err_)); \
  } while (0)

#define HSTU_CUBLAS_CHECK(call)                                                       \
  do {                                                                                \
    const cublasStatus_t hstu_st_ = (call);                                           \
    if (hstu_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      HSTU_THROW("cuBLAS error in ", #call, ": status ", static_cast<int>(hstu_st_)); \
  } while (0)

namespace hstu {
// True while this thread captures a CUDA graph (core/step_graph.h), which forbids synchronising.
inline bool& cuda_capturing() {
  static thread_local bool on = false;
  return on;
}
}  // namespace hstu

// Checks the last kernel launch (always) and, in debug builds outside graph capture, waits for it
// to finish so the failing kernel is the one reported.
#ifndef NDEBUG
#define HSTU_CUDA_CHECK_LAUNCH()                                             \
  do {                                                                       \
    HSTU_CUDA_CHECK(cudaGetLastError());                                     \
    if (!::hstu::cuda_capturing()) HSTU_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#else
#define HSTU_CUDA_CHECK_LAUNCH() HSTU_CUDA_CHECK(cudaGetLastError())
#endif
#endif
