// layernorm.cpp — the entry points of LayerNorm, the fused LN * u * dropout and dropout
// (ops/layernorm.h): each runs the backend of ctx.device, cpu/layernorm.h or (in CUDA builds)
// cuda/layernorm.h; a CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/layernorm.h"

#include "ops/cpu/layernorm.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/layernorm.h"
#endif

namespace hstu {

void layernorm_fwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                   const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  if (ctx.cpu()) return cpu::layernorm_fwd(ctx, x, w, b, eps, y, mean, rstd);
  HSTU_CUDA_DISPATCH(return cuda::layernorm_fwd(ctx, x, w, b, eps, y, mean, rstd));
}
void layernorm_bwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dy, const Tensor& dx, bool accumulate_dx,
                   const Tensor& dw, const Tensor& db) {
  if (ctx.cpu()) return cpu::layernorm_bwd(ctx, x, w, mean, rstd, dy, dx, accumulate_dx, dw, db);
  HSTU_CUDA_DISPATCH(
      return cuda::layernorm_bwd(ctx, x, w, mean, rstd, dy, dx, accumulate_dx, dw, db));
}
void check_dropout_keep(const Tensor& keep, int64_t rows, int64_t cols, Device device,
                        const char* op) {
  if (keep.empty()) return;
  HSTU_CHECK(keep.dtype == DType::kI32 && keep.ndim == 2 && keep.dim(0) == rows &&
                 keep.dim(1) == dropout_keep_words(cols) && keep.contiguous(),
             op, ": keep must be i32 [", rows, ", ", dropout_keep_words(cols),
             "] (contiguous; a bit per element), got ", keep.str());
  HSTU_CHECK(keep.device == device, op, ": keep is on another device than o (", keep.str(), ")");
}

void ln_mul_dropout_fwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, float eps, const DropoutSpec& drop, const Tensor& keep,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  if (ctx.cpu()) return cpu::ln_mul_dropout_fwd(ctx, o, u, w, b, eps, drop, keep, y, mean, rstd);
  HSTU_CUDA_DISPATCH(
      return cuda::ln_mul_dropout_fwd(ctx, o, u, w, b, eps, drop, keep, y, mean, rstd));
}
void ln_mul_dropout_bwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, const Tensor& mean, const Tensor& rstd,
                        const DropoutSpec& drop, const Tensor& keep, const Tensor& dy,
                        const Tensor& do_, const Tensor& du, const Tensor& dw, const Tensor& db) {
  if (ctx.cpu())
    return cpu::ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, keep, dy, do_, du, dw, db);
  HSTU_CUDA_DISPATCH(return cuda::ln_mul_dropout_bwd(ctx, o, u, w, b, mean, rstd, drop, keep, dy,
                                                     do_, du, dw, db));
}
void dropout_fwd(Ctx& ctx, const Tensor& x, const DropoutSpec& drop, const Tensor& y) {
  if (ctx.cpu()) return cpu::dropout_fwd(ctx, x, drop, y);
  HSTU_CUDA_DISPATCH(return cuda::dropout_fwd(ctx, x, drop, y));
}
void dropout_bwd(Ctx& ctx, const Tensor& dy, const DropoutSpec& drop, const Tensor& dx) {
  if (ctx.cpu()) return cpu::dropout_bwd(ctx, dy, drop, dx);
  HSTU_CUDA_DISPATCH(return cuda::dropout_bwd(ctx, dy, drop, dx));
}

}  // namespace hstu
