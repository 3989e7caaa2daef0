// activation.cu — CUDA SiLU / ReLU / GELU(tanh) forward and backward over strided 2-D views.
//
// The one decision: a single element-wise launcher (ew2d_kernel) with the activation as a
// compile-time functor, fp32 math, 8-wide vector access when every view allows it; in-place
// calls (y == x, dx == dy) are safe because each element is read before it is written by the
// same thread.
#include "ops/activation.h"
#include "ops/cuda_ops_common.cuh"

namespace hstu::cuda {
namespace {

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK1 = 0.044715f;

template <Activation A>
__device__ __forceinline__ float act_fwd(float x) {
  if constexpr (A == Activation::kSilu) {
    return x / (1.0f + expf(-x));
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else {
    return 0.5f * x * (1.0f + tanhf(kGeluK0 * (x + kGeluK1 * x * x * x)));
  }
}

// d act(x) / dx
template <Activation A>
__device__ __forceinline__ float act_grad(float x) {
  if constexpr (A == Activation::kSilu) {
    const float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? 1.0f : 0.0f;
  } else {
    const float t = tanhf(kGeluK0 * (x + kGeluK1 * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * x * x);
  }
}

template <Activation A, typename TX, typename TY>
struct ActFwdOp {
  const TX* x;
  int64_t ldx;
  TY* y;
  int64_t ldy;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float v[V];
    load_vec_rw<V>(x + r * ldx + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = act_fwd<A>(v[j]);
    store_vec<V>(y + r * ldy + c, v);
  }
};

template <Activation A, typename TX, typename TG>
struct ActBwdOp {
  const TX* x;
  int64_t ldx;
  const TG* dy;
  int64_t lddy;
  TG* dx;
  int64_t lddx;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float xv[V], g[V];
    load_vec<V>(x + r * ldx + c, xv);
    load_vec_rw<V>(dy + r * lddy + c, g);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] *= act_grad<A>(xv[j]);
    store_vec<V>(dx + r * lddx + c, g);
  }
};

template <typename F>
void dispatch_act(Activation act, F&& f) {
  switch (act) {
    case Activation::kSilu:
      return f(std::integral_constant<Activation, Activation::kSilu>{});
    case Activation::kRelu:
      return f(std::integral_constant<Activation, Activation::kRelu>{});
    case Activation::kGelu:
      return f(std::integral_constant<Activation, Activation::kGelu>{});
  }
  HSTU_THROW("unknown activation ", static_cast<int>(act));
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  check_cuda_tensor(a, op);
  check_cuda_tensor(b, op);
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.dim(i) == b.dim(i);
  HSTU_CHECK(same, op, ": shapes differ (", a.str(), ", ", b.str(), ")");
}

}  // namespace

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y) {
  check_same_shape(x, y, "activation_fwd");
  const Rows2d rc = rows2d({&x, &y});
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_vec(can_vec8_2d(rc, {&x, &y}), [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      dispatch_io(x.dtype, "activation_fwd x", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dispatch_io(y.dtype, "activation_fwd y", [&](auto ty) {
          using TY = typename decltype(ty)::type;
          launch_ew2d<V>(ctx, rc,
                         ActFwdOp<A, TX, TY>{static_cast<const TX*>(x.data), pitch(x, rc),
                                             static_cast<TY*>(y.data), pitch(y, rc)});
        });
      });
    });
  });
}

void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_same_shape(x, dy, "activation_bwd");
  check_same_shape(x, dx, "activation_bwd");
  HSTU_CHECK(dy.dtype == dx.dtype, "activation_bwd: dy and dx dtypes differ (", dy.str(), ", ",
             dx.str(), ")");
  const Rows2d rc = rows2d({&x, &dy, &dx});
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_vec(can_vec8_2d(rc, {&x, &dy, &dx}), [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      dispatch_io(x.dtype, "activation_bwd x", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dispatch_io(dy.dtype, "activation_bwd dy", [&](auto tg) {
          using TG = typename decltype(tg)::type;
          launch_ew2d<V>(ctx, rc,
                         ActBwdOp<A, TX, TG>{static_cast<const TX*>(x.data), pitch(x, rc),
                                             static_cast<const TG*>(dy.data), pitch(dy, rc),
                                             static_cast<TG*>(dx.data), pitch(dx, rc)});
        });
      });
    });
  });
}

}  // namespace hstu::cuda
