// cpu/optimizer.cpp — CPU dense optimiser step (Adam, AdamW, SGD) over flat buffers, and the
// f64 sum of squares used for gradient-norm clipping.
//
// Element-wise updates are computed in double and stored in the buffers' dtype. The sum of
// squares adds fixed 4096-element blocks and then the block sums in order, so the clipping
// norm — and with it the whole run — does not depend on the thread count.
#include "ops/cpu/optimizer.h"

#include <cmath>
#include <vector>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

void check_flat(const Tensor& t, const Tensor& like, const char* what) {
  detail::check_dtype(t, like.dtype, what);
  HSTU_CHECK(t.contiguous() && t.numel() == like.numel(), what, " is ", t.str(),
             ", expected a contiguous buffer of ", like.numel(), " elements like ", like.str());
}

// Whether the guard (empty: none) holds a non-finite value.
bool skipped(const Tensor& guard) {
  return !guard.empty() && !all_finite(guard.as<double>(), guard.numel());
}

template <typename T>
void dense_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params, const Tensor& grads,
                const Tensor& m, const Tensor& v) {
  if (skipped(spec.skip_if_nonfinite)) return;  // a non-finite step: nothing is applied
  const int64_t n = params.numel();
  T* p = params.as<T>();
  const T* g = grads.as<T>();
  const double lr = spec.lr, wd = spec.weight_decay;
  const double gs =
      spec.clip_norm > 0
          ? spec.grad_scale * clip_factor(spec.clip_norm, spec.grad_sumsq.as<double>()[0])
          : spec.grad_scale;
  const auto kind = spec.kind;
  if (kind == DenseOptimizerSpec::kSgd) {
#pragma omp parallel for num_threads(detail::threads_for(ctx, 4 * n))
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] - lr * (gs * g[i] + wd * p[i]));
    return;
  }
  const double b1 = spec.beta1, b2 = spec.beta2, eps = spec.eps;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(spec.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(spec.step));
  const bool decoupled = kind == DenseOptimizerSpec::kAdamW;
  T* mv = m.as<T>();
  T* vv = v.as<T>();
#pragma omp parallel for num_threads(detail::threads_for(ctx, 16 * n))
  for (int64_t i = 0; i < n; ++i) {
    double pi = p[i];
    double gi = gs * g[i];
    if (decoupled) {
      pi -= lr * wd * pi;  // AdamW: decay the weight itself, outside the moments
    } else {
      gi += wd * pi;  // Adam: L2 penalty through the gradient
    }
    const double mi = b1 * mv[i] + (1 - b1) * gi;
    const double vi = b2 * vv[i] + (1 - b2) * gi * gi;
    mv[i] = static_cast<T>(mi);
    vv[i] = static_cast<T>(vi);
    p[i] = static_cast<T>(pi - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps));
  }
}

}  // namespace

void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                          const Tensor& grads, const Tensor& m, const Tensor& v) {
  detail::check_cpu(params, "dense optimizer params");
  HSTU_CHECK(params.contiguous(), "dense optimizer: params ", params.str(), " must be contiguous");
  check_flat(grads, params, "dense optimizer grads");
  if (spec.clip_norm > 0) {
    detail::check_cpu(spec.grad_sumsq, "dense optimizer grad_sumsq");
    detail::check_dtype(spec.grad_sumsq, DType::kF64, "dense optimizer grad_sumsq");
  }
  if (!spec.skip_if_nonfinite.empty()) {
    detail::check_cpu(spec.skip_if_nonfinite, "dense optimizer skip_if_nonfinite");
    detail::check_dtype(spec.skip_if_nonfinite, DType::kF64, "dense optimizer skip_if_nonfinite");
  }
  if (spec.kind != DenseOptimizerSpec::kSgd) {
    HSTU_CHECK(spec.step >= 1, "dense Adam: step is 1-based, got ", spec.step);
    check_flat(m, params, "dense optimizer m");
    check_flat(v, params, "dense optimizer v");
  }
  detail::dispatch_float(params, "dense_optimizer_step",
                         [&]<typename T>(T) { dense_step<T>(ctx, spec, params, grads, m, v); });
}

double sum_squares(Ctx& ctx, const Tensor& x) {
  detail::check_cpu(x, "sum_squares x");
  HSTU_CHECK(x.contiguous(), "sum_squares: x ", x.str(), " must be contiguous");
  return detail::dispatch_float(x, "sum_squares", [&]<typename T>(T) {
    constexpr int64_t kBlock = 4096;
    const int64_t n = x.numel(), nblk = (n + kBlock - 1) / kBlock;
    const T* p = x.as<T>();
    std::vector<double> part(static_cast<size_t>(nblk));
#pragma omp parallel for num_threads(detail::threads_for(ctx, n))
    for (int64_t b = 0; b < nblk; ++b) {
      double s = 0;
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) s += double(p[i]) * p[i];
      part[static_cast<size_t>(b)] = s;
    }
    double total = 0;
    for (double s : part) total += s;
    return total;
  });
}

void sum_squares_into(Ctx& ctx, const Tensor& x, const Tensor& out) {
  detail::check_cpu(out, "sum_squares out");
  detail::check_dtype(out, DType::kF64, "sum_squares out");
  HSTU_CHECK(out.numel() == 1, "sum_squares: out ", out.str(), " must hold one f64");
  out.as<double>()[0] = cpu::sum_squares(ctx, x);
}

}  // namespace hstu::cpu
