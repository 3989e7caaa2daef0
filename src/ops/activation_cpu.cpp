// activation_cpu.cpp — CPU SiLU / ReLU / GELU forward and backward on row-strided views.
//
// GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's
// approximate="tanh"), the form the CUDA kernels use, so both backends compute the same
// function. Math is done in the element type; the backward differentiates the forward input x.
#include <cmath>

#include "ops/activation.h"
#include "ops/ops_cpu_common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

template <typename T>
struct Silu {
  static T fwd(T x) { return x / (T(1) + std::exp(-x)); }
  static T grad(T x) {  // d/dx x*s(x) = s(x) * (1 + x * (1 - s(x)))
    const T s = T(1) / (T(1) + std::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};
template <typename T>
struct Relu {
  static T fwd(T x) { return x > T(0) ? x : T(0); }
  static T grad(T x) { return x > T(0) ? T(1) : T(0); }
};
template <typename T>
struct Gelu {
  static constexpr T kC = T(0.7978845608028654);  // sqrt(2 / pi)
  static constexpr T kA = T(0.044715);
  static T fwd(T x) { return T(0.5) * x * (T(1) + std::tanh(kC * (x + kA * x * x * x))); }
  static T grad(T x) {
    const T th = std::tanh(kC * (x + kA * x * x * x));
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * kC * (T(1) + T(3) * kA * x * x);
  }
};

template <typename T, typename Fn>
void fwd_impl(Ctx& ctx, const Tensor& x, const Tensor& y) {
  const int64_t rows = x.dim(0), cols = x.row_elems();
  const Rows<const T> xr = rows_of<const T>(x);
  const Rows<T> yr = rows_of<T>(y);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * rows * cols))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) yr[r][c] = Fn::fwd(xr[r][c]);
}

template <typename T, typename Fn>
void bwd_impl(Ctx& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t rows = x.dim(0), cols = x.row_elems();
  const Rows<const T> xr = rows_of<const T>(x), dyr = rows_of<const T>(dy);
  const Rows<T> dxr = rows_of<T>(dx);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * rows * cols))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dxr[r][c] = dyr[r][c] * Fn::grad(xr[r][c]);
}

// Calls f.template operator()<T, Fn>() for the tensor's dtype and the activation.
template <typename F>
void dispatch(Activation act, const Tensor& x, const char* op, F&& f) {
  detail::dispatch_float(x, op, [&]<typename T>(T) {
    switch (act) {
      case Activation::kSilu:
        return f.template operator()<T, Silu<T>>();
      case Activation::kRelu:
        return f.template operator()<T, Relu<T>>();
      case Activation::kGelu:
        return f.template operator()<T, Gelu<T>>();
    }
    HSTU_THROW(op, ": unknown activation ", static_cast<int>(act));
  });
}

void check_like(const Tensor& t, const Tensor& x, const char* what) {
  detail::check_dtype(t, x.dtype, what);
  HSTU_CHECK(t.ndim == x.ndim && t.dim(0) == x.dim(0) && t.row_elems() == x.row_elems(), what,
             " is ", t.str(), ", expected the shape of x ", x.str());
}

}  // namespace

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y) {
  HSTU_CHECK(!x.empty(), "activation_fwd: x is empty");
  detail::check_cpu(x, "activation x");
  check_like(y, x, "activation y");
  dispatch(act, x, "activation_fwd",
           [&]<typename T, typename Fn>() { fwd_impl<T, Fn>(ctx, x, y); });
}

void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  HSTU_CHECK(!x.empty(), "activation_bwd: x is empty");
  detail::check_cpu(x, "activation x");
  check_like(dy, x, "activation dy");
  check_like(dx, x, "activation dx");
  dispatch(act, x, "activation_bwd",
           [&]<typename T, typename Fn>() { bwd_impl<T, Fn>(ctx, x, dy, dx); });
}

}  // namespace hstu::cpu
