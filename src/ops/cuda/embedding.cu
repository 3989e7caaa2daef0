// embedding.cu — CUDA embedding gather (x = E[id] * scale + P[pos]), the gradient scatter into
// the dense fp32 table gradients with touched-row marking, touched-row collection (CUB select)
// and the sparse row-wise optimisers.
//
// The one decision: the scatter has two paths. The fast one adds with fp32 atomics (vector
// atomics on sm_90), so repeated ids make the low bits depend on the order the hardware
// serialises them — results are NOT bit-reproducible. With ctx.deterministic the ids are sorted
// and each row is summed in token order (sorted_scatter.cuh): bit-reproducible, slower
// (one radix sort of T keys plus a pass over dout).
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cmath>
#include <cub/device/device_select.cuh>

#include "ops/cuda/common.cuh"
#include "ops/cuda/embedding.h"
#include "ops/cuda/sorted_scatter.cuh"
#include "ops/cuda/sparse_adam.cuh"
#include "ops/optimizer.h"

namespace hstu::cuda {
namespace {

template <typename TT, typename TO>
struct EmbFwdOp {
  const TT* table;
  int64_t ldt;
  const int32_t* ids;
  float scale;
  const TT* pos;  // null: no positional table
  int64_t ldp;
  const int32_t* positions;
  TO* out;
  int64_t ldo;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float v[V];
    load_vec<V>(table + ids[r] * ldt + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= scale;
    if (pos) {
      float p[V];
      load_vec<V>(pos + positions[r] * ldp + c, p);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] += p[j];
    }
    store_vec<V>(out + r * ldo + c, v);
  }
};

template <typename TG>
struct EmbBwdAtomicOp {
  const TG* dout;
  int64_t ldg;
  const int32_t* ids;
  float scale;
  float* d_table;
  int64_t ldt;
  uint8_t* touched;
  const int32_t* positions;
  float* d_pos;  // null: no positional gradient
  int64_t ldp;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float g[V], gs[V];
    load_vec<V>(dout + r * ldg + c, g);
    const int32_t id = ids[r];
#pragma unroll
    for (int j = 0; j < V; ++j) gs[j] = g[j] * scale;
    atomic_add_vec<V>(d_table + id * ldt + c, gs);
    if (c == 0) touched[id] = 1;
    if (d_pos) atomic_add_vec<V>(d_pos + positions[r] * ldp + c, g);
  }
};

__global__ void mark_touched_kernel(const int32_t* ids, int64_t n, uint8_t* touched) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) touched[ids[i]] = 1;
}

// Source rows of the deterministic scatter: item p is token p of dout, times a constant.
template <typename TG>
struct TokenRows {
  const TG* dout;
  int64_t ldg;
  float scale;
  __device__ const TG* row(int32_t p) const { return dout + p * ldg; }
  __device__ float coef(int32_t) const { return scale; }
};

struct SparseOptArgs {
  float* table;
  float* grad;
  int64_t ld;  // row stride of table, grad, m, v
  float* m;
  float* v;
  const int32_t* rows;
  const int32_t* count;  // device: number of listed rows
  int64_t d;
  float lr, beta1, beta2, eps;
  float bc1, bc2;       // 1 - beta^step
  const double* guard;  // skip_if_nonfinite: [guard_n] values (nullptr: no guard)
  int64_t guard_n;
};

// Updates row r of the table (and its optimiser state) and zeroes its gradient; one warp.
template <SparseOptimizerSpec::Kind K>
__device__ void sparse_opt_row(const SparseOptArgs& a, int64_t r, int lane) {
  float* w = a.table + r * a.ld;
  float* g = a.grad + r * a.ld;
  if constexpr (K == SparseOptimizerSpec::kAdam) {
    float* m = a.m + r * a.ld;
    float* v = a.v + r * a.ld;
    for (int64_t c = lane; c < a.d; c += 32) {
      sparse_adam_elem(g[c], w[c], m[c], v[c], a.lr, a.beta1, a.beta2, a.eps, a.bc1, a.bc2);
      g[c] = 0.0f;
    }
  } else if constexpr (K == SparseOptimizerSpec::kRowWiseAdagrad) {
    float ss = 0.0f;
    for (int64_t c = lane; c < a.d; c += 32) ss += g[c] * g[c];
    ss = warp_sum(ss);
    const float st = a.m[r] + ss / static_cast<float>(a.d);  // state[V], contiguous
    __syncwarp();
    if (lane == 0) a.m[r] = st;
    const float mult = a.lr / (sqrtf(st) + a.eps);
    for (int64_t c = lane; c < a.d; c += 32) {
      w[c] -= mult * g[c];
      g[c] = 0.0f;
    }
  } else {
    for (int64_t c = lane; c < a.d; c += 32) {
      w[c] -= a.lr * g[c];
      g[c] = 0.0f;
    }
  }
}

