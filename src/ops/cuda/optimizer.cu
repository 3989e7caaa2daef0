// optimizer.cu — CUDA dense optimiser step (Adam, AdamW, SGD) over the flat fp32 parameter
// buffer, and the deterministic f64 sum of squares for gradient clipping.
//
// The one decision: the step is one fused element-wise pass (params, grads, m, v read once, 8
// floats per thread through 16-byte accesses), with the bias corrections precomputed on the host
// in double and the clipping factor read from the device (no host round trip); sum_squares splits
// the buffer into a fixed number of blocks determined by its size alone, so the clipping norm is
// bit-identical on every run and every GPU model.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/optimizer.h"

namespace hstu::cuda {
namespace {

struct DenseArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, wd, gs;
  float bc1, bc2;       // 1 - beta^step
  const double* sumsq;  // clipping: the squared gradient norm (nullptr: no clipping)
  double clip;
  const double* guard;  // skip_if_nonfinite: [guard_n] values (nullptr: no guard)
  int64_t guard_n;
};

template <DenseOptimizerSpec::Kind K>
struct DenseStepOp {
  DenseArgs a;
  template <int V>
  __device__ void apply(int64_t, int64_t c) const {
    if (a.guard && !all_finite(a.guard, a.guard_n)) return;  // a skipped (non-finite) step
    float p[V], g[V];
    load_vec_rw<V>(a.p + c, p);
    load_vec<V>(a.g + c, g);
    const float gs = a.sumsq ? a.gs * clip_factor(a.clip, *a.sumsq) : a.gs;
    if constexpr (K == DenseOptimizerSpec::kSgd) {
#pragma unroll
      for (int j = 0; j < V; ++j) p[j] -= a.lr * (gs * g[j] + a.wd * p[j]);
    } else {
      float m[V], v[V];
      load_vec_rw<V>(a.m + c, m);
      load_vec_rw<V>(a.v + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float gj = gs * g[j];
        if constexpr (K == DenseOptimizerSpec::kAdamW) {
          p[j] -= a.lr * a.wd * p[j];  // decoupled decay of the weight itself
        } else {
          gj += a.wd * p[j];  // Adam: L2 through the gradient
        }
        m[j] = a.beta1 * m[j] + (1.0f - a.beta1) * gj;
        v[j] = a.beta2 * v[j] + (1.0f - a.beta2) * gj * gj;
        p[j] -= a.lr * (m[j] / a.bc1) / (sqrtf(v[j] / a.bc2) + a.eps);
      }
      store_vec<V>(a.m + c, m);
      store_vec<V>(a.v + c, v);
    }
    store_vec<V>(a.p + c, p);
  }
};

constexpr int kSumThreads = 256;
constexpr int64_t kSumMaxBlocks = 1024;

// Block-wide fixed-order sum of one double per thread (blockDim.x == kSumThreads).
__device__ double block_sum(double s) {
  __shared__ double part[kSumThreads / 32];
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kSumThreads / 32; ++w) total += part[w];
  return total;
}

// partial[b] = sum of squares of elements [b * chunk, (b+1) * chunk).
__global__ void __launch_bounds__(kSumThreads)
    sum_squares_partial_kernel(const float* x, int64_t n, int64_t chunk, double* partial) {
  const int64_t b0 = blockIdx.x * chunk, b1 = min(n, b0 + chunk);
  double s = 0.0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += kSumThreads) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumThreads)
    sum_partials_kernel(const double* partial, int64_t parts, double* out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < parts; i += kSumThreads) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

void check_flat(const Tensor& t, int64_t n, const char* what) {
  check_cuda_tensor(t, what);
  HSTU_CHECK(t.dtype == DType::kF32 && t.contiguous() && t.numel() == n, what,
             " must be a contiguous f32 buffer of ", n, " elements, got ", t.str());
}

}  // namespace

