// cpu/l2norm.cpp — CPU row-wise L2 normalisation y = x / max(||x||, eps) and its backward.
//
// The backward needs only the forward output y and the saved clamped norm n: where the norm was
// not clamped (n > eps), dx = (dy - y <y, dy>) / n; where it was (n == eps, y = x / eps is
// linear in x), dx = dy / eps. Norms and dot products are accumulated in double.
#include "ops/cpu/l2norm.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

void check_rows(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, {x.dim(0), x.dim(1)}, what);
  detail::check_dtype(t, x.dtype, what);
}

}  // namespace

void l2norm_fwd(Ctx& ctx, const Tensor& x, float eps, const Tensor& y, const Tensor& norms) {
  check_shape(x, {-1, -1}, "l2norm_fwd x");
  detail::check_cpu(x, "l2norm_fwd x");
  check_rows(y, x, "l2norm_fwd y");
  check_shape(norms, {x.dim(0)}, "l2norm_fwd norms");
  detail::check_dtype(norms, x.dtype, "l2norm_fwd norms");
  HSTU_CHECK(eps > 0, "l2norm_fwd: eps must be positive, got ", eps);
  detail::dispatch_float(x, "l2norm_fwd", [&]<typename T>(T) {
    const int64_t t = x.dim(0), d = x.dim(1);
    const Rows<const T> xr = rows_of<const T>(x);
    const Rows<T> yr = rows_of<T>(y);
    T* nv = norms.as<T>();
#pragma omp parallel for num_threads(detail::threads_for(ctx, 3 * t * d))
    for (int64_t r = 0; r < t; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < d; ++c) ss += double(xr[r][c]) * xr[r][c];
      const T n = static_cast<T>(std::max(std::sqrt(ss), static_cast<double>(eps)));
      nv[r] = n;
      const double inv = 1.0 / n;
      for (int64_t c = 0; c < d; ++c) yr[r][c] = static_cast<T>(xr[r][c] * inv);
    }
  });
}

void l2norm_bwd(Ctx& ctx, const Tensor& y, const Tensor& norms, float eps, const Tensor& dy,
                const Tensor& dx, bool accumulate) {
  check_shape(y, {-1, -1}, "l2norm_bwd y");
  detail::check_cpu(y, "l2norm_bwd y");
  check_shape(norms, {y.dim(0)}, "l2norm_bwd norms");
  detail::check_dtype(norms, y.dtype, "l2norm_bwd norms");
  check_rows(dy, y, "l2norm_bwd dy");
  check_rows(dx, y, "l2norm_bwd dx");
  detail::dispatch_float(y, "l2norm_bwd", [&]<typename T>(T) {
    const int64_t t = y.dim(0), d = y.dim(1);
    const Rows<const T> yr = rows_of<const T>(y), dyr = rows_of<const T>(dy);
    const Rows<T> dxr = rows_of<T>(dx);
    const T* nv = norms.as<T>();
#pragma omp parallel for num_threads(detail::threads_for(ctx, 4 * t * d))
    for (int64_t r = 0; r < t; ++r) {
      // The norm was clamped iff the saved norm is eps (rounded to T as the forward stored it).
      const bool clamped = !(nv[r] > static_cast<T>(eps));
      double proj = 0;
      if (!clamped)
        for (int64_t c = 0; c < d; ++c) proj += double(yr[r][c]) * dyr[r][c];
      const double inv = 1.0 / nv[r];
      for (int64_t c = 0; c < d; ++c) {
        const double v = (dyr[r][c] - yr[r][c] * proj) * inv;
        dxr[r][c] = static_cast<T>(accumulate ? dxr[r][c] + v : v);
      }
    }
  });
}

}  // namespace hstu::cpu
