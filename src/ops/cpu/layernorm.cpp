// cpu/layernorm.cpp — CPU LayerNorm, the fused HSTU output path y = Dropout(u * LN(o)), and plain
// dropout, forward and backward.
//
// Row statistics and every reduction are computed in double (also for f32 tensors) and stored
// in the tensor's dtype. One row-parallel backward (ln_bwd_rows) serves both LayerNorms: dx per
// row, and the weight/bias gradients as per-block partial sums added in block order, so they do
// not depend on the thread count. Dropout masks come from dropout_scales (Philox, logical index
// row * cols + col); the fused op keeps them as bits when given a keep tensor (store_keep), and
// its backward then reads them (keep_scales).
#include "ops/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

void check_dropout(const DropoutSpec& drop, const char* op) {
  HSTU_CHECK(drop.p >= 0.0f && drop.p < 1.0f, op, ": dropout probability ", drop.p,
             " must be in [0, 1)");
}

// x [T,D] and its LayerNorm parameters/statistics; w, b [D] optional; mean, rstd [T].
void check_ln_args(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                   const Tensor& rstd, const char* op) {
  check_shape(x, {-1, -1}, op);
  detail::check_cpu(x, op);
  HSTU_CHECK(x.dim(1) > 0, op, ": LayerNorm over an empty last dim (", x.str(), ")");
  const int64_t t = x.dim(0), d = x.dim(1);
  if (!w.empty()) {
    check_shape(w, {d}, "layernorm weight");
    detail::check_dtype(w, x.dtype, "layernorm weight");
  }
  if (!b.empty()) {
    check_shape(b, {d}, "layernorm bias");
    detail::check_dtype(b, x.dtype, "layernorm bias");
  }
  check_shape(mean, {t}, "layernorm mean");
  detail::check_dtype(mean, x.dtype, "layernorm mean");
  check_shape(rstd, {t}, "layernorm rstd");
  detail::check_dtype(rstd, x.dtype, "layernorm rstd");
}

void check_like(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, {x.dim(0), x.dim(1)}, what);
  detail::check_dtype(t, x.dtype, what);
}

// Mean and 1/sqrt(var + eps) of one row (two-pass, in double).
template <typename T>
void row_stats(const T* x, int64_t d, float eps, double& mean, double& rstd) {
  const double mu = detail::sum8(d, [&](int64_t c) { return double(x[c]); }) / double(d);
  const double v = detail::sum8(d, [&](int64_t c) { return (x[c] - mu) * (x[c] - mu); });
  mean = mu;
  rstd = 1.0 / std::sqrt(v / static_cast<double>(d) + static_cast<double>(eps));
}

// Forward of a row-wise LayerNorm: writes mean/rstd and calls emit(r, ln) with the LayerNorm
// output of row r (ln [D], double, after the affine transform when w/b are given).
template <typename T, typename Emit>
void ln_fwd_rows(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                 const Tensor& mean, const Tensor& rstd, Emit&& emit) {
  const int64_t t = x.dim(0), d = x.dim(1);
  const Rows<const T> xr = rows_of<const T>(x);
  const T* wv = w.empty() ? nullptr : w.as<T>();
  const T* bv = b.empty() ? nullptr : b.as<T>();
  T* mv = mean.as<T>();
  T* rv = rstd.as<T>();
#pragma omp parallel num_threads(detail::threads_for(ctx, 8 * t * d))
  {
    std::vector<double> ln(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < t; ++r) {
      double mu, rs;
      row_stats(xr[r], d, eps, mu, rs);
      mv[r] = static_cast<T>(mu);
      rv[r] = static_cast<T>(rs);
      for (int64_t c = 0; c < d; ++c) {
        const double xh = (xr[r][c] - mu) * rs;
        ln[c] = xh * (wv ? wv[c] : 1.0) + (bv ? bv[c] : 0.0);
      }
      emit(r, ln.data());
    }
  }
}

