// retrieval_rank.h — full-catalogue ranking for retrieval evaluation.
//
// rank(u) = 1 + #{items i in 1..V-1, i != target, i not in history(u), score(i) > score(target)}
// (+ items with an equal score and a smaller id), capped at rank_cap + 1. This equals the
// target's position in a top-K list over the filtered catalogue, without sorting anything.
// A target whose score is not finite (NaN or +-inf: broken weights or an overflow) ranks last,
// as rank_cap + 2, so callers can count such users; an item with a NaN score never beats one.
// Scores are dot products of the L2-normalised query with the L2-normalised item table.
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

}  // namespace hstu
