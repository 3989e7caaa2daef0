// jagged.h — the jagged reshuffles of generative ranking: building each sample's token sequence
// from per-feature embeddings, taking the candidates' item rows out of the layer output, and the
// host-side layout metadata (token offsets, target counts, positions) of that sequence.
//
// The ranking layout of sample b with n_b events (o_b = offsets[b]), C contextual tokens and
// nc_b candidates (recsys-examples §2.1), with k = 2 when action tokens are interleaved, else 1:
//   tokens      [ctx_1 .. ctx_C | item_0, action_0, item_1, action_1, ... ]   L_b = C + k n_b
//   out row     o'_b + c         = ctx_emb[b*C + c]                (o'_b = out_offsets[b]
//               o'_b + C + k i   = item_emb[o_b + i]                       = b*C + k o_b)
//               o'_b + C + k i+1 = action_emb[o_b + i]   (k = 2)
//   targets     the last k nc_b tokens (the candidates' items and actions)
//   positions   min(n, L_b - k nc_b, NB - 1) for token n of the sample: contextual tokens
//               0..C-1, history counting on, every candidate token the first post-history slot.
// The shaping decision: the op takes plain jagged [rows, D] tensors and offsets and is a pure
// row permutation (forward a gather, backward the inverse gather, every gradient row written
// exactly once), so it needs no atomics on any backend and the backward overwrites. Row moves
// copy bytes unchanged (CPU: f32/f64 rows; CUDA: f32/bf16/f16/f64 rows), so the backends agree
// bit for bit. The CPU validates the offsets on the host; CUDA never reads them on the host and
// trusts them to match the tensors' row counts (ranking_layout's output does).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// out[B*C + k*T, D] = the ranking token sequence; out_offsets i32 [B+1] = its row offsets.
// ctx_emb [B*C, D] (empty when C = 0), item_emb [T, D], action_emb [T, D] (empty: no action
// tokens, k = 1); offsets i32 [B+1] event offsets (on the op's device). Rows may be strided.
void ranking_tokens_fwd(Ctx& ctx, const Tensor& ctx_emb, const Tensor& item_emb,
                        const Tensor& action_emb, const Tensor& offsets, int32_t num_contextual,
                        const Tensor& out, const Tensor& out_offsets);
// The gradient split back: d_ctx [B*C, D], d_item [T, D], d_action [T, D] (empty when the
// forward had no action tokens) overwritten from d_out [B*C + k*T, D].
void ranking_tokens_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& offsets,
                        int32_t num_contextual, const Tensor& d_ctx, const Tensor& d_item,
                        const Tensor& d_action);

// out[N, D] (N = sum nc_b): row cand_offsets[b] + j = x[tok_offsets[b+1] - stride*nc_b +
// stride*j], the item row of candidate j of sample b (stride = k tokens per event), where
// x [T', D] is the layer output, tok_offsets i32 [B+1] its row offsets and cand_offsets i32
// [B+1] the prefix sums of the candidate counts.
void gather_candidate_rows(Ctx& ctx, const Tensor& x, const Tensor& tok_offsets,
                           const Tensor& cand_offsets, int32_t stride, const Tensor& out);
// dx[T', D] overwritten: the candidate rows from d_out [N, D], every other row 0.
void gather_candidate_rows_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& tok_offsets,
                               const Tensor& cand_offsets, int32_t stride, const Tensor& dx);

// Host metadata of a ranking batch's token sequence (what the attention, the position
// embedding and gather_candidate_rows need), from the batch's event offsets [B+1] and
// num_candidates [B].
struct RankingLayout {
  std::vector<int32_t> token_offsets;      // [B+1] row offsets of the token sequence
  std::vector<int32_t> candidate_offsets;  // [B+1] prefix sums of num_candidates
  std::vector<int32_t> num_contexts;       // [B] = C (the attention's contextual prefix)
  std::vector<int32_t> num_targets;        // [B] = k nc_b (the attention's targets)
  std::vector<int32_t> positions;          // [sum L_b] position index of every token
  // The same positions per feature, in the row order of ranking_tokens_fwd's inputs, so that
  // embedding_fwd can add P[pos] per table before the tokens are interleaved.
  std::vector<int32_t> context_positions;  // [B*C]
  std::vector<int32_t> item_positions;     // [T]
  std::vector<int32_t> action_positions;   // [T] (empty without action tokens)
  int32_t max_seqlen = 0;                  // longest L_b of the batch
};
// interleave = action tokens present (k = 2); num_position_buckets NB >= 1.
void ranking_layout(std::span<const int32_t> offsets, std::span<const int32_t> num_candidates,
                    int32_t num_contextual, bool interleave, int64_t num_position_buckets,
                    RankingLayout& out);

}  // namespace hstu