// One warp per listed row (grid-stride over the device-side count): update, then zero the row's
// gradient.
// A guarded step whose guard is not finite only zeroes the listed rows' gradients.
template <SparseOptimizerSpec::Kind K>
__global__ void sparse_opt_kernel(SparseOptArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t n = *a.count;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const bool skip = a.guard && !all_finite(a.guard, a.guard_n);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; i < n;
       i += warps) {
    if (!skip) {
      sparse_opt_row<K>(a, a.rows[i], lane);
      continue;
    }
    float* g = a.grad + a.rows[i] * a.ld;
    for (int64_t c = lane; c < a.d; c += 32) g[c] = 0.0f;
  }
}

void check_ids(const Tensor& ids, int64_t t, const char* what) {
  check_cuda_tensor(ids, what);
  check_shape(ids, {t}, what);
  HSTU_CHECK(ids.dtype == DType::kI32 && ids.contiguous(), what, " must be contiguous i32, got ",
             ids.str());
}

void check_f32_table(const Tensor& t, int64_t d, const char* what) {
  check_cuda_tensor(t, what);
  check_shape(t, {-1, d}, what);
  HSTU_CHECK(t.dtype == DType::kF32, what, " must be f32 on CUDA, got ", t.str());
}

// CUB's temporary storage for selecting the touched rows of a [v] table.
size_t select_temp_bytes(int64_t v) {
  size_t bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceSelect::Flagged(
      nullptr, bytes, thrust::counting_iterator<int32_t>(0), static_cast<const uint8_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), v));
  return bytes;
}

}  // namespace

size_t embedding_bwd_scratch_bytes(int64_t tokens, int64_t cols, bool det) {
  if (!det || tokens == 0) return 0;
  return sorted_scatter::sort_scratch_bytes(tokens) +
         sorted_scatter::row_sum_scratch_bytes(tokens, cols);
}

size_t collect_touched_scratch_bytes(int64_t table_rows) {
  return arena_bytes(sizeof(int32_t)) + arena_bytes(select_temp_bytes(table_rows));
}

void embedding_fwd(Ctx& ctx, const Tensor& table, const Tensor& ids, float scale,
                   const Tensor& pos_table, const Tensor& positions, const Tensor& out) {
  check_cuda_tensor(table, "embedding table");
  check_shape(table, {-1, -1}, "embedding table");
  const int64_t d = table.dim(1);
  check_cuda_tensor(out, "embedding out");
  check_shape(out, {-1, d}, "embedding out");
  const int64_t t = out.dim(0);
  check_ids(ids, t, "embedding ids");
  HSTU_CHECK(pos_table.empty() == positions.empty(),
             "embedding_fwd: pos_table and positions must be given together");
  if (!pos_table.empty()) {
    check_cuda_tensor(pos_table, "embedding pos_table");
    check_shape(pos_table, {-1, d}, "embedding pos_table");
    HSTU_CHECK(pos_table.dtype == table.dtype,
               "embedding_fwd: pos_table must have the table's "
               "dtype, got ",
               pos_table.str());
    check_ids(positions, t, "embedding positions");
  }
  // Rows stay rows here (the gather indexes them), so no flattening.
  const Rows2d rc{t, d};
  const bool vec8 = can_vec8(d, {&table, &pos_table, &out});
  dispatch_vec(vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(table.dtype, "embedding table", [&](auto tt) {
      using TT = typename decltype(tt)::type;
      dispatch_io(out.dtype, "embedding out", [&](auto to) {
        using TO = typename decltype(to)::type;
        const bool pos = !pos_table.empty();
        launch_ew2d<V>(ctx, rc,
                       EmbFwdOp<TT, TO>{
                           static_cast<const TT*>(table.data), table.row_stride, ids.as<int32_t>(),
                           scale, pos ? static_cast<const TT*>(pos_table.data) : nullptr,
                           pos ? pos_table.row_stride : 0, pos ? positions.as<int32_t>() : nullptr,
                           static_cast<TO*>(out.data), out.row_stride});
      });
    });
  });
}

