// cpu/retrieval_score.h — the scores and the comparison that every CPU retrieval rank shares
// (cpu/retrieval_rank.cpp: the full-catalogue rank and the per-shard counts of
// ops/retrieval_rank.h). Private to src/ops/.
//
// The one decision: a score is a function of the two rows alone. score(q, x) is the T-typed
// chain acc = 0; acc += q[k] * x[k] for k = 0..D-1, computed by ONE compiled tile kernel
// (retrieval_score.cpp, never inlined) for every (query, item) pair, whatever the pair's
// position in the catalogue, the user chunk or the shard. So the score of a target computed
// from a copy of its row (score_pairs) is bit-identical to the score of that row inside a
// catalogue or a shard (score_block), and a row duplicated anywhere ties exactly. A BLAS GEMM
// gives no such promise (its kernels differ at matrix edges and between shapes).
#pragma once

#include <cstdint>

#include "core/context.h"
#include "ops/cpu/common.h"

namespace hstu::cpu::retrieval {

// out[u * ldo + i] = score(q[u], x[i]) for u < nu, i < ni; rows are D long. OpenMP over blocks
// of items (each thread packs its block once for all nu queries).
template <typename T>
void score_block(const Ctx& ctx, detail::Rows<const T> q, int64_t nu, detail::Rows<const T> x,
                 int64_t ni, int64_t d, T* out, int64_t ldo);

// out[u] = score(q[u], x[u]) for u < n, by the same tile kernel as score_block.
template <typename T>
void score_pairs(const Ctx& ctx, detail::Rows<const T> q, detail::Rows<const T> x, int64_t n,
                 int64_t d, T* out);

// Whether an item (score s, global id) is ranked above the target (score st, id target): a higher
// score, or an equal score and a smaller id (retrieval_rank.h). NaN scores never beat.
template <typename T>
inline bool beats_target(T s, int64_t id, T st, int64_t target) {
  return id < target ? s >= st : s > st;
}

}  // namespace hstu::cpu::retrieval
