// retrieval_rank.cpp — the entry points of the full-catalogue retrieval rank and its per-shard
// counts (ops/retrieval_rank.h): each runs the backend of ctx.device, cpu/retrieval_rank.h or (in
// CUDA builds) cuda/retrieval_rank.h; a CPU-only build throws for a CUDA ctx and needs no CUDA
// symbol.
#include "ops/retrieval_rank.h"

#include "ops/cpu/retrieval_rank.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/retrieval_rank.h"
#endif

namespace hstu {

void retrieval_rank(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
                    const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                    const Tensor& ranks) {
  if (ctx.cpu())
    return cpu::retrieval_rank(ctx, queries, items, targets, history_offsets, history_ids, rank_cap,
                               ranks);
  HSTU_CUDA_DISPATCH(return cuda::retrieval_rank(ctx, queries, items, targets, history_offsets,
                                                 history_ids, rank_cap, ranks));
}

void retrieval_rank_counts(Ctx& ctx, const Tensor& queries, const Tensor& target_rows,
                           const Tensor& targets, const Tensor& shard_items,
                           const Tensor& shard_ids, const Tensor& history_offsets,
                           const Tensor& history_ids, int32_t rank_cap, const Tensor& counts) {
  if (ctx.cpu())
    return cpu::retrieval_rank_counts(ctx, queries, target_rows, targets, shard_items, shard_ids,
                                      history_offsets, history_ids, rank_cap, counts);
  HSTU_CUDA_DISPATCH(return cuda::retrieval_rank_counts(ctx, queries, target_rows, targets,
                                                        shard_items, shard_ids, history_offsets,
                                                        history_ids, rank_cap, counts));
}

}  // namespace hstu
