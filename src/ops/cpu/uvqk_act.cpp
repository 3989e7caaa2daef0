// cpu/uvqk_act.cpp — CPU SiLU between the dense z [T, 4Hd] and the padded u|v|q|k layout, and
// the backward with the column sums of d_z (the uvqk bias gradient) in the same loop.
//
// Plain loops in the element type: dense column c of z maps to column layout.column(c) of the
// padded tensor; the bias gradient is a double accumulator per column over the rows in order
// (the reference the CUDA kernel's fixed-order partial sums are compared with).
#include "ops/cpu/uvqk_act.h"

#include <vector>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

using detail::silu;
using detail::silu_grad;

std::vector<int64_t> column_map(const UvqkLayout& l) {
  std::vector<int64_t> m(static_cast<size_t>(4 * l.hd()));
  for (int64_t c = 0; c < 4 * l.hd(); ++c) m[static_cast<size_t>(c)] = l.column(c);
  return m;
}

template <typename T>
void fwd_impl(Ctx& ctx, const UvqkLayout& l, const Tensor& z, const Tensor& uvqk) {
  const int64_t rows = z.dim(0), n = z.dim(1);
  const std::vector<int64_t> map = column_map(l);
  const Rows<const T> zr = rows_of<const T>(z);
  const Rows<T> yr = rows_of<T>(uvqk);
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * rows * n))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) yr[r][map[static_cast<size_t>(c)]] = silu(zr[r][c]);
}

template <typename T>
void bwd_impl(Ctx& ctx, const UvqkLayout& l, const Tensor& z, const Tensor& d_uvqk,
              const Tensor& d_z, const Tensor& db, bool accumulate) {
  const int64_t rows = z.dim(0), n = z.dim(1);
  const std::vector<int64_t> map = column_map(l);
  const Rows<const T> zr = rows_of<const T>(z), gr = rows_of<const T>(d_uvqk);
  const Rows<T> dr = rows_of<T>(d_z);
  // Column slices: each thread owns whole columns, so d_z in place (dense layout) stays safe
  // and each column's sum runs over the rows in order.
  detail::for_column_slices(ctx, n, 10 * rows * n, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(static_cast<size_t>(c1 - c0), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const T g = gr[r][map[static_cast<size_t>(c)]] * silu_grad(zr[r][c]);
        dr[r][c] = g;
        acc[static_cast<size_t>(c - c0)] += g;
      }
    if (db.empty()) return;
    T* out = db.as<T>();
    for (int64_t c = c0; c < c1; ++c)
      out[c] = static_cast<T>(accumulate ? out[c] + acc[static_cast<size_t>(c - c0)]
                                         : acc[static_cast<size_t>(c - c0)]);
  });
}

}  // namespace

void uvqk_silu_fwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& uvqk) {
  check_uvqk_act(layout, z, uvqk, Tensor(), Tensor(), "uvqk_silu_fwd");
  detail::check_cpu(z, "uvqk_silu_fwd z");
  detail::check_cpu(uvqk, "uvqk_silu_fwd uvqk");
  detail::dispatch_float(z, "uvqk_silu_fwd",
                         [&]<typename T>(T) { fwd_impl<T>(ctx, layout, z, uvqk); });
}

void uvqk_silu_bwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db) {
  check_uvqk_act(layout, z, d_uvqk, d_z, db, "uvqk_silu_bwd");
  detail::check_cpu(z, "uvqk_silu_bwd z");
  detail::check_cpu(d_uvqk, "uvqk_silu_bwd d_uvqk");
  detail::check_cpu(d_z, "uvqk_silu_bwd d_z");
  if (!db.empty()) detail::check_cpu(db, "uvqk_silu_bwd db");
  detail::dispatch_float(z, "uvqk_silu_bwd", [&]<typename T>(T) {
    bwd_impl<T>(ctx, layout, z, d_uvqk, d_z, db, accumulate_db);
  });
}

}  // namespace hstu::cpu
