// optimizer.cpp — the entry points of the dense optimiser and the gradient sum of squares
// (ops/optimizer.h): each runs the backend of ctx.device, cpu/optimizer.h or (in CUDA builds)
// cuda/optimizer.h; a CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/optimizer.h"

#include "ops/cpu/optimizer.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/optimizer.h"
#endif

namespace hstu {

void dense_optimizer_step(Ctx& ctx, const DenseOptimizerSpec& spec, const Tensor& params,
                          const Tensor& grads, const Tensor& m, const Tensor& v) {
  if (ctx.cpu()) return cpu::dense_optimizer_step(ctx, spec, params, grads, m, v);
  HSTU_CUDA_DISPATCH(return cuda::dense_optimizer_step(ctx, spec, params, grads, m, v));
}
void sum_squares_into(Ctx& ctx, const Tensor& x, const Tensor& out) {
  if (ctx.cpu()) return cpu::sum_squares_into(ctx, x, out);
  HSTU_CUDA_DISPATCH(return cuda::sum_squares_into(ctx, x, out));
}
double sum_squares(Ctx& ctx, const Tensor& x) {
  if (ctx.cpu()) return cpu::sum_squares(ctx, x);
  HSTU_CUDA_DISPATCH(return cuda::sum_squares(ctx, x));
}

}  // namespace hstu
