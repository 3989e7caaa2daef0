// gemm.h — matrix products of the training step: C = alpha * op(A) @ op(B) + beta * C (+ bias).
//
// Row-major with per-tensor row strides (views into wider activations work). CPU: a real BLAS
// (OpenBLAS sgemm/dgemm). CUDA: cuBLASLt through a plan cache keyed by GemmDesc + shapes +
// dtypes, built once outside the step; A/B may be bf16/fp16 while C is fp32 (weight gradients
// accumulate straight into the fp32 gradient buffer). The bias is always an f32 parameter
// (f64 when the GEMM is f64).
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

struct GemmDesc {
  bool trans_a = false;  // use A^T: A is stored [K, M]
  bool trans_b = false;  // use B^T: B is stored [N, K]
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: overwrite C; 1: accumulate into C
};

// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C  (+ bias[N] broadcast over rows if given).
void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias = Tensor());

// D[M,N] = alpha * op(A) @ op(B) + residual[M,N]  (+ bias[N]): the residual add of the HSTU
// layer (x_out = x_in + y @ W_o) in the GEMM's epilogue. On CUDA the residual is cuBLASLt's C
// input and D the output (beta = 1), so no copy of x_in into x_out precedes the GEMM. residual
// may be d itself (then this is gemm with beta = 1); desc.beta is ignored.
void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias = Tensor());

// db[N] (+)= column sums of dy[M,N] — the gradient of a broadcast bias.
void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate);

// Caps the threads the CPU BLAS library starts for itself (OpenBLAS keeps its own pool, apart
// from OpenMP's); n <= 0 leaves its default. A no-op with a BLAS that has no such control.
void set_cpu_blas_threads(int n);

}  // namespace hstu
