// harness.h — shared helpers of the op consistency harness: tensors from a test arena, fresh
// random inputs, poisoned outputs, error measures, and the float64 finite-difference gradient
// check every op's backward is held to.
//
// Gradient checks use a random projection: for an op y = f(x) and a random cotangent g, the
// scalar L(x) = <g, f(x)>; the backward with dy = g must give dL/dx, which is compared with
// central differences (L(x + h e_i) - L(x - h e_i)) / 2h in float64 on sampled elements.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace hstu::test {

// A CPU arena large enough for any test case.
inline Arena& test_arena() {
  static Arena arena(Device::kCPU, size_t(1) << 30, "test");
  return arena;
}

// Rewinds the test arena when a test case ends.
struct ArenaScope {
  size_t mark = test_arena().mark();
  ~ArenaScope() { test_arena().reset(mark); }
};

inline Tensor alloc(DType t, std::initializer_list<int64_t> dims) {
  return test_arena().alloc(t, dims);
}

// Element i of a float tensor (f32/f64, contiguous or row-strided), as double.
inline double get(const Tensor& t, int64_t i) {
  const int64_t r = t.row_elems() ? i / t.row_elems() : 0,
                c = t.row_elems() ? i % t.row_elems() : 0;
  const int64_t off = r * t.row_stride + c;
  if (t.dtype == DType::kF64) return static_cast<const double*>(t.data)[off];
  if (t.dtype == DType::kF32) return static_cast<const float*>(t.data)[off];
  if (t.dtype == DType::kI32) return static_cast<const int32_t*>(t.data)[off];
  if (t.dtype == DType::kI64) return static_cast<double>(static_cast<const int64_t*>(t.data)[off]);
  if (t.dtype == DType::kU8) return static_cast<const uint8_t*>(t.data)[off];
  ADD_FAILURE() << "get() on " << t.str();
  return 0;
}
inline void set(const Tensor& t, int64_t i, double v) {
  const int64_t r = t.row_elems() ? i / t.row_elems() : 0,
                c = t.row_elems() ? i % t.row_elems() : 0;
  const int64_t off = r * t.row_stride + c;
  if (t.dtype == DType::kF64)
    static_cast<double*>(t.data)[off] = v;
  else if (t.dtype == DType::kF32)
    static_cast<float*>(t.data)[off] = static_cast<float>(v);
  else if (t.dtype == DType::kI32)
    static_cast<int32_t*>(t.data)[off] = static_cast<int32_t>(v);
  else if (t.dtype == DType::kI64)
    static_cast<int64_t*>(t.data)[off] = static_cast<int64_t>(v);
  else if (t.dtype == DType::kU8)
    static_cast<uint8_t*>(t.data)[off] = static_cast<uint8_t>(v);
  else
    ADD_FAILURE() << "set() on " << t.str();
}

// Fresh random inputs every run: the seed comes from the clock unless HSTU_TEST_SEED is set;
// it is printed on failure through the returned generator's seed (see test_seed()).
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("HSTU_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("[harness] HSTU_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}
inline std::mt19937_64& rng() {
  static std::mt19937_64 gen(test_seed());
  return gen;
}

inline void fill_uniform(const Tensor& t, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, d(rng()));
}
inline void fill_int(const Tensor& t, int64_t lo, int64_t hi) {  // [lo, hi)
  std::uniform_int_distribution<int64_t> d(lo, hi - 1);
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, static_cast<double>(d(rng())));
}
// NaN-fill a float output so that elements an op fails to write are caught.
inline void poison(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, std::numeric_limits<double>::quiet_NaN());
}
inline void fill_value(const Tensor& t, double v) {
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v);
}

// max |a - b| over all elements (NaN in either counts as infinite).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(get(a, i) - get(b, i));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}
inline double max_abs(const Tensor& a) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(get(a, i)));
  return m;
}

