// cpu/gemm.h — the CPU backend of the GEMM and the bias gradient (ops/gemm.h), defined in
// cpu/gemm.cpp: what gemm.cpp dispatches to on a CPU ctx. Private to src/ops/ (tests/gpu
// includes it to compare the backends).
#pragma once

#include "ops/gemm.h"

namespace hstu::cpu {
void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias);
void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias);
void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate);
}  // namespace hstu::cpu
