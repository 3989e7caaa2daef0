// retrieval_rank.h — full-catalogue ranking for retrieval evaluation.
//
// rank(u) = 1 + #{items i in 1..V-1, i != target, i not in history(u), score(i) > score(target)}
// (+ items with an equal score and a smaller id), capped at rank_cap + 1. This equals the
// target's position in a top-K list over the filtered catalogue, without sorting anything.
// A target whose score is not finite (NaN or +-inf: broken weights or an overflow) ranks last,
// as rank_cap + 2, so callers can count such users; an item with a NaN score never beats one.
// Scores are dot products of the L2-normalised query with the L2-normalised item table.
//
// Distributed evaluation splits the catalogue into shards (train/sharded_eval.h): each shard
// counts the items above the target with retrieval_rank_counts, and the rank is
// min(1 + sum of the counts over the shards, rank_cap + 1) — the same number, because a score is
// a function of the query and the row alone (each backend computes every score, the target's
// included, by one fixed-order chain: cpu/retrieval_score.h, cuda/retrieval_rank.cu), so a
// target scored from a copy of its row gets the bits it gets inside the full table.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// queries[U,D] (normalised), items[V,D] (normalised; row 0 = padding, never ranked),
// targets[U] i32, history_offsets[U+1] i32 + history_ids[*] i32 (items to filter per user),
// ranks[U] i32 out. rank_cap must be in [1, INT32_MAX - 2].
void retrieval_rank(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
                    const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                    const Tensor& ranks);

// The terms one shard contributes to retrieval_rank: counts[u] = #{shard rows i with
// shard_ids[i] != 0, shard_ids[i] != targets[u], shard_ids[i] not in history(u), and
// score(i) > score(target) or (equal and shard_ids[i] < targets[u])}, capped at rank_cap, where
// score(target) = <queries[u], target_rows[u]>. So for shards that partition the catalogue,
// min(1 + sum of counts, rank_cap + 1) = retrieval_rank of the full table, exactly.
// counts[u] = kRankCountNonFinite (-1) when the target's score is not finite (the caller ranks
// such a target rank_cap + 2).
// queries[U,D], target_rows[U,D] (the targets' normalised rows), shard_items[n,D] (normalised),
// all one float dtype; targets[U] i32 (>= 1); shard_ids[n] i32: the global id of each shard row,
// strictly ascending (a rank's owned ids are: dist/sharding.h), >= 0; history_offsets[U+1] i32 +
// history_ids[*] i32 (global ids, >= 0; ids outside the shard are ignored); counts[U] i32 out.
// rank_cap in [1, INT32_MAX - 2]. n may be 0 (every count is 0).
inline constexpr int32_t kRankCountNonFinite = -1;
void retrieval_rank_counts(Ctx& ctx, const Tensor& queries, const Tensor& target_rows,
                           const Tensor& targets, const Tensor& shard_items,
                           const Tensor& shard_ids, const Tensor& history_offsets,
                           const Tensor& history_ids, int32_t rank_cap, const Tensor& counts);

}  // namespace hstu