// Central-difference check of an analytic gradient in float64.
//   loss():   recomputes the scalar L from the current contents of x;
//   x:        an f64 input tensor (perturbed in place, restored afterwards);
//   grad:     dL/dx from the op's backward (same shape as x);
//   samples:  how many elements to check (all if the tensor is smaller).
// Passes when |fd - analytic| <= atol + rtol * max(|fd|, |analytic|) for every sampled element.
inline void expect_grad_matches_fd(const std::function<double()>& loss, const Tensor& x,
                                   const Tensor& grad, const char* name, int samples = 64,
                                   double h = 1e-6, double rtol = 1e-5, double atol = 1e-8) {
  ASSERT_EQ(x.dtype, DType::kF64) << name << ": finite differences need f64 inputs";
  const int64_t n = x.numel();
  std::vector<int64_t> idx;
  if (n <= samples) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    std::uniform_int_distribution<int64_t> d(0, n - 1);
    for (int s = 0; s < samples; ++s) idx.push_back(d(rng()));
  }
  int failures = 0;
  for (int64_t i : idx) {
    const double x0 = get(x, i);
    set(x, i, x0 + h);
    const double lp = loss();
    set(x, i, x0 - h);
    const double lm = loss();
    set(x, i, x0);
    const double fd = (lp - lm) / (2 * h);
    const double an = get(grad, i);
    if (!(std::fabs(fd - an) <= atol + rtol * std::max(std::fabs(fd), std::fabs(an)))) {
      if (++failures <= 5)
        ADD_FAILURE() << name << "[" << i << "]: finite difference " << fd << " vs analytic " << an;
    }
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << idx.size()
                         << " sampled gradient elements disagree (seed " << test_seed() << ")";
}

// <g, y> for two tensors of the same size (the random-projection loss).
inline double dot(const Tensor& g, const Tensor& y) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += get(g, i) * get(y, i);
  return s;
}

// ---- Strided views, copies and element-wise comparison ---------------------------------------

// A [rows, cols] column block of a wider [rows, cols + 2 * pad] buffer (pad columns on each side),
// so ops are exercised on row-strided views. The whole buffer starts poisoned (NaN) for float
// dtypes (zero otherwise); padding_intact() then tells whether an op wrote outside the view.
inline Tensor alloc_strided(DType t, int64_t rows, int64_t cols, int64_t pad) {
  const Tensor full = alloc(t, {rows, cols + 2 * pad});
  if (is_float(t)) {
    poison(full);
  } else {
    fill_value(full, 0);
  }
  return full.cols(pad, pad + cols);
}
// True when the `pad` columns on each side of a view from alloc_strided are still NaN.
inline bool padding_intact(const Tensor& view, int64_t pad) {
  Tensor full = view;
  full.data = static_cast<char*>(view.data) - pad * static_cast<int64_t>(dtype_size(view.dtype));
  full.shape[1] = view.dim(1) + 2 * pad;
  for (int64_t r = 0; r < view.dim(0); ++r)
    for (int64_t c = 0; c < full.dim(1); ++c)
      if ((c < pad || c >= pad + view.dim(1)) && !std::isnan(get(full, r * full.dim(1) + c)))
        return false;
  return true;
}

// The first `width` columns of each of the `heads` heads of a 2-D tensor whose head stride is its
// columns / heads, as a dense [rows, heads * width] f64 tensor. The columns past `width` (head
// padding) must still be NaN, i.e. never written by the op under test.
inline Tensor unpad_heads(const Tensor& x, int64_t heads, int64_t width, const char* what) {
  const int64_t rows = x.dim(0), stride = x.dim(1) / heads;
  Tensor r = alloc(DType::kF64, {rows, heads * width});
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < stride; ++e) {
        const double v = get(x, (t * heads + h) * stride + e);
        if (e < width) {
          set(r, (t * heads + h) * width + e, v);
        } else {
          EXPECT_TRUE(std::isnan(v)) << what << ": head padding written at row " << t;
        }
      }
  return r;
}

// A contiguous copy of t (same dtype and dims) in the test arena.
inline Tensor clone(const Tensor& t) {
  Tensor c = alloc(t.dtype, {t.numel()});
  c.ndim = t.ndim;
  std::copy(t.shape, t.shape + 4, c.shape);
  c.row_stride = t.row_elems();
  for (int64_t i = 0; i < t.numel(); ++i) set(c, i, get(t, i));
  return c;
}

// Expects |actual - expected| <= atol + rtol * |expected| element-wise (NaN fails), reporting
// the first few mismatches with `what` and the test seed.
inline void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol,
                         const char* what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = get(actual, i), e = get(expected, i);
    if (!(std::fabs(a - e) <= atol + rtol * std::fabs(e))) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: " << a << " vs expected " << e;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << actual.numel() << " elements differ (seed "
                    << test_seed() << ")";
}

}  // namespace hstu::test