void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                          const Tensor& grads, const Tensor& m, const Tensor& v) {
  const int64_t n = params.numel();
  check_flat(params, n, "dense optimizer params");
  check_flat(grads, n, "dense optimizer grads");
  DenseArgs a{};
  a.p = params.as<float>(), a.g = grads.as<float>();
  a.lr = spec.lr, a.beta1 = spec.beta1, a.beta2 = spec.beta2, a.eps = spec.eps;
  a.wd = spec.weight_decay, a.gs = spec.grad_scale;
  if (spec.clip_norm > 0) {
    check_cuda_tensor(spec.grad_sumsq, "dense optimizer grad_sumsq");
    HSTU_CHECK(spec.grad_sumsq.dtype == DType::kF64 && spec.grad_sumsq.numel() == 1,
               "dense optimizer grad_sumsq must be f64 [1], got ", spec.grad_sumsq.str());
    a.sumsq = spec.grad_sumsq.as<double>();
    a.clip = spec.clip_norm;
  }
  if (!spec.skip_if_nonfinite.empty()) {
    check_cuda_tensor(spec.skip_if_nonfinite, "dense optimizer skip_if_nonfinite");
    HSTU_CHECK(spec.skip_if_nonfinite.dtype == DType::kF64 && spec.skip_if_nonfinite.contiguous(),
               "dense optimizer skip_if_nonfinite must be contiguous f64, got ",
               spec.skip_if_nonfinite.str());
    a.guard = spec.skip_if_nonfinite.as<double>();
    a.guard_n = spec.skip_if_nonfinite.numel();
  }
  if (spec.kind != DenseOptimizerSpec::kSgd) {
    HSTU_CHECK(spec.step >= 1, "dense Adam: step is 1-based, got ", spec.step);
    check_flat(m, n, "dense optimizer m");
    check_flat(v, n, "dense optimizer v");
    a.m = m.as<float>(), a.v = v.as<float>();
    a.bc1 = static_cast<float>(1.0 - std::pow(double(spec.beta1), double(spec.step)));
    a.bc2 = static_cast<float>(1.0 - std::pow(double(spec.beta2), double(spec.step)));
  }
  const Rows2d rc{1, n};
  const bool vec8 = can_vec8_2d(rc, {&params, &grads}) &&
                    (spec.kind == DenseOptimizerSpec::kSgd || can_vec8_2d(rc, {&m, &v}));
  dispatch_vec(vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    switch (spec.kind) {
      case DenseOptimizerSpec::kAdam:
        return launch_ew2d<V>(ctx, rc, DenseStepOp<DenseOptimizerSpec::kAdam>{a});
      case DenseOptimizerSpec::kAdamW:
        return launch_ew2d<V>(ctx, rc, DenseStepOp<DenseOptimizerSpec::kAdamW>{a});
      case DenseOptimizerSpec::kSgd:
        return launch_ew2d<V>(ctx, rc, DenseStepOp<DenseOptimizerSpec::kSgd>{a});
    }
  });
}

void sum_squares_into(Ctx& ctx, const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  check_flat(x, n, "sum_squares x");
  check_cuda_tensor(out, "sum_squares out");
  HSTU_CHECK(out.dtype == DType::kF64 && out.numel() == 1, "sum_squares: out must be f64 [1], got ",
             out.str());
  if (n == 0) {
    HSTU_CUDA_CHECK(cudaMemsetAsync(out.data, 0, sizeof(double), stream_of(ctx)));
    return;
  }
  Scratch scratch(ctx, "sum_squares");
  // NOTE: the partition depends on n only (not on the SM count): the same bits on any GPU.
  const int64_t parts = std::min(kSumMaxBlocks, (n + 4095) / 4096);
  const int64_t chunk = (n + parts - 1) / parts;
  Tensor partial = scratch.alloc(DType::kF64, {parts});
  double* pp = static_cast<double*>(partial.data);
  sum_squares_partial_kernel<<<static_cast<unsigned>(parts), kSumThreads, 0, stream_of(ctx)>>>(
      x.as<float>(), n, chunk, pp);
  HSTU_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kSumThreads, 0, stream_of(ctx)>>>(pp, parts, out.as<double>());
  HSTU_CUDA_CHECK_LAUNCH();
}

double sum_squares(Ctx& ctx, const Tensor& x) {
  Scratch scratch(ctx, "sum_squares result");
  const Tensor out = scratch.alloc(DType::kF64, {1});
  cuda::sum_squares_into(ctx, x, out);
  double result = 0.0;
  HSTU_CUDA_CHECK(
      cudaMemcpyAsync(&result, out.data, sizeof(double), cudaMemcpyDeviceToHost, stream_of(ctx)));
  HSTU_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return result;
}

}  // namespace hstu::cuda
