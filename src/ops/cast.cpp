// cast.cpp — the entry points of the dtype cast (ops/cast.h): each
// runs the backend of ctx.device, cpu/cast.h or (in CUDA builds) cuda/cast.h; a CPU-only
// build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/cast.h"

#include "ops/cpu/cast.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/cast.h"
#endif

namespace hstu {

void cast(Ctx& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.cpu()) return cpu::cast(ctx, src, dst);
  HSTU_CUDA_DISPATCH(return cuda::cast(ctx, src, dst));
}

}  // namespace hstu
