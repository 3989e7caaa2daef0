// cpu/gemm.cpp — CPU GEMM and bias gradient: C = alpha * op(A) @ op(B) + beta * C (+ bias).
//
// The product goes straight to OpenBLAS (cblas_sgemm / cblas_dgemm, row-major, leading dims =
// the views' row strides), so strided column blocks of wider activations need no copy; only the
// broadcast bias and the bias gradient are plain loops. Builds without OpenBLAS (HSTU_WITH_CBLAS
// unset, e.g. the GPU box) use plain row-parallel loops with double accumulators instead:
// correct and slow, there only as the reference of the consistency tests.
#if defined(HSTU_WITH_CBLAS)
#include <cblas.h>
#endif

#include <vector>

#include "core/arena.h"
#include "ops/cpu/common.h"
#include "ops/cpu/gemm.h"

// OpenBLAS's thread control, resolved at link time when the BLAS is OpenBLAS (weak: other BLAS
// libraries leave it null).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace hstu {
void set_cpu_blas_threads(int n) {
  if (n > 0 && openblas_set_num_threads) openblas_set_num_threads(n);
}
}  // namespace hstu

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

#if defined(HSTU_WITH_CBLAS)
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c,
               int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Leading dimension for BLAS: the row stride, at least 1 (BLAS rejects 0 even for empty views).
int ld(const Tensor& t) {
  return static_cast<int>(std::max<int64_t>(t.row_stride, 1));
}

template <typename T>
void product(Ctx&, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
             int64_t m, int64_t n, int64_t k) {
  blas_gemm(desc.trans_a ? CblasTrans : CblasNoTrans, desc.trans_b ? CblasTrans : CblasNoTrans,
            static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), T(desc.alpha), a.as<T>(),
            ld(a), b.as<T>(), ld(b), T(desc.beta), c.as<T>(), ld(c));
}
#else
// Row i of C from a [N] double accumulator: acc[j] = sum_p op(A)[i,p] * op(B)[p,j].
template <typename T>
void product(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
             int64_t m, int64_t n, int64_t k) {
  const Rows<const T> ar = rows_of<const T>(a), br = rows_of<const T>(b);
  const Rows<T> cr = rows_of<T>(c);
  const int nt = detail::threads_for(ctx, m * n * k);
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < k; ++p) {
        const double aip = desc.trans_a ? ar[p][i] : ar[i][p];
        if (desc.trans_b) {
          for (int64_t j = 0; j < n; ++j) acc[j] += aip * br[j][p];
        } else {
          for (int64_t j = 0; j < n; ++j) acc[j] += aip * br[p][j];
        }
      }
      for (int64_t j = 0; j < n; ++j)
        cr[i][j] =
            static_cast<T>(desc.alpha * acc[j] + (desc.beta == 0 ? 0.0 : desc.beta * cr[i][j]));
    }
  }
}
#endif

template <typename T>
void gemm_impl(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
               const Tensor& bias, int64_t m, int64_t n, int64_t k) {
  const Rows<T> cr = rows_of<T>(c);
  const int nt = detail::threads_for(ctx, m * n);
  if (k == 0) {  // C = beta * C (BLAS would reject the empty operands' leading dims)
#pragma omp parallel for num_threads(nt)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) cr[i][j] = desc.beta == 0 ? T(0) : T(desc.beta) * cr[i][j];
  } else {
    product<T>(ctx, desc, a, b, c, m, n, k);
  }
  if (bias.empty()) return;
  const T* bv = bias.as<T>();  // [N]
#pragma omp parallel for num_threads(nt)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) cr[i][j] += bv[j];
}

template <typename T>
void bias_grad_impl(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate) {
  const int64_t m = dy.dim(0), n = dy.dim(1);
  const Rows<const T> dyr = rows_of<const T>(dy);
  T* out = db.as<T>();  // [N]
  detail::for_column_slices(ctx, n, m * n, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(static_cast<size_t>(c1 - c0), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = c0; j < c1; ++j) acc[j - c0] += dyr[i][j];
    for (int64_t j = c0; j < c1; ++j)
      out[j] = static_cast<T>(accumulate ? out[j] + acc[j - c0] : acc[j - c0]);
  });
}

}  // namespace

void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias) {
  check_shape(a, {-1, -1}, "gemm A");
  check_shape(b, {-1, -1}, "gemm B");
  check_shape(c, {-1, -1}, "gemm C");
  const int64_t m = c.dim(0), n = c.dim(1);
  const int64_t k = desc.trans_a ? a.dim(0) : a.dim(1);
  if (desc.trans_a) {
    check_shape(a, {k, m}, "gemm A (trans_a: stored [K,M])");
  } else {
    check_shape(a, {m, k}, "gemm A ([M,K])");
  }
  if (desc.trans_b) {
    check_shape(b, {n, k}, "gemm B (trans_b: stored [N,K])");
  } else {
    check_shape(b, {k, n}, "gemm B ([K,N])");
  }
  detail::check_dtype(a, c.dtype, "gemm A");
  detail::check_dtype(b, c.dtype, "gemm B");
  detail::check_cpu(c, "gemm C");
  if (!bias.empty()) {
    check_shape(bias, {n}, "gemm bias");
    detail::check_dtype(bias, c.dtype, "gemm bias");
  }
  HSTU_CHECK(std::max({m, n, k, a.row_stride, b.row_stride, c.row_stride}) <= INT32_MAX,
             "gemm: dims or strides beyond BLAS's 32-bit ints (", a.str(), ", ", b.str(), ")");
  if (m == 0 || n == 0) return;
  detail::dispatch_float(c, "gemm",
                         [&]<typename T>(T) { gemm_impl<T>(ctx, desc, a, b, c, bias, m, n, k); });
}

void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias) {
  check_shape(d, {-1, -1}, "gemm_residual D");
  check_shape(residual, {d.dim(0), d.dim(1)}, "gemm_residual residual");
  detail::check_dtype(residual, d.dtype, "gemm_residual residual");
  if (residual.data != d.data) copy_tensor(d, residual);
  GemmDesc acc = desc;
  acc.beta = 1.0f;
  cpu::gemm(ctx, acc, a, b, d, bias);
}

void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate) {
  check_shape(dy, {-1, -1}, "bias_grad dy");
  check_shape(db, {dy.dim(1)}, "bias_grad db");
  detail::check_cpu(dy, "bias_grad dy");
  detail::check_dtype(db, dy.dtype, "bias_grad db");
  detail::dispatch_float(dy, "bias_grad",
                         [&]<typename T>(T) { bias_grad_impl<T>(ctx, dy, db, accumulate); });
}

}  // namespace hstu::cpu