// Backward of a row-wise LayerNorm. grad_out(r, dln, scratch) fills dln [D] = dL/d(LN output)
// of row r (it may write side outputs; scratch is a [D] buffer of T it may use). Then
//   dx[r] (= or +=) rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)),  dxh = dln * w,
//   dw += sum_r dln * xh,  db += sum_r dln   (when given).
template <typename T, typename GradOut>
void ln_bwd_rows(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                 const Tensor& dx, bool accumulate, const Tensor& dw, const Tensor& db,
                 GradOut&& grad_out) {
  const int64_t t = x.dim(0), d = x.dim(1);
  const Rows<const T> xr = rows_of<const T>(x);
  const Rows<T> dxr = rows_of<T>(dx);
  const T* wv = w.empty() ? nullptr : w.as<T>();
  const T* mv = mean.as<T>();
  const T* rv = rstd.as<T>();
  const bool want_w = !dw.empty(), want_b = !db.empty();
  const int64_t nblk = (t + detail::kRowBlock - 1) / detail::kRowBlock;
  // Per-block partial sums: [nblk, 2, D] (dw, db), only when a parameter gradient is wanted.
  std::vector<double> part(want_w || want_b ? static_cast<size_t>(nblk * 2 * d) : 0, 0.0);
#pragma omp parallel num_threads(detail::threads_for(ctx, 12 * t * d))
  {
    std::vector<double> dln(static_cast<size_t>(d)), xh(static_cast<size_t>(d));
    std::vector<T> scratch(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < nblk; ++blk) {
      double* pw = part.empty() ? nullptr : &part[static_cast<size_t>(blk * 2 * d)];
      for (int64_t r = blk * detail::kRowBlock; r < std::min(t, (blk + 1) * detail::kRowBlock);
           ++r) {
        grad_out(r, dln.data(), scratch.data());
        const double mu = mv[r], rs = rv[r];
        for (int64_t c = 0; c < d; ++c) {
          xh[c] = (xr[r][c] - mu) * rs;
          if (pw) {
            pw[c] += dln[c] * xh[c];
            pw[d + c] += dln[c];
          }
        }
        const auto dxh = [&](int64_t c) { return dln[c] * (wv ? wv[c] : 1.0); };
        const double s1 = detail::sum8(d, dxh) / static_cast<double>(d);
        const double s2 =
            detail::sum8(d, [&](int64_t c) { return dxh(c) * xh[c]; }) / static_cast<double>(d);
        for (int64_t c = 0; c < d; ++c) {
          const double v = rs * (dxh(c) - s1 - xh[c] * s2);
          dxr[r][c] = static_cast<T>(accumulate ? dxr[r][c] + v : v);
        }
      }
    }
  }
  if (part.empty()) return;
  for (int64_t c = 0; c < d; ++c) {
    double sw = 0, sb = 0;
    for (int64_t blk = 0; blk < nblk; ++blk) {
      sw += part[static_cast<size_t>(blk * 2 * d + c)];
      sb += part[static_cast<size_t>(blk * 2 * d + d + c)];
    }
    if (want_w) dw.as<T>()[c] += static_cast<T>(sw);
    if (want_b) db.as<T>()[c] += static_cast<T>(sb);
  }
}

void check_param_grads(const Tensor& w, const Tensor& x, const Tensor& dw, const Tensor& db) {
  if (!dw.empty()) {
    HSTU_CHECK(!w.empty(), "layernorm dw given for a LayerNorm without weight");
    check_shape(dw, {x.dim(1)}, "layernorm dw");
    detail::check_dtype(dw, x.dtype, "layernorm dw");
  }
  if (!db.empty()) {
    check_shape(db, {x.dim(1)}, "layernorm db");
    detail::check_dtype(db, x.dtype, "layernorm db");
  }
}

