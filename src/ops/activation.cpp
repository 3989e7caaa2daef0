// activation.cpp — the entry points of the activations (ops/activation.h): each runs the backend
// of ctx.device, cpu/activation.h or (in CUDA builds) cuda/activation.h; a CPU-only build throws
// for a CUDA ctx and needs no CUDA symbol. Also the head-structure check both backends share
// (detail/checks.h).
#include "ops/activation.h"

#include "ops/cpu/activation.h"
#include "ops/detail/checks.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/activation.h"
#endif

namespace hstu {

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y, ActHeads heads) {
  if (ctx.cpu()) return cpu::activation_fwd(ctx, act, x, y, heads);
  HSTU_CUDA_DISPATCH(return cuda::activation_fwd(ctx, act, x, y, heads));
}
void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    ActHeads heads) {
  if (ctx.cpu()) return cpu::activation_bwd(ctx, act, x, dy, dx, heads);
  HSTU_CUDA_DISPATCH(return cuda::activation_bwd(ctx, act, x, dy, dx, heads));
}

int64_t check_act_heads(const ActHeads& heads, const Tensor& x,
                        std::initializer_list<const Tensor*> others, const char* op) {
  HSTU_CHECK(!x.empty(), op, ": x is empty");
  HSTU_CHECK(heads.count >= 1 && heads.width >= 0, op, ": bad head structure (", heads.count,
             " heads of width ", heads.width, ")");
  if (heads.count == 1 && heads.width == 0) {  // plain element-wise call: shapes must match
    for (const Tensor* t : others)
      HSTU_CHECK(t->ndim == x.ndim && t->dim(0) == x.dim(0) && t->row_elems() == x.row_elems(), op,
                 ": ", t->str(), " does not have the shape of x ", x.str());
    return x.row_elems();
  }
  HSTU_CHECK(x.ndim == 2 && x.shape[1] % heads.count == 0, op, ": x ", x.str(), " is not 2-D with ",
             heads.count, " heads");
  const int64_t width = heads.width > 0 ? heads.width : x.shape[1] / heads.count;
  for (const Tensor* t : others) {
    const bool ok = t->ndim == 2 && t->shape[0] == x.shape[0] && t->shape[1] % heads.count == 0 &&
                    t->shape[1] / heads.count >= width;
    HSTU_CHECK(ok, op, ": ", t->str(), " is not [", x.shape[0], ", ", heads.count,
               " heads x a stride of at least ", width, " columns]");
  }
  HSTU_CHECK(x.shape[1] / heads.count >= width, op, ": x ", x.str(), " has heads narrower than ",
             width);
  return width;
}

}  // namespace hstu
