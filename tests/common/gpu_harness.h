// gpu_harness.h — shared helpers of the GPU consistency tests (tests/gpu/*.cpp, built into
// test_gpu only in CUDA builds): skipping without a device, device arenas and a CUDA Ctx,
// host <-> device copies with dtype conversion (f32/f64 host <-> bf16/f16/f32 device, integers
// as is, strided device views honoured), NaN poisoning of device outputs, rounding host values
// to a low precision, and the principled tolerance check.
//
// The one decision: tolerances are relative to a *naive low-precision implementation* of the same
// math (inputs, matmul outputs and point-wise results rounded to bf16/fp16, fp32 accumulation),
// measured against the fp32 CPU reference on the same rounded inputs:
//     max |gpu - ref| <= m * max |naive - ref| + atol
// (FlashAttention's and recsys-examples' rule; m = 2 forward, 5 backward). No magic epsilons.
//
// API (namespace hstu::test::gpu):
//   HSTU_REQUIRE_GPU()           first statement of every GPU test (GTEST_SKIP without a device)
//   has_device()                 whether a CUDA device is usable
//   device_arena()               1 GiB (HSTU_TEST_GPU_ARENA_MB) for test tensors
//   device_scratch()             256 MiB (HSTU_TEST_GPU_SCRATCH_MB) for ctx.scratch
//   DeviceScope                  rewinds device_arena() (and the host test arena)
//   cuda_ctx(deterministic)      CUDA context: default stream, scratch, blas = blas_state()
//   blas_state()                 the cuBLASLt handle/workspace/plan cache of all tests
//   device_alloc(dtype, dims)    uninitialised device tensor
//   to_device(host, dtype)       new contiguous device copy, floats converted
//   upload(dev_view, host)       host -> existing device view (may be row-strided)
//   to_host(dev)                 new contiguous host copy: floats as f32, ints as is
//   poison(dev)                  NaN-fill (all-ones bytes) a float device view
//   round_to(dtype, x)           value after a round trip through bf16/f16 (f32: as is)
//   round_host(host, dtype)      rounds every element of an f32/f64 host tensor in place
//   max_err(a, b)                max |a - b| over two host tensors (NaN -> inf)
//   expect_lowp_close(gpu, ref, naive, m, atol, what)   the rule above, on host tensors
//   is16(dtype)                  bf16 or f16
//   rnd(dims, dtype, lo, hi)     host f32 uniform values rounded to dtype (one input for both)
//   dev(host, dtype, pad)        device copy; pad > 0: a strided view of a wider poisoned buffer
//   out_dev(dtype, dims, pad)    a poisoned device output (NaN floats, all-ones integers)
//   check_exact(dev, ref, what)  element-wise equality with a host reference
//   bytes_of(dev)                a device view's raw bytes (bit-exact comparisons)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/harness.h"
#include "core/arena.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "ops/cuda_runtime_state.h"

namespace hstu::test::gpu {

inline bool has_device() {
  static const bool yes = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
      return false;
    }
    return n > 0;
  }();
  return yes;
}