// y = x * keep / (1-p) element-wise (x, y: same shape, row-strided; y may alias x).
void apply_dropout(Ctx& ctx, const Tensor& x, const DropoutSpec& drop, const Tensor& y,
                   const char* op) {
  HSTU_CHECK(!x.empty(), op, ": input is empty");
  detail::check_cpu(x, op);
  detail::check_dtype(y, x.dtype, op);
  HSTU_CHECK(y.ndim == x.ndim && y.dim(0) == x.dim(0) && y.row_elems() == x.row_elems(), op,
             ": output ", y.str(), " does not match input ", x.str());
  check_dropout(drop, op);
  detail::dispatch_float(x, op, [&]<typename T>(T) {
    const int64_t rows = x.dim(0), cols = x.row_elems();
    const Rows<const T> xr = rows_of<const T>(x);
    const Rows<T> yr = rows_of<T>(y);
#pragma omp parallel num_threads(detail::threads_for(ctx, 4 * rows * cols))
    {
      std::vector<T> mask(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        detail::dropout_scales(drop.seed, drop.offset, drop.p, static_cast<uint64_t>(r * cols),
                               cols, mask.data());
        for (int64_t c = 0; c < cols; ++c) yr[r][c] = xr[r][c] * mask[c];
      }
    }
  });
}

}  // namespace

void layernorm_fwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                   const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  check_ln_args(x, w, b, mean, rstd, "layernorm_fwd x");
  check_like(y, x, "layernorm_fwd y");
  detail::dispatch_float(x, "layernorm_fwd", [&]<typename T>(T) {
    const Rows<T> yr = rows_of<T>(y);
    ln_fwd_rows<T>(ctx, x, w, b, eps, mean, rstd, [&](int64_t r, const double* ln) {
      for (int64_t c = 0; c < x.dim(1); ++c) yr[r][c] = static_cast<T>(ln[c]);
    });
  });
}

void layernorm_bwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dy, const Tensor& dx, bool accumulate_dx,
                   const Tensor& dw, const Tensor& db) {
  check_ln_args(x, w, Tensor(), mean, rstd, "layernorm_bwd x");
  check_like(dy, x, "layernorm_bwd dy");
  check_like(dx, x, "layernorm_bwd dx");
  check_param_grads(w, x, dw, db);
  detail::dispatch_float(x, "layernorm_bwd", [&]<typename T>(T) {
    const Rows<const T> dyr = rows_of<const T>(dy);
    ln_bwd_rows<T>(ctx, x, w, mean, rstd, dx, accumulate_dx, dw, db,
                   [&](int64_t r, double* dln, T*) {
                     for (int64_t c = 0; c < x.dim(1); ++c) dln[c] = dyr[r][c];
                   });
  });
}

namespace {

// Row r's dropout decisions as keep bits (ops/layernorm.h) from its multipliers (0: dropped).
template <typename T>
void store_keep(const T* scales, int64_t cols, int32_t* words) {
  for (int64_t wi = 0; wi < dropout_keep_words(cols); ++wi) {
    uint32_t bits = 0;
    for (int64_t c = 32 * wi; c < std::min(cols, 32 * wi + 32); ++c)
      if (scales[c] != T(0)) bits |= 1u << (c - 32 * wi);
    words[wi] = static_cast<int32_t>(bits);
  }
}

// The multipliers of a row from its keep bits: those of detail::dropout_scales.
template <typename T>
void keep_scales(const int32_t* words, float p, int64_t cols, T* out) {
  const T scale = T(1) / (T(1) - T(p));
  for (int64_t c = 0; c < cols; ++c)
    out[c] = (static_cast<uint32_t>(words[c / 32]) >> (c % 32)) & 1u ? scale : T(0);
}

}  // namespace

