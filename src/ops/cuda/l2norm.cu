// l2norm.cu — CUDA row-wise L2 normalisation y = x / max(||x||, eps) and its backward.
//
// The one decision: one warp per row, fp32 sums, the row re-read from cache for the second
// pass; the backward uses only y and the saved clamped norm n (dx = (dy - y <y, dy>) / n, or
// dy / eps where the norm was clamped), exactly the CPU reference's formulation.
#include "ops/cuda/common.cuh"
#include "ops/cuda/l2norm.h"

namespace hstu::cuda {
namespace {

constexpr int kWarps = 8;

template <int V, typename TX, typename TY>
__global__ void __launch_bounds__(kWarps * 32)
    l2norm_fwd_kernel(const TX* x, int64_t ldx, TY* y, int64_t ldy, float* norms, int64_t rows,
                      int64_t cols, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;
  x += row * ldx;
  y += row * ldy;
  float ss = 0.0f;
  for (int64_t c = static_cast<int64_t>(lane) * V; c < cols; c += 32 * V) {
    float v[V];
    load_vec<V>(x + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += v[j] * v[j];
  }
  const float n = fmaxf(sqrtf(warp_sum(ss)), eps);
  if (lane == 0) norms[row] = n;
  const float inv = 1.0f / n;
  for (int64_t c = static_cast<int64_t>(lane) * V; c < cols; c += 32 * V) {
    float v[V];
    load_vec<V>(x + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= inv;
    store_vec<V>(y + c, v);
  }
}

template <int V, typename TY, typename TG>
__global__ void __launch_bounds__(kWarps * 32)
    l2norm_bwd_kernel(const TY* y, int64_t ldy, const float* norms, const TG* dy, int64_t lddy,
                      TG* dx, int64_t lddx, int64_t rows, int64_t cols, float eps,
                      bool accumulate) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;
  y += row * ldy;
  dy += row * lddy;
  dx += row * lddx;
  const float n = norms[row];
  const bool clamped = !(n > eps);
  float proj = 0.0f;
  if (!clamped) {
    for (int64_t c = static_cast<int64_t>(lane) * V; c < cols; c += 32 * V) {
      float yv[V], g[V];
      load_vec<V>(y + c, yv);
      load_vec_rw<V>(dy + c, g);  // dx may alias dy
#pragma unroll
      for (int j = 0; j < V; ++j) proj += yv[j] * g[j];
    }
    proj = warp_sum(proj);
  }
  const float inv = 1.0f / n;
  for (int64_t c = static_cast<int64_t>(lane) * V; c < cols; c += 32 * V) {
    float yv[V], g[V];
    load_vec<V>(y + c, yv);
    load_vec_rw<V>(dy + c, g);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = (g[j] - yv[j] * proj) * inv;
    if (accumulate) {
      float old[V];
      load_vec_rw<V>(dx + c, old);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] += old[j];
    }
    store_vec<V>(dx + c, g);
  }
}

void check_rows(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  check_cuda_tensor(t, what);
  check_shape(t, {rows, cols}, what);
}

void check_norms(const Tensor& norms, int64_t rows, const char* what) {
  check_cuda_tensor(norms, what);
  check_shape(norms, {rows}, what);
  HSTU_CHECK(norms.dtype == DType::kF32, what, " must be f32 on CUDA, got ", norms.str());
}

}  // namespace

void l2norm_fwd(Ctx& ctx, const Tensor& x, float eps, const Tensor& y, const Tensor& norms) {
  HSTU_CHECK(x.ndim == 2, "l2norm_fwd: x must be 2-D, got ", x.str());
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_rows(x, rows, cols, "l2norm_fwd x");
  check_rows(y, rows, cols, "l2norm_fwd y");
  check_norms(norms, rows, "l2norm_fwd norms");
  HSTU_CHECK(eps > 0, "l2norm_fwd: eps must be positive, got ", eps);
  if (rows == 0) return;
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  dispatch_vec(can_vec8(cols, {&x, &y}), [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(x.dtype, "l2norm_fwd x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      dispatch_io(y.dtype, "l2norm_fwd y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        l2norm_fwd_kernel<V, TX, TY><<<grid, kWarps * 32, 0, stream_of(ctx)>>>(
            static_cast<const TX*>(x.data), x.row_stride, static_cast<TY*>(y.data), y.row_stride,
            norms.as<float>(), rows, cols, eps);
      });
    });
  });
  HSTU_CUDA_CHECK_LAUNCH();
}

void l2norm_bwd(Ctx& ctx, const Tensor& y, const Tensor& norms, float eps, const Tensor& dy,
                const Tensor& dx, bool accumulate) {
  HSTU_CHECK(y.ndim == 2, "l2norm_bwd: y must be 2-D, got ", y.str());
  const int64_t rows = y.dim(0), cols = y.dim(1);
  check_rows(y, rows, cols, "l2norm_bwd y");
  check_rows(dy, rows, cols, "l2norm_bwd dy");
  check_rows(dx, rows, cols, "l2norm_bwd dx");
  check_norms(norms, rows, "l2norm_bwd norms");
  HSTU_CHECK(dy.dtype == dx.dtype, "l2norm_bwd: dy and dx dtypes differ (", dy.str(), ", ",
             dx.str(), ")");
  if (rows == 0) return;
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  dispatch_vec(can_vec8(cols, {&y, &dy, &dx}), [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(y.dtype, "l2norm_bwd y", [&](auto ty) {
      using TY = typename decltype(ty)::type;
      dispatch_io(dy.dtype, "l2norm_bwd dy", [&](auto tg) {
        using TG = typename decltype(tg)::type;
        l2norm_bwd_kernel<V, TY, TG><<<grid, kWarps * 32, 0, stream_of(ctx)>>>(
            static_cast<const TY*>(y.data), y.row_stride, norms.as<float>(),
            static_cast<const TG*>(dy.data), dy.row_stride, static_cast<TG*>(dx.data),
            dx.row_stride, rows, cols, eps, accumulate);
      });
    });
  });
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
