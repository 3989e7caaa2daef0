// cuda/gemm.h — the CUDA backend of the GEMM and the bias gradient (ops/gemm.h), defined in
// cuda/gemm.cu (CUDA builds only): what gemm.cpp dispatches to on a CUDA ctx. Private to
// src/ops/ (tests/gpu includes it to compare the backends); no CUDA types, so host code may
// include it.
#pragma once

#include "ops/gemm.h"

namespace hstu::cuda {
void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias);
void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias);
void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate);
}  // namespace hstu::cuda
