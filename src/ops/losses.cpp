// losses.cpp — the entry points of the ranking losses (multi-task BCE, cross-entropy)
// (ops/losses.h): each runs the backend of ctx.device, cpu/losses.h or (in CUDA builds)
// cuda/losses.h; a CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/losses.h"

#include "ops/cpu/losses.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/losses.h"
#endif

namespace hstu {

void bce_multitask(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  if (ctx.cpu()) return cpu::bce_multitask(ctx, logits, labels, loss, dlogits, loss_scale);
  HSTU_CUDA_DISPATCH(return cuda::bce_multitask(ctx, logits, labels, loss, dlogits, loss_scale));
}
void cross_entropy(Ctx& ctx, const Tensor& logits, const Tensor& labels, const Tensor& loss,
                   const Tensor& dlogits, double loss_scale) {
  if (ctx.cpu()) return cpu::cross_entropy(ctx, logits, labels, loss, dlogits, loss_scale);
  HSTU_CUDA_DISPATCH(return cuda::cross_entropy(ctx, logits, labels, loss, dlogits, loss_scale));
}

}  // namespace hstu
