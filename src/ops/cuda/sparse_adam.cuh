// sparse_adam.cuh — the per-element sparse Adam update that the CUDA dense-table optimiser
// (ops/cuda/embedding.cu) and the dynamic table's fused optimisers (embed/cuda/table_ops.cu)
// share. Every rounding is explicit (__fmaf_rn, __fmul_rn, ...; the _rn intrinsics are never
// contracted), so the two kernels give the same bits: written as plain expressions, nvcc
// contracted beta1 * m + (1 - beta1) * g into fma(1 - beta1, g, beta1 * m) in one translation
// unit and fma(m, beta1, (1 - beta1) * g) in the other, one rounding apart.
#pragma once

namespace hstu::cuda {

// m <- beta1 m + (1 - beta1) g, v <- beta2 v + (1 - beta2) g^2,
// w <- w - lr (m / bc1) / (sqrt(v / bc2) + eps), with bc_i = 1 - beta_i^step.
__device__ __forceinline__ void sparse_adam_elem(float g, float& w, float& m, float& v, float lr,
                                                 float beta1, float beta2, float eps, float bc1,
                                                 float bc2) {
  const float mc = __fmaf_rn(__fsub_rn(1.0f, beta1), g, __fmul_rn(beta1, m));
  const float vc = __fmaf_rn(__fmul_rn(__fsub_rn(1.0f, beta2), g), g, __fmul_rn(beta2, v));
  m = mc;
  v = vc;
  const float step =
      __fdiv_rn(__fmul_rn(lr, __fdiv_rn(mc, bc1)), __fadd_rn(__fsqrt_rn(__fdiv_rn(vc, bc2)), eps));
  w = __fsub_rn(w, step);
}

}  // namespace hstu::cuda
