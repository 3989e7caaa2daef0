// ops_cpu_common.h — small helpers shared by the CPU op implementations (src/ops/*_cpu.cpp):
// dtype dispatch to float/double templates, row addressing of row-strided views, argument
// checks, and OpenMP work splitting.
//
// The one decision: every parallel reduction or scatter is split over *columns* (or fixed
// blocks), never over the rows being summed, so each output element is summed in the same order
// whatever the thread count — the CPU backend gives bit-identical results run to run.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/context.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace hstu::cpu::detail {

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

// Rows per block of a row-parallel reduction: each fixed block writes its own partial sums,
// which are then added in block order, so the total does not depend on the thread count.
inline constexpr int64_t kRowBlock = 64;

// Dropout multipliers of `cols` consecutive elements starting at logical index `first`:
// out[c] = 1/(1-p) where dropout_keep(seed, offset, first + c, p), else 0. One Philox call per
// four elements (the stream of philox_uniform), with the same keep test as dropout_keep.
template <typename T>
void dropout_scales(uint64_t seed, uint64_t offset, float p, uint64_t first, int64_t cols, T* out) {
  const T scale = T(1) / (T(1) - T(p));
  if (p == 0.0f) {
    for (int64_t c = 0; c < cols; ++c) out[c] = T(1);
    return;
  }
  Philox4 r{};
  for (int64_t c = 0; c < cols; ++c) {
    const uint64_t i = first + static_cast<uint64_t>(c);
    if (c == 0 || (i & 3) == 0) r = philox4x32(seed, offset + (i >> 2));
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
    out[c] = u32_to_unit_float(words[i & 3]) >= p ? scale : T(0);
  }
}

}  // namespace hstu::cpu::detail
