// gemm.cu — CUDA GEMM through the cuBLASLt plan cache (gemm, and gemm_residual whose residual
// is cuBLASLt's separate C input), and the bias-gradient column sum.
//
// The one decision: the GEMM itself is cuBLASLt (bf16/fp16 or fp32 operands, fp32 accumulation,
// bias fused in the epilogue where cuBLASLt supports the dtypes); this file only validates,
// looks the plan up and launches. bias_grad is a deterministic two-stage column sum (fixed row
// chunks per block, partials in ctx.scratch, reduced in a fixed order).
//
// NOTE (ML-1M HSTU-large step, dy [14.5k, 50] bf16, H200, ncu): bias_grad took 14.6 us for the
// partial sums (one dependent load per row) plus 14 us for the shared reduce_partials (one thread
// per column looping over 114 parts) per layer, more than the layer's two backward GEMMs; the
// partial sums now keep 8 rows' loads in flight and a warp per column reduces the parts (now the
// shared reduce_partials itself, runtime_state.cu): 4.1 + 3.4 us, and the step's bwd.gemm_out
// phase 0.221 instead of 0.304 ms.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cublaslt_plans.h"
#include "ops/cuda/gemm.h"

namespace hstu::cuda {
namespace {

uint16_t ptr_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) | 256;
  return static_cast<uint16_t>(a & (~a + 1));
}

// c[M, N] += bias[N] (only when cuBLASLt has no bias epilogue for the dtypes).
template <typename TC, typename TB>
__global__ void add_bias_kernel(TC* c, int64_t ldc, const TB* bias, int64_t m, int64_t n) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= n) return;
  const float bv = to_f32(bias[col]);
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    TC* p = c + r * ldc + col;
    *p = from_f32<TC>(to_f32(*p) + bv);
  }
}

// Stage 1 of bias_grad: partial[blockIdx.x][N] = column sums of rows [r0, r1) of dy.
// Block = (tx column-vector lanes) x (ty row lanes); each thread loads kAhead of its rows before
// adding them in row order (several loads in flight), and the ty partial sums are combined in smem
// in a fixed order.
template <int V, typename T>
__global__ void colsum_partial_kernel(const T* dy, int64_t ld, int64_t m, int64_t n,
                                      int64_t rows_per_part, float* partial) {
  constexpr int kAhead = 8;
  extern __shared__ float smem[];  // [ty][tx * V]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = blockIdx.x * rows_per_part;
  const int64_t r1 = min(m, r0 + rows_per_part);
  const int64_t step = blockDim.y;
  for (int64_t c0 = 0; c0 < n; c0 += static_cast<int64_t>(blockDim.x) * V) {
    const int64_t c = c0 + static_cast<int64_t>(tx) * V;
    float acc[V] = {};
    if (c < n) {
      for (int64_t r = r0 + ty; r < r1; r += kAhead * step) {
        float v[kAhead][V];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {  // past the end: row r (valid, not added)
          const int64_t ru = r + u * step < r1 ? r + u * step : r;
          load_vec<V>(dy + ru * ld + c, v[u]);
        }
#pragma unroll
        for (int u = 0; u < kAhead; ++u)
          if (r + u * step < r1)
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] += v[u][i];
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) smem[(ty * blockDim.x + tx) * V + i] = acc[i];
    __syncthreads();
    if (ty == 0 && c < n) {
      for (int j = 1; j < static_cast<int>(blockDim.y); ++j)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += smem[(j * blockDim.x + tx) * V + i];
#pragma unroll
      for (int i = 0; i < V; ++i) partial[blockIdx.x * n + c + i] = acc[i];
    }
    __syncthreads();
  }
}

// Rows summed by each block of bias_grad's first stage.
int64_t bias_grad_rows_per_part(int64_t m) {
  const int64_t parts = partial_blocks(m, 128);
  return (m + parts - 1) / parts;
}

}  // namespace

size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols) {
  if (rows == 0) return 0;
  const int64_t per = bias_grad_rows_per_part(rows);
  return arena_bytes(sizeof(float) * static_cast<size_t>((rows + per - 1) / per * cols));
}

