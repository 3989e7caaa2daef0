// gemm.cpp — the entry points of the GEMM and the bias gradient (ops/gemm.h): each
// runs the backend of ctx.device, cpu/gemm.h or (in CUDA builds) cuda/gemm.h; a CPU-only
// build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/gemm.h"

#include "ops/cpu/gemm.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/gemm.h"
#endif

namespace hstu {

void gemm(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b, const Tensor& c,
          const Tensor& bias) {
  if (ctx.cpu()) return cpu::gemm(ctx, desc, a, b, c, bias);
  HSTU_CUDA_DISPATCH(return cuda::gemm(ctx, desc, a, b, c, bias));
}
void gemm_residual(Ctx& ctx, const GemmDesc& desc, const Tensor& a, const Tensor& b,
                   const Tensor& residual, const Tensor& d, const Tensor& bias) {
  if (ctx.cpu()) return cpu::gemm_residual(ctx, desc, a, b, residual, d, bias);
  HSTU_CUDA_DISPATCH(return cuda::gemm_residual(ctx, desc, a, b, residual, d, bias));
}
void bias_grad(Ctx& ctx, const Tensor& dy, const Tensor& db, bool accumulate) {
  if (ctx.cpu()) return cpu::bias_grad(ctx, dy, db, accumulate);
  HSTU_CUDA_DISPATCH(return cuda::bias_grad(ctx, dy, db, accumulate));
}

}  // namespace hstu