void embedding_bwd(Ctx& ctx, const Tensor& dout, const Tensor& ids, float scale,
                   const Tensor& d_table, const Tensor& touched, const Tensor& positions,
                   const Tensor& d_pos) {
  check_cuda_tensor(dout, "embedding dout");
  check_shape(dout, {-1, -1}, "embedding dout");
  const int64_t t = dout.dim(0), d = dout.dim(1);
  check_f32_table(d_table, d, "embedding d_table");
  const int64_t v = d_table.dim(0);
  check_ids(ids, t, "embedding ids");
  check_cuda_tensor(touched, "embedding touched");
  check_shape(touched, {v}, "embedding touched");
  HSTU_CHECK(touched.dtype == DType::kU8, "embedding touched must be u8, got ", touched.str());
  if (!d_pos.empty()) {
    HSTU_CHECK(!positions.empty(), "embedding_bwd: d_pos given without positions");
    check_f32_table(d_pos, d, "embedding d_pos");
    check_ids(positions, t, "embedding positions");
  }
  if (t == 0) return;
  const bool with_pos = !d_pos.empty();
  if (!ctx.deterministic) {
    const bool vec8 = can_vec8(d, {&dout, &d_table, &d_pos});
    dispatch_vec(vec8, [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      dispatch_io(dout.dtype, "embedding dout", [&](auto tg) {
        using TG = typename decltype(tg)::type;
        launch_ew2d<V>(
            ctx, Rows2d{t, d},
            EmbBwdAtomicOp<TG>{static_cast<const TG*>(dout.data), dout.row_stride,
                               ids.as<int32_t>(), scale, d_table.as<float>(), d_table.row_stride,
                               touched.as<uint8_t>(), with_pos ? positions.as<int32_t>() : nullptr,
                               with_pos ? d_pos.as<float>() : nullptr,
                               with_pos ? d_pos.row_stride : 0});
      });
    });
    return;
  }
  mark_touched_kernel<<<static_cast<unsigned>((t + 255) / 256), 256, 0, stream_of(ctx)>>>(
      ids.as<int32_t>(), t, touched.as<uint8_t>());
  HSTU_CUDA_CHECK_LAUNCH();
  dispatch_io(dout.dtype, "embedding dout", [&](auto tg) {
    using TG = typename decltype(tg)::type;
    const auto scatter = [&](const Tensor& keys, const Tensor& dst, float coef) {
      Scratch scratch(ctx, "embedding_bwd (deterministic)");
      const sorted_scatter::Sorted s =
          sorted_scatter::sort_keys(ctx, scratch, keys.as<int32_t>(), t, dst.dim(0));
      sorted_scatter::row_sum(
          ctx, s, TokenRows<TG>{static_cast<const TG*>(dout.data), dout.row_stride, coef},
          dst.as<float>(), dst.row_stride, d, sorted_scatter::row_width(d, {&dout, &dst}));
    };
    scatter(ids, d_table, scale);
    if (with_pos) scatter(positions, d_pos, 1.0f);
  });
}

void collect_touched_rows(Ctx& ctx, const Tensor& touched, const Tensor& rows,
                          const Tensor& count) {
  check_cuda_tensor(touched, "collect_touched_rows touched");
  check_shape(touched, {-1}, "collect_touched_rows touched");
  HSTU_CHECK(touched.dtype == DType::kU8, "collect_touched_rows: touched must be u8, got ",
             touched.str());
  const int64_t v = touched.dim(0);
  check_cuda_tensor(rows, "collect_touched_rows rows");
  check_shape(rows, {-1}, "collect_touched_rows rows");
  HSTU_CHECK(rows.dtype == DType::kI32 && rows.dim(0) >= v,
             "collect_touched_rows: rows must be i32 with room for ", v, " rows, got ", rows.str());
  check_cuda_tensor(count, "collect_touched_rows count");
  check_shape(count, {1}, "collect_touched_rows count");
  HSTU_CHECK(count.dtype == DType::kI32, "collect_touched_rows: count must be i32, got ",
             count.str());
  if (v == 0) {
    HSTU_CUDA_CHECK(cudaMemsetAsync(count.data, 0, sizeof(int32_t), stream_of(ctx)));
    return;
  }
  Scratch scratch(ctx, "collect_touched_rows");
  const thrust::counting_iterator<int32_t> first(0);
  size_t temp_bytes = select_temp_bytes(v);
  Tensor temp = scratch.alloc(DType::kU8, {static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))});
  HSTU_CUDA_CHECK(cub::DeviceSelect::Flagged(temp.data, temp_bytes, first, touched.as<uint8_t>(),
                                             rows.as<int32_t>(), count.as<int32_t>(), v,
                                             stream_of(ctx)));
  HSTU_CUDA_CHECK(cudaMemsetAsync(touched.data, 0, static_cast<size_t>(v), stream_of(ctx)));
}

