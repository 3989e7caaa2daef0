// host_device.h — HSTU_HD marks a small function that CUDA kernels and host code both call (the
// CPU reference and the kernel then share one formula): __host__ __device__ __forceinline__ under
// nvcc, plain inline elsewhere.
#pragma once

#if defined(__CUDACC__)
#define HSTU_HD __host__ __device__ __forceinline__
#else
#define HSTU_HD inline
#endif