namespace {

// C = alpha op(A) op(B) + beta C (+ bias), or with `residual` (not C): C = alpha op(A) op(B) +
// residual (+ bias), the residual being cuBLASLt's C input and C its D output.
void gemm_impl(Ctx& ctx, const GemmDesc& desc_in, const Tensor& a, const Tensor& b, const Tensor& c,
               const Tensor& bias, const Tensor* residual) {
  GemmDesc desc = desc_in;
  if (residual != nullptr) {
    check_cuda_tensor(*residual, "gemm_residual residual");
    HSTU_CHECK(c.ndim == 2, "gemm_residual: D must be 2-D, got ", c.str());
    check_shape(*residual, {c.dim(0), c.dim(1)}, "gemm_residual residual");
    HSTU_CHECK(residual->dtype == c.dtype, "gemm_residual: residual ", residual->str(), " and D ",
               c.str(), " dtypes differ");
    desc.beta = 1.0f;
    if (residual->data == c.data && residual->row_stride == c.row_stride) residual = nullptr;
  }
  HSTU_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2, "gemm takes 2-D tensors, got A ", a.str(),
             " B ", b.str(), " C ", c.str());
  check_cuda_tensor(a, "gemm A");
  check_cuda_tensor(b, "gemm B");
  check_cuda_tensor(c, "gemm C");
  const int64_t m = desc.trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = desc.trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = desc.trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = desc.trans_b ? b.dim(0) : b.dim(1);
  HSTU_CHECK(k == kb, "gemm: inner dims differ: op(A) ", a.str(), " op(B) ", b.str());
  check_shape(c, {m, n}, "gemm C");
  if (!bias.empty()) {
    check_cuda_tensor(bias, "gemm bias");
    check_shape(bias, {n}, "gemm bias");
  }
  HSTU_CHECK(a.dtype == b.dtype, "gemm: A and B dtypes differ (", a.str(), ", ", b.str(), ")");
  HSTU_CHECK(a.dtype == DType::kF32 ? c.dtype == DType::kF32
                                    : (c.dtype == a.dtype || c.dtype == DType::kF32),
             "gemm: unsupported dtypes A/B ", dtype_name(a.dtype), " C ", dtype_name(c.dtype),
             " (CUDA: f32 x f32 -> f32, bf16/f16 x same -> same or f32)");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty reduction: C = beta * C (+ bias); only the no-op case occurs in training
    HSTU_CHECK(desc.beta == 1.0f && bias.empty(), "gemm with K = 0 supports only beta = 1");
    if (residual) copy_tensor(c, *residual, ctx.stream);
    return;
  }

  BlasState& s = blas_state(ctx);
  GemmPlanKey key;
  // Only sizes that are no layout's leading extent are bucketed (cuBLASLt requires ld >= rows):
  // m unless A is transposed, k when only A is; in the model these are the token counts.
  key.m = desc.trans_a ? m : gemm_size_bucket(m);
  key.n = n;
  key.k = desc.trans_a && !desc.trans_b ? gemm_size_bucket(k) : k;
  key.lda = a.row_stride, key.ldb = b.row_stride, key.ldc = c.row_stride;
  key.a = a.dtype, key.b = b.dtype, key.c = c.dtype;
  key.trans_a = desc.trans_a, key.trans_b = desc.trans_b;
  key.has_bias = !bias.empty();
  key.bias = key.has_bias ? bias.dtype : DType::kF32;
  key.accumulate = desc.beta != 0.0f;
  key.tf32 = s.allow_tf32;
  key.align_a = ptr_alignment(a.data), key.align_b = ptr_alignment(b.data);
  key.align_c = ptr_alignment(c.data);
  key.align_bias = key.has_bias ? ptr_alignment(bias.data) : 0;
  if (residual) key.ldr = residual->row_stride, key.align_r = ptr_alignment(residual->data);
  const void* c_in = residual ? residual->data : c.data;
  const float alpha = desc.alpha, beta = desc.beta;
  const auto run = [&](const GemmPlan& plan) {
    set_plan_sizes(plan, key, m, n, k);
    if (plan.bias_in_epilogue) {
      const void* bp = bias.data;
      HSTU_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bp, sizeof(bp)));
    }
    // cuBLASLt's A is our B (see cublaslt_plans.cpp); its C is c_in (the residual, or c itself)
    // and its D is c.
    return cublasLtMatmul(s.handle, plan.desc, &alpha, b.data, plan.layout_a, a.data, plan.layout_b,
                          &beta, c_in, plan.c_layout(), c.data, plan.layout_c, &plan.algo,
                          s.workspace, s.workspace_bytes, stream_of(ctx));
  };
  const GemmPlan* plan = &s.plan(key, bias.data);
  if (run(*plan) != CUBLAS_STATUS_SUCCESS) {  // the bucket's algorithm refused this size
    key.m = m, key.n = n, key.k = k, key.exact = true;
    plan = &s.plan(key, bias.data);
    HSTU_CUBLAS_CHECK(run(*plan));
  }
  const bool bias_in_epilogue = plan->bias_in_epilogue;
  if (key.has_bias && !bias_in_epilogue) {
    dispatch_io(c.dtype, "gemm C", [&](auto tc) {
      using TC = typename decltype(tc)::type;
      dispatch_io(bias.dtype, "gemm bias", [&](auto tb) {
        using TB = typename decltype(tb)::type;
        const dim3 grid(static_cast<unsigned>((n + 255) / 256),
                        static_cast<unsigned>(std::min<int64_t>(m, 1024)));
        add_bias_kernel<TC, TB><<<grid, 256, 0, stream_of(ctx)>>>(
            static_cast<TC*>(c.data), c.row_stride, static_cast<const TB*>(bias.data), m, n);
        HSTU_CUDA_CHECK_LAUNCH();
      });
    });
  }
}

}  // namespace