void ln_mul_dropout_fwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, float eps, const DropoutSpec& drop, const Tensor& keep,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  check_ln_args(o, w, b, mean, rstd, "ln_mul_dropout_fwd o");
  check_like(u, o, "ln_mul_dropout_fwd u");
  check_like(y, o, "ln_mul_dropout_fwd y");
  check_dropout(drop, "ln_mul_dropout_fwd");
  check_dropout_keep(keep, o.dim(0), o.dim(1), Device::kCPU, "ln_mul_dropout_fwd");
  const bool store = drop.p > 0.0f && !keep.empty();
  detail::dispatch_float(o, "ln_mul_dropout_fwd", [&]<typename T>(T) {
    const int64_t e = o.dim(1);
    const Rows<const T> ur = rows_of<const T>(u);
    const Rows<T> yr = rows_of<T>(y);
    ln_fwd_rows<T>(ctx, o, w, b, eps, mean, rstd, [&](int64_t r, const double* ln) {
      // NOTE: the mask is written into y first, then scaled in place (no second buffer).
      detail::dropout_scales(drop.seed, drop.offset, drop.p, static_cast<uint64_t>(r * e), e,
                             yr[r]);
      if (store) store_keep(yr[r], e, keep.as<int32_t>() + r * keep.dim(1));
      for (int64_t c = 0; c < e; ++c) yr[r][c] = static_cast<T>(yr[r][c] * (ur[r][c] * ln[c]));
    });
  });
}

void ln_mul_dropout_bwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, const Tensor& mean, const Tensor& rstd,
                        const DropoutSpec& drop, const Tensor& keep, const Tensor& dy,
                        const Tensor& do_, const Tensor& du, const Tensor& dw, const Tensor& db) {
  check_ln_args(o, w, b, mean, rstd, "ln_mul_dropout_bwd o");
  check_like(u, o, "ln_mul_dropout_bwd u");
  check_like(dy, o, "ln_mul_dropout_bwd dy");
  check_like(do_, o, "ln_mul_dropout_bwd do");
  check_like(du, o, "ln_mul_dropout_bwd du");
  check_param_grads(w, o, dw, db);
  check_dropout(drop, "ln_mul_dropout_bwd");
  check_dropout_keep(keep, o.dim(0), o.dim(1), Device::kCPU, "ln_mul_dropout_bwd");
  const bool stored = drop.p > 0.0f && !keep.empty();
  detail::dispatch_float(o, "ln_mul_dropout_bwd", [&]<typename T>(T) {
    const int64_t e = o.dim(1);
    const Rows<const T> orr = rows_of<const T>(o), ur = rows_of<const T>(u),
                        dyr = rows_of<const T>(dy);
    const Rows<T> dur = rows_of<T>(du);
    const T* wv = w.empty() ? nullptr : w.as<T>();
    const T* bv = b.empty() ? nullptr : b.as<T>();
    const T* mv = mean.as<T>();
    const T* rv = rstd.as<T>();
    ln_bwd_rows<T>(ctx, o, w, mean, rstd, do_, false, dw, db, [&](int64_t r, double* dln, T* mask) {
      if (stored)
        keep_scales(keep.as<int32_t>() + r * keep.dim(1), drop.p, e, mask);
      else
        detail::dropout_scales(drop.seed, drop.offset, drop.p, static_cast<uint64_t>(r * e), e,
                               mask);
      const double mu = mv[r], rs = rv[r];
      for (int64_t c = 0; c < e; ++c) {
        const double ln = (orr[r][c] - mu) * rs * (wv ? wv[c] : 1.0) + (bv ? bv[c] : 0.0);
        const double g = double(dyr[r][c]) * mask[c];
        dur[r][c] = static_cast<T>(g * ln);
        dln[c] = g * ur[r][c];
      }
    });
  });
}

void dropout_fwd(Ctx& ctx, const Tensor& x, const DropoutSpec& drop, const Tensor& y) {
  apply_dropout(ctx, x, drop, y, "dropout_fwd");
}

void dropout_bwd(Ctx& ctx, const Tensor& dy, const DropoutSpec& drop, const Tensor& dx) {
  apply_dropout(ctx, dy, drop, dx, "dropout_bwd");  // the same mask: dx = dy * keep / (1-p)
}

}  // namespace hstu::cpu
