// common.h — small helpers shared by the CPU op implementations (src/ops/cpu/*.cpp):
// dtype dispatch to float/double templates, row addressing of row-strided views, SiLU, argument
// checks, OpenMP work splitting, fixed-order vectorisable sums, and dropout masks.
//
// The one decision: every parallel reduction or scatter is split over *columns* (or fixed
// blocks), never over the rows being summed, so each output element is summed in the same order
// whatever the thread count — the CPU backend gives bit-identical results run to run.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/context.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace hstu::cpu::detail {

// SiLU and its derivative in the element type: the one CPU definition (activation and uvqk_act
// agree to the bit).
template <typename T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}
template <typename T>
T silu_grad(T x) {  // d/dx x*s(x) = s(x) * (1 + x * (1 - s(x)))
  const T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

// Row r of a row-strided view: base + r * stride.
template <typename T>
struct Rows {
  T* base = nullptr;
  int64_t stride = 0;
  T* operator[](int64_t r) const { return base + r * stride; }
};
// Typed rows of t (throws if t's dtype is not T's).
template <typename T>
Rows<T> rows_of(const Tensor& t) {
  return {t.as<std::remove_const_t<T>>(), t.row_stride};
}

// Calls f(T{}) with T = float or double according to t's dtype.
template <typename F>
decltype(auto) dispatch_float(const Tensor& t, const char* op, F&& f) {
  switch (t.dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    default:
      HSTU_THROW(op, ": the CPU backend takes f32 or f64 tensors, got ", t.str());
  }
}

// Throws unless t is a CPU tensor.
inline void check_cpu(const Tensor& t, const char* what) {
  HSTU_CHECK(t.device == Device::kCPU, what, " is ", t.str(),
             ", the CPU backend needs host memory");
}
// Throws unless t is a CPU tensor of dtype `want`.
inline void check_dtype(const Tensor& t, DType want, const char* what) {
  check_cpu(t, what);
  HSTU_CHECK(t.dtype == want, what, " is ", t.str(), ", expected ", dtype_name(want));
}
// Throws unless t is a 2-D CPU tensor [rows, cols] (-1 = any) of dtype `want`.
inline void check_2d(const Tensor& t, int64_t rows, int64_t cols, DType want, const char* what) {
  check_shape(t, {rows, cols}, what);
  check_dtype(t, want, what);
}

// NOTE: below ~16k element-operations per thread an OpenMP region costs more than it saves.
inline constexpr int64_t kMinWorkPerThread = int64_t(1) << 14;

// Threads for a loop of `work` element-operations: ctx.num_threads (0 = OpenMP's default),
// fewer when the work is small.
inline int threads_for(const Ctx& ctx, int64_t work) {
  const int64_t max_threads = ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads();
  return static_cast<int>(std::clamp<int64_t>(work / kMinWorkPerThread, 1, max_threads));
}

// Runs f(c0, c1) on disjoint column ranges covering [0, cols), one per thread. Used for
// scatters and column reductions: each column is owned by one thread, which visits the rows in
// order, so there are no races and the result does not depend on the thread count.
template <typename F>
void for_column_slices(const Ctx& ctx, int64_t cols, int64_t work, F&& f) {
  const int nt =
      static_cast<int>(std::min<int64_t>(threads_for(ctx, work), std::max<int64_t>(cols, 1)));
#pragma omp parallel num_threads(nt)
  {
    const int64_t tid = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t c0 = cols * tid / n, c1 = cols * (tid + 1) / n;
    if (c0 < c1) f(c0, c1);
  }
}

// Sum of f(c) over c in [0, n), in double: eight interleaved partial sums over the multiple-of-8
// prefix, added pairwise, then the tail. A fixed order (so thread-count independent) that the
// compiler vectorises, unlike one running sum.
template <typename F>
double sum8(int64_t n, F&& f) {
  double acc[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int k = 0; k < 8; ++k) acc[k] += f(c + k);
  double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; c < n; ++c) s += f(c);
  return s;
}

// Rows per block of a row-parallel reduction: each fixed block writes its own partial sums,
// which are then added in block order, so the total does not depend on the thread count.
inline constexpr int64_t kRowBlock = 64;

// Dropout multipliers of `cols` consecutive elements starting at logical index `first`:
// out[c] = 1/(1-p) where dropout_keep(seed, offset, first + c, p), else 0. Each Philox call
// yields the words of four consecutive elements (the stream of philox_uniform); the calls run in
// batches of kDropoutBatch independent counters, which the compiler vectorises.
inline constexpr uint64_t kDropoutBatch = 16;
template <typename T>
void dropout_scales(uint64_t seed, uint64_t offset, float p, uint64_t first, int64_t cols, T* out) {
  const T scale = T(1) / (T(1) - T(p));
  if (p == 0.0f) {
    for (int64_t c = 0; c < cols; ++c) out[c] = T(1);
    return;
  }
  const uint64_t end = first + static_cast<uint64_t>(cols);
  for (uint64_t g = first >> 2; 4 * g < end; g += kDropoutBatch) {
    uint32_t w[4 * kDropoutBatch];  // the words of elements 4g .. 4(g + kDropoutBatch) - 1
    for (uint64_t l = 0; l < kDropoutBatch; ++l) {
      const Philox4 r = philox4x32(seed, offset + g + l);
      w[4 * l] = r.x;
      w[4 * l + 1] = r.y;
      w[4 * l + 2] = r.z;
      w[4 * l + 3] = r.w;
    }
    const uint64_t e0 = std::max(first, 4 * g), e1 = std::min(end, 4 * (g + kDropoutBatch));
    for (uint64_t e = e0; e < e1; ++e)
      out[e - first] = u32_to_unit_float(w[e - 4 * g]) >= p ? scale : T(0);
  }
}

}  // namespace hstu::cpu::detail