void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias) {
  gemm_impl(ctx, desc, a, b, c, bias, nullptr);
}

void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias) {
  gemm_impl(ctx, desc, a, b, d, bias, &residual);
}

void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate) {
  HSTU_CHECK(dy.ndim == 2, "bias_grad: dy must be 2-D, got ", dy.str());
  check_cuda_tensor(dy, "bias_grad dy");
  check_cuda_tensor(db, "bias_grad db");
  const int64_t m = dy.dim(0), n = dy.dim(1);
  check_shape(db, {n}, "bias_grad db");
  HSTU_CHECK(db.dtype == DType::kF32, "bias_grad: db must be f32, got ", db.str());
  if (n == 0) return;
  if (m == 0) {
    if (!accumulate) HSTU_CUDA_CHECK(cudaMemsetAsync(db.data, 0, db.nbytes(), stream_of(ctx)));
    return;
  }
  Scratch scratch(ctx, "bias_grad");
  const int64_t rows_per_part = bias_grad_rows_per_part(m);
  const int64_t nparts = (m + rows_per_part - 1) / rows_per_part;
  Tensor partial = scratch.alloc(DType::kF32, {nparts, n});
  dispatch_io(dy.dtype, "bias_grad dy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_vec(can_vec8(n, {&dy}), [&](auto vtag) {
      constexpr int V = decltype(vtag)::value;
      const int64_t vecs = (n + V - 1) / V;
      const int tx = static_cast<int>(std::min<int64_t>(256, (vecs + 31) / 32 * 32));
      const dim3 block(tx, 256 / tx);
      const size_t smem = sizeof(float) * V * 256;
      colsum_partial_kernel<V, T><<<static_cast<unsigned>(nparts), block, smem, stream_of(ctx)>>>(
          static_cast<const T*>(dy.data), dy.row_stride, m, n, rows_per_part, partial.as<float>());
      HSTU_CUDA_CHECK_LAUNCH();
    });
  });
  reduce_partials(ctx, partial.as<float>(), nparts, n, n, n, db.as<float>(), nullptr, accumulate);
}

}  // namespace hstu::cuda
