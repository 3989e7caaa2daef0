// cpu/embedding.cpp — CPU embedding gather (x = E[id] * scale + P[pos]), the gradient scatter
// into dense table gradients with touched-row marking, touched-row collection, and the sparse
// row-wise optimisers (Adam, row-wise Adagrad, SGD).
//
// The scatter is parallel over column slices, not tokens: each thread owns some columns of every
// table row and visits the tokens in order, so repeated ids need no atomics and the sums do not
// depend on the thread count. Ids are range-checked before any parallel region.
#include "ops/cpu/embedding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/common.h"
#include "ops/optimizer.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

// ids[T] i32, each in [0, n); `what` names them in the error.
void check_ids(const Tensor& ids, int64_t t, int64_t n, const char* what) {
  check_shape(ids, {t}, what);
  detail::check_dtype(ids, DType::kI32, what);
  const int32_t* p = ids.as<int32_t>();
  for (int64_t i = 0; i < t; ++i)
    HSTU_CHECK(p[i] >= 0 && p[i] < n, what, "[", i, "] = ", p[i], " is outside [0, ", n, ")");
}

// count i32 [1] in host memory.
void check_count(const Tensor& count, const char* what) {
  check_shape(count, {1}, what);
  detail::check_dtype(count, DType::kI32, what);
  detail::check_cpu(count, what);
}

// table [*, D] of the given float dtype.
void check_table(const Tensor& t, int64_t d, DType dtype, const char* what) {
  check_shape(t, {-1, d}, what);
  detail::check_dtype(t, dtype, what);
}

}  // namespace

void embedding_fwd(Ctx& ctx, const Tensor& table, const Tensor& ids, float scale,
                   const Tensor& pos_table, const Tensor& positions, const Tensor& out) {
  check_shape(table, {-1, -1}, "embedding table");
  const int64_t d = table.dim(1);
  check_table(out, d, table.dtype, "embedding out");
  const int64_t t = out.dim(0);
  check_ids(ids, t, table.dim(0), "embedding ids");
  HSTU_CHECK(pos_table.empty() == positions.empty(),
             "embedding_fwd: pos_table and positions must be given together");
  if (!pos_table.empty()) {
    check_table(pos_table, d, table.dtype, "embedding pos_table");
    check_ids(positions, t, pos_table.dim(0), "embedding positions");
  }
  detail::dispatch_float(table, "embedding_fwd", [&]<typename T>(T) {
    const Rows<const T> tab = rows_of<const T>(table);
    const Rows<T> o = rows_of<T>(out);
    const int32_t* id = ids.as<int32_t>();
    const T s = static_cast<T>(scale);
    const bool with_pos = !pos_table.empty();
    const Rows<const T> pos = with_pos ? rows_of<const T>(pos_table) : Rows<const T>{};
    const int32_t* pid = with_pos ? positions.as<int32_t>() : nullptr;
#pragma omp parallel for num_threads(detail::threads_for(ctx, 2 * t * d))
    for (int64_t i = 0; i < t; ++i) {
      const T* e = tab[id[i]];
      if (with_pos) {
        const T* p = pos[pid[i]];
        for (int64_t c = 0; c < d; ++c) o[i][c] = e[c] * s + p[c];
      } else {
        for (int64_t c = 0; c < d; ++c) o[i][c] = e[c] * s;
      }
    }
  });
}

void embedding_bwd(Ctx& ctx, const Tensor& dout, const Tensor& ids, float scale,
                   const Tensor& d_table, const Tensor& touched, const Tensor& positions,
                   const Tensor& d_pos) {
  check_shape(dout, {-1, -1}, "embedding dout");
  const int64_t t = dout.dim(0), d = dout.dim(1);
  check_table(d_table, d, dout.dtype, "embedding d_table");
  const int64_t v = d_table.dim(0);
  check_ids(ids, t, v, "embedding ids");
  check_shape(touched, {v}, "embedding touched");
  detail::check_dtype(touched, DType::kU8, "embedding touched");
  if (!d_pos.empty()) {
    HSTU_CHECK(!positions.empty(), "embedding_bwd: d_pos given without positions");
    check_table(d_pos, d, dout.dtype, "embedding d_pos");
    check_ids(positions, t, d_pos.dim(0), "embedding positions");
  }
  detail::dispatch_float(dout, "embedding_bwd", [&]<typename T>(T) {
    const Rows<const T> g = rows_of<const T>(dout);
    const Rows<T> dt = rows_of<T>(d_table);
    const int32_t* id = ids.as<int32_t>();
    const T s = static_cast<T>(scale);
    const bool with_pos = !d_pos.empty();
    const Rows<T> dp = with_pos ? rows_of<T>(d_pos) : Rows<T>{};
    const int32_t* pid = with_pos ? positions.as<int32_t>() : nullptr;
    detail::for_column_slices(ctx, d, 2 * t * d, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < t; ++i) {
        T* row = dt[id[i]];
        for (int64_t c = c0; c < c1; ++c) row[c] += g[i][c] * s;
        if (with_pos) {
          T* prow = dp[pid[i]];
          for (int64_t c = c0; c < c1; ++c) prow[c] += g[i][c];
        }
      }
    });
  });
  uint8_t* mark = touched.as<uint8_t>();
  const int32_t* id = ids.as<int32_t>();
  for (int64_t i = 0; i < t; ++i) mark[id[i]] = 1;
}

