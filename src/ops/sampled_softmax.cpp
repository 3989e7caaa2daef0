// sampled_softmax.cpp — the entry points of the sampled-softmax retrieval loss
// (ops/sampled_softmax.h): each runs the backend of ctx.device, cpu/sampled_softmax.h or (in CUDA
// builds) cuda/sampled_softmax.h; a CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/sampled_softmax.h"

#include "ops/cpu/sampled_softmax.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/sampled_softmax.h"
#endif

namespace hstu {

void sampled_softmax(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                     const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                     const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                     const Tensor& touched) {
  if (ctx.cpu())
    return cpu::sampled_softmax(ctx, spec, q, targets, neg_ids, table, loss, dq, d_table, touched);
  HSTU_CUDA_DISPATCH(return cuda::sampled_softmax(ctx, spec, q, targets, neg_ids, table, loss, dq,
                                                  d_table, touched));
}

}  // namespace hstu
