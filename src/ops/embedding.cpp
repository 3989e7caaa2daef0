// embedding.cpp — the entry points of the embedding lookups, sparse row gradients and sparse
// optimisers (ops/embedding.h): each runs the backend of ctx.device, cpu/embedding.h or (in CUDA
// builds) cuda/embedding.h; a CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/embedding.h"

#include "ops/cpu/embedding.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/embedding.h"
#endif

namespace hstu {

void embedding_fwd(Ctx& ctx, const Tensor& table, const Tensor& ids, float scale,
                   const Tensor& pos_table, const Tensor& positions, const Tensor& out) {
  if (ctx.cpu()) return cpu::embedding_fwd(ctx, table, ids, scale, pos_table, positions, out);
  HSTU_CUDA_DISPATCH(return cuda::embedding_fwd(ctx, table, ids, scale, pos_table, positions, out));
}
void embedding_bwd(Ctx& ctx, const Tensor& dout, const Tensor& ids, float scale,
                   const Tensor& d_table, const Tensor& touched, const Tensor& positions,
                   const Tensor& d_pos) {
  if (ctx.cpu())
    return cpu::embedding_bwd(ctx, dout, ids, scale, d_table, touched, positions, d_pos);
  HSTU_CUDA_DISPATCH(
      return cuda::embedding_bwd(ctx, dout, ids, scale, d_table, touched, positions, d_pos));
}
void collect_touched_rows(Ctx& ctx, const Tensor& touched, const Tensor& rows,
                          const Tensor& count) {
  if (ctx.cpu()) return cpu::collect_touched_rows(ctx, touched, rows, count);
  HSTU_CUDA_DISPATCH(return cuda::collect_touched_rows(ctx, touched, rows, count));
}
void sparse_optimizer_step(Ctx& ctx, const SparseOptimizerSpec& spec, const Tensor& table,
                           const Tensor& grad, const Tensor& rows, const Tensor& count,
                           const Tensor& m, const Tensor& v) {
  if (ctx.cpu()) return cpu::sparse_optimizer_step(ctx, spec, table, grad, rows, count, m, v);
  HSTU_CUDA_DISPATCH(return cuda::sparse_optimizer_step(ctx, spec, table, grad, rows, count, m, v));
}

}  // namespace hstu
