// activation.cu — CUDA SiLU / ReLU / GELU(tanh) forward and backward over strided 2-D views.
//
// The one decision: a single element-wise launcher (ew2d_kernel) with the activation as a
// compile-time functor, fp32 math, 8-wide vector access when every view allows it; in-place
// calls (y == x, dx == dy) are safe because each element is read before it is written by the
// same thread. A head structure (ActHeads) maps grid column c to column (c / width) * stride +
// c % width of each tensor; a vector never straddles two heads (width % 8 == 0 then).
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

// One tensor of a call: element (r, head h, column e) at p + r * ld + h * hs + e.
template <typename T>
struct ActView {
  T* p;
  int64_t ld, hs;
  __device__ T* at(int64_t r, int h, int64_t e) const { return p + r * ld + h * hs + e; }
};

// Grid column c as (head, column in head); width 0: one head, no division.
__device__ __forceinline__ int head_of(int64_t c, int width, int64_t& e) {
  if (width == 0) {
    e = c;
    return 0;
  }
  const int h = static_cast<int>(c) / width;
  e = c - int64_t(h) * width;
  return h;
}

template <Activation A, typename TX, typename TY>
struct ActFwdOp {
  ActView<const TX> x;
  ActView<TY> y;
  int width;  // columns per head; 0 with one head
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    int64_t e;
    const int h = head_of(c, width, e);
    float v[V];
    load_vec_rw<V>(x.at(r, h, e), v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = act_fwd<A>(v[j]);
    store_vec<V>(y.at(r, h, e), v);
  }
};

template <Activation A, typename TX, typename TG>
struct ActBwdOp {
  ActView<const TX> x;
  ActView<const TG> dy;
  ActView<TG> dx;
  int width;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    int64_t e;
    const int h = head_of(c, width, e);
    float xv[V], g[V];
    load_vec<V>(x.at(r, h, e), xv);
    load_vec_rw<V>(dy.at(r, h, e), g);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] *= act_grad<A>(xv[j]);
    store_vec<V>(dx.at(r, h, e), g);
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

// The launch geometry of a call: a rows x (count * width) grid and each tensor's view of it
// (width 0 with one head: rc may then be one long row of contiguous tensors).
struct ActGrid {
  Rows2d rc;
  int64_t count = 1, width = 0;
  bool vec8 = false;
  template <typename T>
  ActView<T> view(const Tensor& t) const {
    return {static_cast<T*>(t.data), pitch(t, rc), count > 1 ? t.shape[1] / count : 0};
  }
};
ActGrid act_grid(const ActHeads& heads, const Tensor& x, std::initializer_list<const Tensor*> ts,
                 const char* op) {
  ActGrid g;
  g.width = check_act_heads(heads, x, ts, op);
  g.count = heads.count;
  for (const Tensor* t : ts) check_cuda_tensor(*t, op);  // x is one of ts
  if (g.count == 1) {
    g.rc = rows2d(ts);
    g.width = 0;
    g.vec8 = can_vec8_2d(g.rc, ts);
    return g;
  }
  g.rc = {x.shape[0], g.count * g.width};
  HSTU_CHECK(g.rc.cols < (int64_t(1) << 31), op, ": rows of ", g.rc.cols, " elements");
  g.vec8 = g.width % 8 == 0;
  for (const Tensor* t : ts)  // rows and head starts 16-byte aligned
    g.vec8 = g.vec8 && vec_alignment(*t) >= 16 &&
             (t->shape[1] / g.count * dtype_size(t->dtype)) % 16 == 0;
  return g;
}

}  // namespace

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y, ActHeads heads) {
  const ActGrid grid = act_grid(heads, x, {&x, &y}, "activation_fwd");
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_vec(grid.vec8, [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      dispatch_io(x.dtype, "activation_fwd x", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dispatch_io(y.dtype, "activation_fwd y", [&](auto ty) {
          using TY = typename decltype(ty)::type;
          launch_ew2d<V>(ctx, grid.rc,
                         ActFwdOp<A, TX, TY>{grid.view<const TX>(x), grid.view<TY>(y),
                                             static_cast<int>(grid.width)});
        });
      });
    });
  });
}

void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    ActHeads heads) {
  const ActGrid grid = act_grid(heads, x, {&x, &dy, &dx}, "activation_bwd");
  HSTU_CHECK(dy.dtype == dx.dtype, "activation_bwd: dy and dx dtypes differ (", dy.str(), ", ",
             dx.str(), ")");
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_vec(grid.vec8, [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      dispatch_io(x.dtype, "activation_bwd x", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dispatch_io(dy.dtype, "activation_bwd dy", [&](auto tg) {
          using TG = typename decltype(tg)::type;
          launch_ew2d<V>(ctx, grid.rc,
                         ActBwdOp<A, TX, TG>{grid.view<const TX>(x), grid.view<const TG>(dy),
                                             grid.view<TG>(dx), static_cast<int>(grid.width)});
        });
      });
    });
  });
}

}  // namespace hstu::cuda
