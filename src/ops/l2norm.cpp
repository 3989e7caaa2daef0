// l2norm.cpp — the entry points of the row-wise L2 normalisation (ops/l2norm.h): each
// runs the backend of ctx.device, cpu/l2norm.h or (in CUDA builds) cuda/l2norm.h; a CPU-only
// build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/l2norm.h"

#include "ops/cpu/l2norm.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/l2norm.h"
#endif

namespace hstu {

void l2norm_fwd(Ctx& ctx, const Tensor& x, float eps, const Tensor& y, const Tensor& norms) {
  if (ctx.cpu()) return cpu::l2norm_fwd(ctx, x, eps, y, norms);
  HSTU_CUDA_DISPATCH(return cuda::l2norm_fwd(ctx, x, eps, y, norms));
}
void l2norm_bwd(Ctx& ctx, const Tensor& y, const Tensor& norms, float eps, const Tensor& dy,
                const Tensor& dx, bool accumulate) {
  if (ctx.cpu()) return cpu::l2norm_bwd(ctx, y, norms, eps, dy, dx, accumulate);
  HSTU_CUDA_DISPATCH(return cuda::l2norm_bwd(ctx, y, norms, eps, dy, dx, accumulate));
}

}  // namespace hstu
