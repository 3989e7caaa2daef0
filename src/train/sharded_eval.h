// sharded_eval.h — distributed retrieval evaluation against a row-sharded item table: each rank
// scores every rank's queries against its own shard, and the per-shard counts of the items
// ranked above each target are summed over the ranks, so every rank gets its queries' ranks,
// equal to one process's retrieval_rank over the whole normalised table, exactly.
//
// Exactness rests on three facts: the shard's rows and the targets' rows are normalised by the
// same per-row l2norm_fwd the single-process evaluator applies to the full table (a row's result
// depends on that row alone); every score, the target's included, is computed by the one
// fixed-order chain of the rank op's backend (ops/retrieval_rank.h); and the shards partition the
// ids, so the per-shard counts add up to the single-process count (ties broken by global id).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "dist/comm.h"
#include "dist/sharded_table.h"

namespace hstu {

// This rank's queries' ranks, as retrieval_rank defines them (1-based, rank_cap + 1 beyond the
// cap, rank_cap + 2 for a target whose score is not finite).
//   queries[Q, D] f32 on comm.device(): this rank's L2-normalised queries (Q may be 0: then any
//     tensor, even an empty one); targets[Q] (ids in [1, rows)); history_offsets[Q + 1] +
//     history_ids (ids in [0, rows); offsets need not start at 0; for Q = 0 an empty span or
//     one entry) — host spans; l2_eps: the eps of the single-process l2norm_fwd of the table
//     (RetrievalArgs.l2_norm_eps); rank_cap in [1, INT32_MAX - 2].
// Collective: every rank calls it, with its own queries, possibly none. Allocates its buffers
// per call on comm.device() (a normalised copy of the shard, every rank's queries and target
// rows); on CUDA the counts op takes ctx.scratch as retrieval_rank does, for the queries of all
// ranks (cuda runtime_state: retrieval_rank_scratch_bytes(total queries, shard rows)).
// Not between items.fetch and items.push_grads (it uses gather_rows).
std::vector<int32_t> sharded_retrieval_ranks(Ctx& ctx, dist::Comm& comm, dist::ShardedTable& items,
                                             const Tensor& queries,
                                             std::span<const int32_t> targets,
                                             std::span<const int32_t> history_offsets,
                                             std::span<const int32_t> history_ids, float l2_eps,
                                             int32_t rank_cap);

}  // namespace hstu