#define HSTU_REQUIRE_GPU()                                                          \
  do {                                                                              \
    if (!::hstu::test::gpu::has_device()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

inline size_t env_mb(const char* name, size_t def) {
  const char* v = std::getenv(name);
  return (v ? std::strtoull(v, nullptr, 10) : def) << 20;
}

inline Arena& device_arena() {
  static Arena arena(Device::kCUDA, env_mb("HSTU_TEST_GPU_ARENA_MB", 1024), "test-gpu");
  return arena;
}
inline Arena& device_scratch() {
  static Arena arena(Device::kCUDA, env_mb("HSTU_TEST_GPU_SCRATCH_MB", 256), "test-gpu-scratch");
  return arena;
}

// Rewinds the device arena and the host test arena when a test case ends.
struct DeviceScope {
  size_t mark = device_arena().mark();
  ArenaScope host;
  ~DeviceScope() { device_arena().reset(mark); }
};

// Created once, never destroyed (it lives as long as the test process).
inline void* blas_state() {
  static void* state = hstu::cuda::create_blas_state();
  return state;
}

inline Ctx cuda_ctx(bool deterministic = true) {
  Ctx ctx;
  ctx.device = Device::kCUDA;
  ctx.stream = nullptr;  // default stream
  ctx.scratch = &device_scratch();
  ctx.blas = blas_state();
  ctx.deterministic = deterministic;
  return ctx;
}

inline void sync() {
  HSTU_CUDA_CHECK(cudaDeviceSynchronize());
}

inline Tensor device_alloc(DType t, std::initializer_list<int64_t> dims) {
  return device_arena().alloc(t, dims);
}

// ---- precision ------------------------------------------------------------------------------

inline float round_to(DType t, float x) {
  if (t == DType::kBF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::kF16) return __half2float(__float2half_rn(x));
  return x;
}
inline void round_host(const Tensor& host, DType t) {
  for (int64_t i = 0; i < host.numel(); ++i)
    set(host, i, round_to(t, static_cast<float>(get(host, i))));
}

// ---- copies ---------------------------------------------------------------------------------

// A device array mirroring a host vector (cudaMalloc'd, freed on destruction): built from the
// vector or empty of n elements; host() copies the first m (default all) back, t() views them.
template <typename T>
struct DevVec {
  explicit DevVec(int64_t n) : n(n) {
    HSTU_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)));
  }
  explicit DevVec(const std::vector<T>& h) : DevVec(static_cast<int64_t>(h.size())) {
    HSTU_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DevVec() { cudaFree(p); }
  DevVec(const DevVec&) = delete;
  std::vector<T> host(int64_t m = -1) const {
    std::vector<T> h(static_cast<size_t>(m < 0 ? n : m));
    HSTU_CUDA_CHECK(cudaMemcpy(h.data(), p, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  Tensor t(int64_t m = -1) const {
    return Tensor(p, DTypeOf<T>::value, Device::kCUDA, {m < 0 ? n : m});
  }
  T* p = nullptr;
  int64_t n;
};

namespace detail {
// Element i (row-major over the view's dims) of a host tensor, encoded as `dt` bytes at dst.
inline void encode(const Tensor& host, int64_t i, DType dt, void* dst) {
  switch (dt) {
    case DType::kBF16: {
      const __nv_bfloat16 v = __float2bfloat16_rn(static_cast<float>(get(host, i)));
      std::memcpy(dst, &v, 2);
      return;
    }
    case DType::kF16: {
      const __half v = __float2half_rn(static_cast<float>(get(host, i)));
      std::memcpy(dst, &v, 2);
      return;
    }
    case DType::kF32: {
      const float v = static_cast<float>(get(host, i));
      std::memcpy(dst, &v, 4);
      return;
    }
    case DType::kF64: {
      const double v = get(host, i);
      std::memcpy(dst, &v, 8);
      return;
    }
    case DType::kI32: {
      const int32_t v = static_cast<int32_t>(get(host, i));
      std::memcpy(dst, &v, 4);
      return;
    }
    case DType::kI64: {  // exact: read the integer directly (get() goes through double)
      const int64_t r = host.row_elems() ? i / host.row_elems() : 0;
      const int64_t c = host.row_elems() ? i % host.row_elems() : 0;
      const int64_t v = static_cast<const int64_t*>(host.data)[r * host.row_stride + c];
      std::memcpy(dst, &v, 8);
      return;
    }
    case DType::kU8: {
      const uint8_t v = static_cast<uint8_t>(get(host, i));
      std::memcpy(dst, &v, 1);
      return;
    }
  }
}
inline double decode(DType dt, const void* src) {
  switch (dt) {
    case DType::kBF16: {
      __nv_bfloat16 v;
      std::memcpy(&v, src, 2);
      return __bfloat162float(v);
    }
    case DType::kF16: {
      __half v;
      std::memcpy(&v, src, 2);
      return __half2float(v);
    }
    case DType::kF32: {
      float v;
      std::memcpy(&v, src, 4);
      return v;
    }
    case DType::kF64: {
      double v;
      std::memcpy(&v, src, 8);
      return v;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, src, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, src, 8);
      return static_cast<double>(v);
    }
    case DType::kU8: {
      uint8_t v;
      std::memcpy(&v, src, 1);
      return v;
    }
  }
  return 0;
}
inline int64_t rows_of(const Tensor& t) {
  return t.ndim == 0 ? 0 : (t.ndim == 1 ? 1 : t.shape[0]);
}
inline int64_t row_len(const Tensor& t) {
  return t.ndim == 1 ? t.shape[0] : t.row_elems();
}
inline int64_t pitch_elems(const Tensor& t) {
  return t.ndim == 1 ? t.shape[0] : t.row_stride;
}
}  // namespace detail

// Host (f32/f64 for float device dtypes; same integer dtype otherwise) -> existing device view.
inline void upload(const Tensor& dev, const Tensor& host) {
  ASSERT_EQ(dev.numel(), host.numel()) << dev.str() << " <- " << host.str();
  const size_t es = dtype_size(dev.dtype);
  const int64_t rows = detail::rows_of(dev), len = detail::row_len(dev);
  std::vector<unsigned char> buf(static_cast<size_t>(dev.numel()) * es);
  for (int64_t i = 0; i < dev.numel(); ++i) detail::encode(host, i, dev.dtype, buf.data() + i * es);
  if (dev.numel() == 0) return;
  HSTU_CUDA_CHECK(cudaMemcpy2D(dev.data, detail::pitch_elems(dev) * es, buf.data(), len * es,
                               len * es, rows, cudaMemcpyHostToDevice));
}

inline Tensor to_device(const Tensor& host, DType dt) {
  Tensor d = device_arena().alloc(dt, {host.numel()});
  d.ndim = host.ndim;
  for (int i = 0; i < 4; ++i) d.shape[i] = host.shape[i];
  d.row_stride = d.row_elems();
  upload(d, host);
  return d;
}

// Device view -> new contiguous host tensor (f32 for float dtypes, the same dtype for integers).
inline Tensor to_host(const Tensor& dev) {
  const bool flt = is_float(dev.dtype);
  const DType ht = flt ? (dev.dtype == DType::kF64 ? DType::kF64 : DType::kF32) : dev.dtype;
  Tensor h = alloc(ht, {dev.numel()});
  h.ndim = dev.ndim;
  for (int i = 0; i < 4; ++i) h.shape[i] = dev.shape[i];
  h.row_stride = h.row_elems();
  if (dev.numel() == 0) return h;
  const size_t es = dtype_size(dev.dtype);
  const int64_t rows = detail::rows_of(dev), len = detail::row_len(dev);
  std::vector<unsigned char> buf(static_cast<size_t>(dev.numel()) * es);
  HSTU_CUDA_CHECK(cudaMemcpy2D(buf.data(), len * es, dev.data, detail::pitch_elems(dev) * es,
                               len * es, rows, cudaMemcpyDeviceToHost));
  if (ht == DType::kI64) {
    std::memcpy(h.data, buf.data(), buf.size());
    return h;
  }
  for (int64_t i = 0; i < dev.numel(); ++i)
    set(h, i, detail::decode(dev.dtype, buf.data() + i * es));
  return h;
}

// NaN-fill a float device view (all-ones bytes are NaN in bf16, fp16, f32 and f64).
inline void poison(const Tensor& dev) {
  if (dev.numel() == 0) return;
  const size_t es = dtype_size(dev.dtype);
  const int64_t rows = detail::rows_of(dev), len = detail::row_len(dev);
  HSTU_CUDA_CHECK(cudaMemset2D(dev.data, detail::pitch_elems(dev) * es, 0xFF, len * es, rows));
}

// ---- comparison -----------------------------------------------------------------------------

inline double max_err(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a, b);
}

// The low-precision rule: max |gpu - ref| <= m * max |naive - ref| + atol (host tensors).
inline void expect_lowp_close(const Tensor& gpu, const Tensor& ref, const Tensor& naive, double m,
                              double atol, const std::string& what) {
  const double err = max_abs_diff(gpu, ref);
  const double naive_err = max_abs_diff(naive, ref);
  const double bound = m * naive_err + atol;
  EXPECT_LE(err, bound) << what << ": max|gpu - ref| = " << err << ", naive low-precision error "
                        << naive_err << " (x" << m << " + " << atol
                        << "), max|ref| = " << max_abs(ref) << ", seed " << test_seed();
}

inline bool is16(DType t) {
  return t == DType::kBF16 || t == DType::kF16;
}

// Host f32 tensor of uniform values in [lo, hi), rounded to `dt` (so CPU and GPU see one input).
inline Tensor rnd(std::initializer_list<int64_t> dims, DType dt, double lo = -1.0,
                  double hi = 1.0) {
  Tensor t = alloc(DType::kF32, dims);
  fill_uniform(t, lo, hi);
  round_host(t, dt);
  return t;
}

// Device copy of a host tensor as `dt`; with pad > 0 a strided column view of a wider
// (poisoned) buffer.
inline Tensor dev(const Tensor& host, DType dt, int64_t pad = 0) {
  if (pad == 0 || host.ndim != 2) return to_device(host, dt);
  Tensor full = device_alloc(dt, {host.dim(0), host.dim(1) + 2 * pad});
  if (is_float(dt)) poison(full);
  Tensor view = full.cols(pad, pad + host.dim(1));
  upload(view, host);
  return view;
}

// A poisoned device output (NaN floats, all-ones integers), strided when pad > 0 and 2-D.
inline Tensor out_dev(DType dt, std::initializer_list<int64_t> dims, int64_t pad = 0) {
  Tensor t;
  if (pad > 0 && dims.size() == 2) {
    const int64_t r = *dims.begin(), c = *(dims.begin() + 1);
    t = device_alloc(dt, {r, c + 2 * pad}).cols(pad, pad + c);
  } else {
    t = device_alloc(dt, dims);
  }
  if (t.numel() == 0) return t;
  if (is_float(dt)) {
    poison(t);
  } else {
    const int64_t rows = t.ndim == 1 ? 1 : t.dim(0), len = t.ndim == 1 ? t.dim(0) : t.row_elems();
    const size_t es = dtype_size(dt);
    HSTU_CUDA_CHECK(
        cudaMemset2D(t.data, (t.ndim == 1 ? len : t.row_stride) * es, 0xFF, len * es, rows));
  }
  return t;
}

// Exact equality of a device output with a host reference (NaN never equals: unwritten
// elements fail).
inline void check_exact(const Tensor& dev_out, const Tensor& ref, const std::string& what) {
  sync();
  const Tensor got = to_host(dev_out);
  ASSERT_EQ(got.numel(), ref.numel()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (!(get(got, i) == get(ref, i)) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << get(got, i) << " vs cpu " << get(ref, i);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ (seed " << test_seed() << ")";
}

// Raw bytes of a device view (row by row), for bit-exact comparisons.
inline std::vector<unsigned char> bytes_of(const Tensor& d) {
  sync();
  const size_t es = dtype_size(d.dtype);
  const int64_t rows = d.ndim == 1 ? 1 : d.dim(0), len = d.ndim == 1 ? d.dim(0) : d.row_elems();
  std::vector<unsigned char> out(static_cast<size_t>(rows * len) * es);
  if (out.empty()) return out;
  HSTU_CUDA_CHECK(cudaMemcpy2D(out.data(), len * es, d.data,
                               (d.ndim == 1 ? len : d.row_stride) * es, len * es, rows,
                               cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace hstu::test::gpu