void sparse_optimizer_step(Ctx& ctx, const SparseOptimizerSpec& spec, const Tensor& table,
                           const Tensor& grad, const Tensor& rows, const Tensor& count,
                           const Tensor& m, const Tensor& v) {
  check_f32_table(table, -1, "sparse optimizer table");
  const int64_t nrows = table.dim(0), d = table.dim(1);
  check_f32_table(grad, d, "sparse optimizer grad");
  check_shape(grad, {nrows, d}, "sparse optimizer grad");
  HSTU_CHECK(grad.row_stride == table.row_stride,
             "sparse optimizer: grad and table strides differ");
  check_cuda_tensor(rows, "sparse optimizer rows");
  check_shape(rows, {-1}, "sparse optimizer rows");
  HSTU_CHECK(rows.dtype == DType::kI32, "sparse optimizer rows must be i32, got ", rows.str());
  check_cuda_tensor(count, "sparse optimizer count");
  check_shape(count, {1}, "sparse optimizer count");
  HSTU_CHECK(count.dtype == DType::kI32, "sparse optimizer: count must be i32, got ", count.str());
  SparseOptArgs a{};
  a.table = table.as<float>(), a.grad = grad.as<float>(), a.ld = table.row_stride;
  a.rows = rows.as<int32_t>(), a.count = count.as<int32_t>(), a.d = d;
  a.lr = spec.lr, a.beta1 = spec.beta1, a.beta2 = spec.beta2, a.eps = spec.eps;
  if (!spec.skip_if_nonfinite.empty()) {
    check_cuda_tensor(spec.skip_if_nonfinite, "sparse optimizer skip_if_nonfinite");
    HSTU_CHECK(spec.skip_if_nonfinite.dtype == DType::kF64 && spec.skip_if_nonfinite.contiguous(),
               "sparse optimizer skip_if_nonfinite must be contiguous f64, got ",
               spec.skip_if_nonfinite.str());
    a.guard = spec.skip_if_nonfinite.as<double>();
    a.guard_n = spec.skip_if_nonfinite.numel();
  }
  if (spec.kind == SparseOptimizerSpec::kAdam) {
    HSTU_CHECK(spec.step >= 1, "sparse Adam: step is 1-based, got ", spec.step);
    check_f32_table(m, d, "sparse Adam m");
    check_shape(m, {nrows, d}, "sparse Adam m");
    check_f32_table(v, d, "sparse Adam v");
    check_shape(v, {nrows, d}, "sparse Adam v");
    HSTU_CHECK(m.row_stride == a.ld && v.row_stride == a.ld,
               "sparse Adam: m and v must have the table's row stride");
    a.m = m.as<float>(), a.v = v.as<float>();
    a.bc1 = static_cast<float>(1.0 - std::pow(double(spec.beta1), double(spec.step)));
    a.bc2 = static_cast<float>(1.0 - std::pow(double(spec.beta2), double(spec.step)));
  } else if (spec.kind == SparseOptimizerSpec::kRowWiseAdagrad) {
    check_cuda_tensor(m, "row-wise Adagrad state (m)");
    check_shape(m, {nrows}, "row-wise Adagrad state (m)");
    HSTU_CHECK(m.dtype == DType::kF32, "row-wise Adagrad state must be f32, got ", m.str());
    a.m = m.as<float>();
  }
  // The count is only known on the device: enough warps for every row up to a few waves, the
  // kernel strides over the rest (and exits at once when nothing was touched).
  constexpr int kWarps = 8;
  const int64_t capacity = std::min(rows.dim(0), nrows);
  if (capacity == 0) return;
  const unsigned grid =
      static_cast<unsigned>(std::min<int64_t>((capacity + kWarps - 1) / kWarps, 8192));
  switch (spec.kind) {
    case SparseOptimizerSpec::kAdam:
      sparse_opt_kernel<SparseOptimizerSpec::kAdam><<<grid, kWarps * 32, 0, stream_of(ctx)>>>(a);
      break;
    case SparseOptimizerSpec::kRowWiseAdagrad:
      sparse_opt_kernel<SparseOptimizerSpec::kRowWiseAdagrad>
          <<<grid, kWarps * 32, 0, stream_of(ctx)>>>(a);
      break;
    case SparseOptimizerSpec::kSgd:
      sparse_opt_kernel<SparseOptimizerSpec::kSgd><<<grid, kWarps * 32, 0, stream_of(ctx)>>>(a);
      break;
  }
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
