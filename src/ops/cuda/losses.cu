// losses.cu — CUDA multi-task binary cross-entropy and multi-class cross-entropy from logits,
// loss and dlogits fused (see losses.h for the formulas).
//
// The one decision: the arithmetic is the CPU reference's — double precision, the same
// max-shifted stable forms — with G lanes per row (G = 8 for up to 8 columns, else 32; a row's
// columns are strided over its lanes and combined by a fixed xor-shuffle tree). The loss is
// reduced without atomics: each block sums its rows' losses in a fixed order into one f64
// partial, and a single block adds the partials in index order into loss[0] on the device. The
// grid depends only on N (never on the device), so the same input gives bit-identical loss and
// dlogits run to run. Labels are validated on the host by the CPU backend only; here an invalid
// label makes its row's loss and gradient NaN (a non-finite loss the trainer reports).
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/losses.h"

namespace hstu::cuda {
namespace {

constexpr int kThreads = 256;
// Partials of the block-level sums; 8 KiB of ctx.scratch, within the 1025-double allowance
// ops_scratch_bytes keeps for reductions of this kind.
constexpr int kMaxBlocks = 1024;

struct LossArgs {
  const void* x = nullptr;  // logits [N, K], dtype T
  int64_t ldx = 0;
  const int32_t* labels = nullptr;  // [N]
  void* g = nullptr;                // dlogits [N, K], dtype T; null: loss only
  int64_t ldg = 0;
  int64_t n = 0, k = 0;
  double scale = 1.0;
};

__device__ __forceinline__ double qnan() {
  return __longlong_as_double(0x7ff8000000000000LL);
}

template <int G>
__device__ __forceinline__ double group_sum(double v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <int G>
__device__ __forceinline__ double group_max(double v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sums `acc` over the block in a fixed tree order; thread 0 gets the total.
__device__ double block_sum(double acc) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = acc;
  __syncthreads();
#pragma unroll
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

// One BCE row on the G lanes of its group (lane = index within the group); writes the row's
// gradient when `write`. Returns the row loss (on every lane of the group).
template <int G, typename T>
__device__ double bce_row(const LossArgs& a, int64_t r, int lane, bool write) {
  const T* x = static_cast<const T*>(a.x) + r * a.ldx;
  T* g = write && a.g ? static_cast<T*>(a.g) + r * a.ldg : nullptr;
  const int32_t y = a.labels[r];
  double l = 0.0;
  for (int64_t t = lane; t < a.k; t += G) {
    const double v = to_f32(x[t]), target = (y >> t) & 1;
    const double e = exp(-fabs(v));  // in (0, 1]: never overflows
    l += fmax(v, 0.0) + log1p(e) - target * v;
    if (g) {
      const double sig = v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      const double d = y < 0 ? qnan() : a.scale * (sig - target);
      g[t] = from_f32<T>(static_cast<float>(d));
    }
  }
  l = group_sum<G>(l);
  return y < 0 ? qnan() : l;
}

// One cross-entropy row on the G lanes of its group (as bce_row).
template <int G, typename T>
__device__ double ce_row(const LossArgs& a, int64_t r, int lane, bool write) {
  const T* x = static_cast<const T*>(a.x) + r * a.ldx;
  T* g = write && a.g ? static_cast<T*>(a.g) + r * a.ldg : nullptr;
  const int32_t y = a.labels[r];
  const bool valid = y >= 0 && y < a.k;
  double mx = -INFINITY;
  for (int64_t j = lane; j < a.k; j += G) mx = fmax(mx, static_cast<double>(to_f32(x[j])));
  mx = group_max<G>(mx);
  double se = 0.0;
  for (int64_t j = lane; j < a.k; j += G) se += exp(static_cast<double>(to_f32(x[j])) - mx);
  const double lse = mx + log(group_sum<G>(se));
  if (g) {
    for (int64_t j = lane; j < a.k; j += G) {
      const double p = exp(static_cast<double>(to_f32(x[j])) - lse);
      const double d = valid ? a.scale * (p - (j == y ? 1.0 : 0.0)) : qnan();
      g[j] = from_f32<T>(static_cast<float>(d));
    }
  }
  return valid ? lse - static_cast<double>(to_f32(x[valid ? y : 0])) : qnan();
}

// partial[blockIdx.x] = sum of the row losses of this block's rows (unscaled). Each warp takes
// 32/G consecutive rows per iteration; the loop bound is warp-uniform, so the shuffles always
// have the whole warp (lanes past N compute nothing and add nothing).
template <int G, typename T, bool kBce>
__global__ void __launch_bounds__(kThreads) loss_rows_kernel(LossArgs a, double* partial) {
  constexpr int kRowsPerWarp = 32 / G;
  const int lane = threadIdx.x % G;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kThreads / 32) + threadIdx.x / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  double acc = 0.0;
  for (int64_t r0 = warp * kRowsPerWarp; r0 < a.n; r0 += warps * kRowsPerWarp) {
    const int64_t r = r0 + (threadIdx.x % 32) / G;
    const bool live = r < a.n;
    const int64_t row = live ? r : r0;  // a dead group mirrors a live row and writes nothing
    const double l = kBce ? bce_row<G, T>(a, row, lane, live) : ce_row<G, T>(a, row, lane, live);
    if (live && lane == 0) acc += l;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// loss[0] = scale * sum_{p < parts} partial[p], in a fixed order by one block.
__global__ void __launch_bounds__(kMaxBlocks)
    loss_total_kernel(const double* partial, int64_t parts, double scale, double* loss) {
  __shared__ double part[kMaxBlocks];
  part[threadIdx.x] = static_cast<int64_t>(threadIdx.x) < parts ? partial[threadIdx.x] : 0.0;
  __syncthreads();
  for (int w = kMaxBlocks / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = scale * part[0];
}

void check_args(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                const Tensor& dlogits, const char* op) {
  check_cuda_tensor(logits, op);
  check_shape(logits, {-1, -1}, op);
  check_cuda_tensor(labels, "loss labels");
  check_shape(labels, {logits.dim(0)}, "loss labels");
  HSTU_CHECK(labels.dtype == DType::kI32, "loss labels must be i32, got ", labels.str());
  check_cuda_tensor(loss, "loss");
  check_shape(loss, {1}, "loss");
  HSTU_CHECK(loss.dtype == DType::kF64, "loss must be f64, got ", loss.str());
  if (!dlogits.empty()) {
    check_cuda_tensor(dlogits, "loss dlogits");
    check_shape(dlogits, {logits.dim(0), logits.dim(1)}, "loss dlogits");
    HSTU_CHECK(dlogits.dtype == logits.dtype, "loss dlogits must have the logits' dtype, got ",
               dlogits.str());
  }
}

template <bool kBce>
void run_loss(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
              const Tensor& dlogits, double loss_scale, const char* op) {
  LossArgs a;
  a.x = logits.data, a.ldx = logits.row_stride;
  a.labels = labels.as<int32_t>();
  a.g = dlogits.empty() ? nullptr : dlogits.data;
  a.ldg = dlogits.empty() ? 0 : dlogits.row_stride;
  a.n = logits.dim(0), a.k = logits.dim(1);
  a.scale = loss_scale;
  Scratch scratch(ctx, op);
  const Tensor partial = scratch.alloc(DType::kF64, {kMaxBlocks});
  const bool narrow = a.k <= 8;
  const int64_t rows_per_block = (narrow ? 32 / 8 : 1) * (kThreads / 32);
  const int64_t blocks =
      std::clamp<int64_t>((a.n + rows_per_block - 1) / rows_per_block, 1, kMaxBlocks);
  dispatch_io(logits.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (narrow)
      loss_rows_kernel<8, T, kBce>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream_of(ctx)>>>(a, partial.as<double>());
    else
      loss_rows_kernel<32, T, kBce>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream_of(ctx)>>>(a, partial.as<double>());
  });
  HSTU_CUDA_CHECK_LAUNCH();
  loss_total_kernel<<<1, kMaxBlocks, 0, stream_of(ctx)>>>(partial.as<double>(), blocks, loss_scale,
                                                          loss.as<double>());
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace

void bce_multitask(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  check_args(logits, labels, loss, dlogits, "bce_multitask logits");
  const int64_t k = logits.dim(1);
  HSTU_CHECK(k >= 1 && k <= 31, "bce_multitask: ", k, " tasks (1..31 fit an i32 bitmask)");
  run_loss<true>(ctx, logits, labels, loss, dlogits, loss_scale, "bce_multitask");
}

void cross_entropy(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  check_args(logits, labels, loss, dlogits, "cross_entropy logits");
  HSTU_CHECK(logits.dim(1) >= 1, "cross_entropy: no classes");
  run_loss<false>(ctx, logits, labels, loss, dlogits, loss_scale, "cross_entropy");
}

}  // namespace hstu::cuda