void collect_touched_rows(Ctx&, const Tensor& touched, const Tensor& rows, const Tensor& count) {
  check_shape(touched, {-1}, "collect_touched_rows touched");
  detail::check_dtype(touched, DType::kU8, "collect_touched_rows touched");
  const int64_t v = touched.dim(0);
  check_shape(rows, {-1}, "collect_touched_rows rows");
  detail::check_dtype(rows, DType::kI32, "collect_touched_rows rows");
  HSTU_CHECK(rows.dim(0) >= v, "collect_touched_rows: rows ", rows.str(), " cannot hold all ", v,
             " rows of touched");
  check_count(count, "collect_touched_rows count");
  uint8_t* mark = touched.as<uint8_t>();
  int32_t* out = rows.as<int32_t>();
  int64_t n = 0;
  for (int64_t r = 0; r < v; ++r)
    if (mark[r]) out[n++] = static_cast<int32_t>(r);
  std::memset(mark, 0, static_cast<size_t>(v));
  *count.as<int32_t>() = static_cast<int32_t>(n);
}

void sparse_optimizer_step(Ctx& ctx, const SparseOptimizerSpec& spec, const Tensor& table,
                           const Tensor& grad, const Tensor& rows, const Tensor& count,
                           const Tensor& m, const Tensor& v) {
  check_shape(table, {-1, -1}, "sparse optimizer table");
  check_count(count, "sparse optimizer count");
  const int64_t n = *count.as<int32_t>();
  detail::check_cpu(table, "sparse optimizer table");
  const int64_t nrows = table.dim(0), d = table.dim(1);
  check_shape(grad, {nrows, d}, "sparse optimizer grad");
  detail::check_dtype(grad, table.dtype, "sparse optimizer grad");
  check_shape(rows, {-1}, "sparse optimizer rows");
  detail::check_dtype(rows, DType::kI32, "sparse optimizer rows");
  HSTU_CHECK(n >= 0 && n <= rows.dim(0), "sparse optimizer: n = ", n, " rows, but rows is ",
             rows.str());
  const int32_t* rv = rows.as<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    HSTU_CHECK(rv[i] >= 0 && rv[i] < nrows && (i == 0 || rv[i] > rv[i - 1]),
               "sparse optimizer: rows must be ascending and distinct in [0, ", nrows,
               ") (as collect_touched_rows returns them); rows[", i, "] = ", rv[i]);
  if (spec.kind == SparseOptimizerSpec::kAdam) {
    HSTU_CHECK(spec.step >= 1, "sparse Adam: step is 1-based, got ", spec.step);
    check_shape(m, {nrows, d}, "sparse Adam m");
    detail::check_dtype(m, table.dtype, "sparse Adam m");
    check_shape(v, {nrows, d}, "sparse Adam v");
    detail::check_dtype(v, table.dtype, "sparse Adam v");
  } else if (spec.kind == SparseOptimizerSpec::kRowWiseAdagrad) {
    check_shape(m, {nrows}, "row-wise Adagrad state (m)");
    detail::check_dtype(m, table.dtype, "row-wise Adagrad state (m)");
  }
  const Tensor& guard = spec.skip_if_nonfinite;
  if (!guard.empty()) {
    detail::check_cpu(guard, "sparse optimizer skip_if_nonfinite");
    detail::check_dtype(guard, DType::kF64, "sparse optimizer skip_if_nonfinite");
  }
  const bool skip = !guard.empty() && !all_finite(guard.as<double>(), guard.numel());
  detail::dispatch_float(table, "sparse_optimizer_step", [&]<typename T>(T) {
    const Rows<T> w = rows_of<T>(table), g = rows_of<T>(grad);
    if (skip) {  // a non-finite step: no update, the gradient rows are cleared all the same
      for (int64_t i = 0; i < n; ++i) std::fill(g[rv[i]], g[rv[i]] + d, T(0));
      return;
    }
    const double lr = spec.lr, b1 = spec.beta1, b2 = spec.beta2, eps = spec.eps;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(spec.step));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(spec.step));
    const auto kind = spec.kind;
    const Rows<T> mr = kind == SparseOptimizerSpec::kAdam ? rows_of<T>(m) : Rows<T>{};
    const Rows<T> vr = kind == SparseOptimizerSpec::kAdam ? rows_of<T>(v) : Rows<T>{};
    T* state = kind == SparseOptimizerSpec::kRowWiseAdagrad ? m.as<T>() : nullptr;
#pragma omp parallel for num_threads(detail::threads_for(ctx, 8 * n * d))
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = rv[i];
      T* wr = w[r];
      T* gr = g[r];
      if (kind == SparseOptimizerSpec::kAdam) {
        // Adam with bias correction at the global step: w -= lr * m^ / (sqrt(v^) + eps).
        for (int64_t c = 0; c < d; ++c) {
          const double gc = gr[c];
          const double mc = b1 * mr[r][c] + (1 - b1) * gc;
          const double vc = b2 * vr[r][c] + (1 - b2) * gc * gc;
          mr[r][c] = static_cast<T>(mc);
          vr[r][c] = static_cast<T>(vc);
          wr[c] = static_cast<T>(wr[c] - lr * (mc / bc1) / (std::sqrt(vc / bc2) + eps));
        }
      } else if (kind == SparseOptimizerSpec::kRowWiseAdagrad) {
        // FBGEMM EXACT_ROWWISE_ADAGRAD: state += mean(g^2); w -= lr * g / (sqrt(state) + eps).
        double ss = 0;
        for (int64_t c = 0; c < d; ++c) ss += double(gr[c]) * gr[c];
        const double st = state[r] + ss / static_cast<double>(d);
        state[r] = static_cast<T>(st);
        const double mult = lr / (std::sqrt(st) + eps);
        for (int64_t c = 0; c < d; ++c) wr[c] = static_cast<T>(wr[c] - mult * gr[c]);
      } else {
        for (int64_t c = 0; c < d; ++c) wr[c] = static_cast<T>(wr[c] - lr * gr[c]);
      }
      for (int64_t c = 0; c < d; ++c) gr[c] = T(0);
    }
  });
}

}  // namespace hstu::cpu
