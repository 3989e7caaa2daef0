// cpu/activation.cpp — CPU SiLU / ReLU / GELU forward and backward on row-strided views.
//
// GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's
// approximate="tanh"), the form the CUDA kernels use, so both backends compute the same
// function. Math is done in the element type; the backward differentiates the forward input x.
// With a head structure (ActHeads) element c of head h of row r sits at column h * stride + c of
// each tensor, its stride being its columns / heads.
#include "ops/cpu/activation.h"

#include <cmath>

#include "ops/cpu/common.h"
#include "ops/detail/checks.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

template <typename T>
struct Silu {
  static T fwd(T x) { return detail::silu(x); }
  static T grad(T x) { return detail::silu_grad(x); }
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

// Head stride of t under a head structure of `count` heads (0 for one head: unused).
int64_t hstride(const Tensor& t, int64_t count) {
  return count > 1 ? t.row_elems() / count : 0;
}

template <typename T, typename Fn>
void fwd_impl(Ctx& ctx, const Tensor& x, const Tensor& y, int64_t count, int64_t width) {
  const int64_t rows = x.dim(0), hx = hstride(x, count), hy = hstride(y, count);
  const Rows<const T> xr = rows_of<const T>(x);
  const Rows<T> yr = rows_of<T>(y);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * rows * count * width))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < count; ++h)
      for (int64_t c = 0; c < width; ++c) yr[r][h * hy + c] = Fn::fwd(xr[r][h * hx + c]);
}

template <typename T, typename Fn>
void bwd_impl(Ctx& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx, int64_t count,
              int64_t width) {
  const int64_t rows = x.dim(0), hx = hstride(x, count), hdy = hstride(dy, count),
                hdx = hstride(dx, count);
  const Rows<const T> xr = rows_of<const T>(x), dyr = rows_of<const T>(dy);
  const Rows<T> dxr = rows_of<T>(dx);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * rows * count * width))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < count; ++h)
      for (int64_t c = 0; c < width; ++c)
        dxr[r][h * hdx + c] = dyr[r][h * hdy + c] * Fn::grad(xr[r][h * hx + c]);
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

}  // namespace

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y, ActHeads heads) {
  const int64_t width = check_act_heads(heads, x, {&y}, "activation_fwd");
  detail::check_cpu(x, "activation x");
  detail::check_dtype(y, x.dtype, "activation y");
  dispatch(act, x, "activation_fwd",
           [&]<typename T, typename Fn>() { fwd_impl<T, Fn>(ctx, x, y, heads.count, width); });
}

void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    ActHeads heads) {
  const int64_t width = check_act_heads(heads, x, {&dy, &dx}, "activation_bwd");
  detail::check_cpu(x, "activation x");
  detail::check_dtype(dy, x.dtype, "activation dy");
  detail::check_dtype(dx, x.dtype, "activation dx");
  dispatch(act, x, "activation_bwd",
           [&]<typename T, typename Fn>() { bwd_impl<T, Fn>(ctx, x, dy, dx, heads.count, width); });
}

}  // namespace hstu::cpu
