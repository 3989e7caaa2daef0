// cpu/losses.cpp — CPU multi-task binary cross-entropy and multi-class cross-entropy with their
// fused gradients.
//
// Rows are independent: a parallel loop writes each row's loss into a [N] buffer and its
// gradient row; the buffer is then summed in row order, so the total is bit-identical whatever
// the thread count. All arithmetic is in double.
#include "ops/cpu/losses.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

// Checks logits [N, K], labels i32 [N], loss f64 [1], dlogits (empty or like logits).
void check_args(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                const Tensor& dlogits, const char* op) {
  check_shape(logits, {-1, -1}, op);
  detail::check_cpu(logits, op);
  check_shape(labels, {logits.dim(0)}, "loss labels");
  detail::check_dtype(labels, DType::kI32, "loss labels");
  check_shape(loss, {1}, "loss");
  detail::check_dtype(loss, DType::kF64, "loss");
  if (!dlogits.empty())
    detail::check_2d(dlogits, logits.dim(0), logits.dim(1), logits.dtype, "loss dlogits");
}

// Writes loss_scale * sum of row_loss (in row order) to loss[0].
void write_sum(const std::vector<double>& row_loss, double loss_scale, const Tensor& loss) {
  double sum = 0;
  for (const double l : row_loss) sum += l;
  loss.as<double>()[0] = loss_scale * sum;
}

}  // namespace

void bce_multitask(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  check_args(logits, labels, loss, dlogits, "bce_multitask logits");
  const int64_t n = logits.dim(0), k = logits.dim(1);
  HSTU_CHECK(k >= 1 && k <= 31, "bce_multitask: ", k, " tasks (1..31 fit an i32 bitmask)");
  const int32_t* y = labels.as<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    HSTU_CHECK(y[r] >= 0, "bce_multitask: label ", r, " is ", y[r], " (bitmasks are >= 0)");
  }
  std::vector<double> row_loss(static_cast<size_t>(n));
  detail::dispatch_float(logits, "bce_multitask", [&]<typename T>(T) {
    const Rows<const T> xr = rows_of<const T>(logits);
    const Rows<T> gr = dlogits.empty() ? Rows<T>{} : rows_of<T>(dlogits);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 16 * n * k))
    for (int64_t r = 0; r < n; ++r) {
      double l = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double x = xr[r][t], target = (y[r] >> t) & 1;
        const double e = std::exp(-std::fabs(x));  // in (0, 1]: never overflows
        l += std::max(x, 0.0) + std::log1p(e) - target * x;
        if (gr.base != nullptr) {
          const double sig = x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
          gr[r][t] = static_cast<T>(loss_scale * (sig - target));
        }
      }
      row_loss[r] = l;
    }
  });
  write_sum(row_loss, loss_scale, loss);
}

void cross_entropy(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  check_args(logits, labels, loss, dlogits, "cross_entropy logits");
  const int64_t n = logits.dim(0), c = logits.dim(1);
  HSTU_CHECK(c >= 1, "cross_entropy: no classes");
  const int32_t* y = labels.as<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    HSTU_CHECK(y[r] >= 0 && y[r] < c, "cross_entropy: label ", r, " is ", y[r], ", outside [0, ", c,
               ")");
  }
  std::vector<double> row_loss(static_cast<size_t>(n));
  detail::dispatch_float(logits, "cross_entropy", [&]<typename T>(T) {
    const Rows<const T> xr = rows_of<const T>(logits);
    const Rows<T> gr = dlogits.empty() ? Rows<T>{} : rows_of<T>(dlogits);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 16 * n * c))
    for (int64_t r = 0; r < n; ++r) {
      double mx = xr[r][0];
      for (int64_t j = 1; j < c; ++j) mx = std::max<double>(mx, xr[r][j]);
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(double(xr[r][j]) - mx);
      const double lse = mx + std::log(sum);
      row_loss[r] = lse - xr[r][y[r]];
      if (gr.base != nullptr) {
        for (int64_t j = 0; j < c; ++j) {
          const double p = std::exp(double(xr[r][j]) - lse);
          gr[r][j] = static_cast<T>(loss_scale * (p - (j == y[r] ? 1.0 : 0.0)));
        }
      }
    }
  });
  write_sum(row_loss, loss_scale, loss);
}

}  // namespace hstu::cpu
