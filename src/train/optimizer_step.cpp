// optimizer_step.cpp — the dense optimiser over the flat parameter buffer and the sparse
// optimisers of the embedding tables, for one step; they also clear the gradients.
#include "train/optimizer_step.h"

#include "core/phase_timer.h"
#include "ops/embedding.h"
#include "ops/optimizer.h"

namespace hstu {

void optimizer_step(Ctx& ctx, DenseParams& dense, std::span<EmbeddingTable* const> tables,
                    const OptimizerArgs& o, double lr, int64_t step, const Tensor& loss,
                    bool skip_nonfinite) {
  phase(ctx, "opt.dense");
  // The step's health, before anything is updated: the gradient sum of squares (one reduction
  // over the flat gradients, which clipping needs anyway) and the loss beside it.
  const Tensor health = dense.health();
  sum_squares_into(ctx, dense.flat_grads(), dense.grad_sumsq());
  if (loss.empty())
    fill_zero(health.rows(1, 2), ctx.stream);
  else
    copy_bytes_async(health.rows(1, 2).data, health.device, loss.data, loss.device, sizeof(double),
                     ctx.stream);
  DenseOptimizerSpec spec;
  spec.kind = o.optimizer_str == "sgd"     ? DenseOptimizerSpec::kSgd
              : o.optimizer_str == "adamw" ? DenseOptimizerSpec::kAdamW
                                           : DenseOptimizerSpec::kAdam;
  spec.lr = static_cast<float>(lr);
  spec.beta1 = static_cast<float>(o.adam_beta1);
  spec.beta2 = static_cast<float>(o.adam_beta2);
  spec.eps = static_cast<float>(o.adam_eps);
  spec.step = step;
  if (skip_nonfinite) spec.skip_if_nonfinite = health;
  if (o.grad_clip_norm > 0) {  // the factor is applied on the device: the host does not wait
    spec.clip_norm = o.grad_clip_norm;
    spec.grad_sumsq = dense.grad_sumsq();
  }
  const int64_t nd = dense.num_decay(), n = dense.size();
  spec.weight_decay = static_cast<float>(o.weight_decay);
  if (nd > 0)
    dense_optimizer_step(ctx, spec, dense.flat_params().rows(0, nd), dense.flat_grads().rows(0, nd),
                         dense.flat_m().rows(0, nd), dense.flat_v().rows(0, nd));
  spec.weight_decay = 0.0f;
  if (n > nd)
    dense_optimizer_step(ctx, spec, dense.flat_params().rows(nd, n), dense.flat_grads().rows(nd, n),
                         dense.flat_m().rows(nd, n), dense.flat_v().rows(nd, n));
  fill_zero(dense.flat_grads(), ctx.stream);
  dense.refresh_compute_copy(ctx);

  phase(ctx, "opt.tables");
  for (EmbeddingTable* t : tables)
    sparse_table_step(ctx, *t, o, lr, step, skip_nonfinite ? health : Tensor(), dense.grad_sumsq());
}

void sparse_table_step(Ctx& ctx, EmbeddingTable& table, const OptimizerArgs& o, double lr,
                       int64_t step, const Tensor& skip_if_nonfinite, const Tensor& grad_sumsq) {
  EmbeddingTable* const t = &table;
  const double sparse_lr = o.sparse_learning_rate > 0 ? o.sparse_learning_rate : lr;
  if (o.sparse_optimizer_str == "dense_adam") {
    DenseOptimizerSpec ds;
    ds.kind = DenseOptimizerSpec::kAdam;
    ds.lr = static_cast<float>(sparse_lr);
    ds.beta1 = static_cast<float>(o.adam_beta1);
    ds.beta2 = static_cast<float>(o.adam_beta2);
    ds.eps = static_cast<float>(o.adam_eps);
    ds.step = step;
    ds.skip_if_nonfinite = skip_if_nonfinite;
    if (o.grad_clip_norm > 0) {  // clipped by the dense gradients' norm, as the dense buffer
      ds.clip_norm = o.grad_clip_norm;
      ds.grad_sumsq = grad_sumsq;
    }
    const Tensor w = t->weight.reshape({t->weight.numel()});
    dense_optimizer_step(ctx, ds, w, t->grad.reshape({w.numel()}), t->m.reshape({w.numel()}),
                         t->v.reshape({w.numel()}));
    fill_zero(t->grad, ctx.stream);
    fill_zero(t->touched, ctx.stream);  // every row was updated: no row list needed
    return;
  }
  SparseOptimizerSpec ss;
  ss.kind = o.sparse_optimizer_str == "sgd"                ? SparseOptimizerSpec::kSgd
            : o.sparse_optimizer_str == "row_wise_adagrad" ? SparseOptimizerSpec::kRowWiseAdagrad
                                                           : SparseOptimizerSpec::kAdam;
  ss.lr = static_cast<float>(sparse_lr);
  ss.beta1 = static_cast<float>(o.adam_beta1);
  ss.beta2 = static_cast<float>(o.adam_beta2);
  ss.eps = static_cast<float>(o.adam_eps);
  ss.step = step;
  ss.skip_if_nonfinite = skip_if_nonfinite;
  collect_touched_rows(ctx, t->touched, t->row_list, t->row_count);
  sparse_optimizer_step(ctx, ss, t->weight, t->grad, t->row_list, t->row_count, t->m, t->v);
}

}  // namespace hstu
